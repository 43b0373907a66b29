"""A GPU owner under `--shadow sampled` against the mock (docs/gpu.md "Shadow policies").

Requires what tests/test_nvdrv_owner.py requires (ptxas, the mock). Guarantees checked: the
sampled policy prints the interpreter's bits, the full policy's output; the events state the
policy, chain every step and say which were proven (the first two, the last, those getrandom
drew: the mock answers getrandom, after the step's chain event); a card that computes another
bit on a proven step is refused gpu-shadow-mismatch there, after its hash was written; one that
lies on a step left unproven finishes, and `verify-record --replay` names that step; the chain
reads only the card's tree digest D_k: an unproven step copies back its 32 bytes and nothing
else, a proven one the card's messages before and after it; digest kernels that lie are refused
at a proven step and found by replay elsewhere; a proven step starts from the card's kept states,
whose digest must be the previous step's; `--shadow-rate N`; under exact_sum G is the card's
(xsum_round), and so are the update's exact dots (`reduce`), their bits the interpreter's exact
sums, a wrong rounding or term refused on a proven step and found by replay on another; a scalar
state reading a reduction is the card's (`scalars`), proven and replayed as the rest; one the
host would still need, and an unknown policy, are refused at start; a malformed events file is
refused by name.
"""
import re

import pytest

import oracle
from alphac.ptx.digest import message
from conftest import alphac, example, exact_sum_variant
from alphac.driver import compile_file
from alphac.refusals import Refusal, exit_code
from test_nvdrv_owner import card_for, need_mock, refused, run

SAMPLED = ("--shadow", "sampled")


def off_by_one(ptx):                # the update's first add becomes a subtraction
    return ptx.replace("add.rn.f64", "sub.rn.f64", 1)


def said(r, word):
    return [int(e.split(" ")[1]) for e in r.events.split("\n") if e.startswith(word + " ")]


def draws(*values):                 # getrandom's answers: 8 bytes a step
    return b"".join(v.to_bytes(8, "little") for v in values)


def write_events(tmp_path, r):
    (tmp_path / "events.log").write_text(r.events)
    return tmp_path / "events.log"


@pytest.mark.parametrize("name", ["lsq_adam", "independent_state", "logistic"])   # logistic: minibatches
def test_sampled_prints_the_interpreters_bits_and_says_what_it_proved(name, tmp_path):
    need_mock()
    from alphac.ir.interp import format_state, run as interp_run
    data = ("--data", example(name).parent)                   # logistic reads its rows at run time
    r, built = run(name, 90, args=("--steps", "6", *SAMPLED, *data), draws=b"\x01")   # never drawn
    assert (r.returncode, r.stderr, r.errors) == (0, "", [])
    lr = compile_file(example(name)).learner
    assert r.stdout == format_state(lr, interp_run(lr, 6)) == run(name, 90, args=("--steps", "6", *data))[0].stdout
    assert "\nshadow sampled 1/8 @" in r.events and said(r, "chain") == [1, 2, 3, 4, 5, 6]
    assert said(r, "proven") == [1, 2, 6]
    assert [la[0] for la in r.launches] == [b.kernel.name for b in built.kernels] * 6   # none twice
    assert r.submissions == 1 + 6 + 3   # no scalar reads G: a step's kernels one submission; a
                                        # proven step's message copied back by one more (no launch)
    assert sum(t[0] == "getrandom" for t in r.trace) == 3                              # steps 3..5
    from alphac.tools.replay import replay_chain
    assert replay_chain(lr, write_events(tmp_path, r), 6) is None
    # what the card copies back to the host: an unproven step (3, 4, 5) its digest D_k alone, 32
    # bytes; a proven one (1, 2, 6) also the message before and after the step
    g, words = built.gpu, sum(k for _, k in message(lr))
    dout, read = (g.buffers["dout"], g.results["dout"], 32), [(g.buffers["dprev"], g.results["dprev"], 8 * words),
                                                              (g.buffers["dmsg"], g.results["dmsg"], 8 * words)]
    assert r.copies[1:] == [dout, *read, dout, *read, dout, dout, dout, dout, *read]


def test_the_draw_is_getrandoms_and_comes_after_the_chain():
    need_mock()
    r, _ = run("lsq_adam", 90, args=("--steps", "8", *SAMPLED), draws=draws(0, 1, 9, 8, 7))
    assert r.returncode == 0 and r.stdout == oracle.run("lsq_adam", steps=8)
    assert said(r, "proven") == [1, 2, 3, 6, 8]          # steps 3..7 drew 0, 1, 9, 8, 7
    at = [i for i, t in enumerate(r.trace) if t[0] == "getrandom"]
    assert len(at) == 5 and all(r.trace[i - 1][0] == "write" for i in at)   # the chain event first
    full, _ = run("lsq_adam", 90, args=("--steps", "8"))
    assert not any(t[0] == "getrandom" for t in full.trace) and "\nshadow full @" in full.events



def test_the_draw_rate_is_an_option_stated_in_the_record():
    """--shadow-rate N proves one step in N (8 bytes of getrandom, their low 63 bits a multiple
    of N), stated as `shadow sampled 1/N`; N < 1, a non-number, or the option without
    `--shadow sampled`, refused `usage` naming it."""
    need_mock()
    r, _ = run("lsq_adam", 90, args=("--steps", "6", *SAMPLED, "--shadow-rate", "2"), draws=draws(0, 1, 2))
    assert r.returncode == 0 and r.stdout == oracle.run("lsq_adam", steps=6)
    assert "\nshadow sampled 1/2 @" in r.events and said(r, "proven") == [1, 2, 3, 5, 6]
    r, _ = run("lsq_adam", 90, args=("--steps", "5", *SAMPLED, "--shadow-rate", "1"), draws=b"\x01")
    assert r.returncode == 0 and said(r, "proven") == [1, 2, 3, 4, 5]
    for rate, why in (("0", "N >= 1: one step in N proven"), ("x", "not a decimal whole number of at most 15 digits")):
        r, _ = run("lsq_adam", 90, args=("--steps", "3", *SAMPLED, "--shadow-rate", rate))
        assert r.returncode == 64 and r.stderr.splitlines()[-1] == f"refused: usage (--shadow-rate: {why})"
    r, _ = run("lsq_adam", 90, args=("--steps", "3", "--shadow-rate", "4"))
    assert r.stderr.splitlines()[-1] == "refused: usage (--shadow-rate: only with --shadow sampled)"

def test_a_lie_on_a_proven_step_is_refused_after_its_hash():
    need_mock()
    r, _ = run("lsq_adam", 90, args=("--steps", "6", *SAMPLED), mutate={"update_g0": off_by_one})
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "chain") == [1] and "mismatch at step 1" in r.events and said(r, "proven") == []
    r, _ = run("lsq_adam", 90, args=("--steps", "6", *SAMPLED), draws=b"\x01",
               mutate={"update_g0": (off_by_one, 6)})            # the last step: always proven
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "proven") == [1, 2] and said(r, "chain") == [1, 2, 3, 4, 5, 6]


def test_a_lie_on_an_unproven_step_is_found_by_replay(tmp_path):
    need_mock()
    r, _ = run("lsq_adam", 90, args=("--steps", "6", *SAMPLED), draws=b"\x01",
               mutate={"update_g0": (off_by_one, 4)})            # step 4's update only
    assert (r.returncode, r.errors) == (0, []) and said(r, "proven") == [1, 2, 6]
    assert r.stdout != oracle.run("lsq_adam", steps=6)
    events = write_events(tmp_path, r)
    rc, out, err = alphac("verify-record", events, "--replay", "6", "--learner", example("lsq_adam"))
    assert (rc, out) == (3, "") and "step 4's hash is not the interpreter's" in err
    rc, out, _ = alphac("verify-record", events, "--replay", "3", "--learner", example("lsq_adam"))
    assert rc == 0 and "steps 1..3 are the interpreter's" in out



def k0_off(ptx):                    # the digest's first round constant off by one
    assert "1116352408" in ptx
    return ptx.replace("1116352408", "1116352409", 1)


def test_a_digest_kernel_that_lies_is_refused_when_proven_and_found_by_replay(tmp_path):
    """The chain reads only the card's tree digest D_k (alphac/ptx/digest.py): a proven step also
    checks D_k against the host's own tree over its own message, so a card whose G and states
    are right but whose digest is not is refused there; on an unproven step it is found by replay."""
    need_mock()
    r, _ = run("lsq_adam", 90, args=("--steps", "6", *SAMPLED), mutate={"digest_1": k0_off})
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "chain") == [1] and "digest mismatch at step 1" in r.events and said(r, "proven") == []
    r, _ = run("lsq_adam", 90, args=("--steps", "6", *SAMPLED), draws=b"\x01",
               mutate={"digest_0": (k0_off, 4)})             # step 4's leaves only
    assert (r.returncode, r.errors) == (0, []) and said(r, "proven") == [1, 2, 6]
    assert r.stdout == oracle.run("lsq_adam", steps=6)        # the states were right
    rc, out, err = alphac("verify-record", write_events(tmp_path, r), "--replay", "6", "--learner", example("lsq_adam"))
    assert (rc, out) == (3, "") and "step 4's hash is not the interpreter's" in err


def test_a_proven_step_starts_from_the_card_s_kept_states_bound_to_the_chain():
    """A step drawn to be proven is recomputed from the states the card kept from before it
    (`digest_gather` keeps the message it replaces), whose tree digest must be the previous
    step's D: a gather that keeps another message is refused naming the previous step."""
    need_mock()
    def keeps_zeros(ptx):           # the kept word stored as 0 instead of the message's
        line = re.search(r"st\.global\.u64 \[%rd\d+\+0\], (%rd\d+);", ptx)
        return ptx.replace(line[0], line[0].replace(line[1], "0"), 1)
    r, _ = run("lsq_adam", 90, args=("--steps", "6", *SAMPLED), draws=b"\x01",
               mutate={"digest_gather": (keeps_zeros, 2)})
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "proven") == [1] and "digest mismatch at step 1" in r.events


def test_an_unknown_policy_and_a_scalar_state_the_card_cannot_run_are_refused_at_start(tmp_path):
    need_mock()
    def usage(r, why):                  # the usage line, then the refusal naming --shadow
        assert (r.errors, r.returncode, r.stdout) == ([], 64, "") and r.stderr.startswith("usage: ")
        assert r.stderr.splitlines()[-1] == f"refused: usage (--shadow: {why})", r.stderr
    r, _ = run("lsq_adam", 90, args=("--shadow", "some"))
    usage(r, "full or sampled")
    # a scalar state that reads a reduced scalar of the gradients and that the loss reads: the
    # card could run the statement (`scalars`), but grad_samples reads the host's value
    text = example("lsq_adam").read_text().replace("  p2 = p2 * b2\n", "  p2 = p2 * b2 + 0 * dot(grad(w), grad(w))\n")
    text = text.replace("  0.5 * r^2\n", "  0.5 * r^2 * p2\n")
    assert "0 * dot(grad(w)" in text and "r^2 * p2" in text
    r, _ = clipped(tmp_path, text, ("--steps", "3", *SAMPLED))
    usage(r, WHY)
    assert f"--shadow {WHY}" in r.events and r.allocations == []
    r, _ = clipped(tmp_path, exact_sum_variant(text), ("--steps", "3", *SAMPLED))    # exact_sum too
    usage(r, WHY)


# AdaGrad-Norm on lsq_adam's data: a scalar state accumulating the gradient's squared norm (scaled
# by another scalar state's old value, which `reduce` reads), read by the update of w, and another
# reading its new value and the clock
NORM = example("lsq_adam").read_text().split("# -- deployments")[0].replace(
    "state p1: f64 = 1.0", "state acc: f64 = 0.01\nstate rate: f64 = 0.0\nstate p1: f64 = 1.0").replace(
    "update {\n  let g = grad(w)\n", "update {\n  let g = grad(w)\n  acc = acc + dot(g, g * p1)\n"
    "  rate = lr / sqrt(acc) + 0 * step\n").replace(
    "  w = w - (lr * mh) / (sqrt(vh) + eps)\n", "  w = w - rate * g + 0 * (mh / (sqrt(vh) + eps))\n")


def test_a_scalar_state_reading_a_reduction_is_the_card_s_under_sampled(tmp_path):
    """A scalar statement reading the card's reduction (abi.card_scalars): under `sampled` the
    card runs the scalar statements (`scalars`, after `reduce`), every kernel reads the scalar
    states from `sc`, a step is one submission, and the output is the interpreter's and the full
    policy's (whose host writes sc itself; no `scalars` launched), ordered and under exact_sum; a
    `scalars` that computes another bit is refused on a proven step and found by replay on
    another; the states the host reads back and proves include the scalar states."""
    need_mock()
    from alphac.ir.interp import format_state, run as interp_run
    assert "acc = acc + dot(g, g * p1)" in NORM and "rate * g" in NORM
    for text in (NORM, exact_sum_variant(NORM)):
        full, lr = clipped(tmp_path, text, ("--steps", "6"))
        assert (full.returncode, full.stderr, full.errors) == (0, "", [])
        assert full.stdout == format_state(lr, interp_run(lr, 6))
        assert "scalars" not in [la[0] for la in full.launches]
        r, _ = clipped(tmp_path, text, ("--steps", "6", *SAMPLED), draws=b"\x01")
        assert (r.returncode, r.stderr, r.errors) == (0, "", []) and r.stdout == full.stdout
        assert said(r, "proven") == [1, 2, 6] and r.submissions == 1 + 6 + 3
        names = [la[0] for la in r.launches]
        between = ["reduce", *["reduce_add", "reduce_round"] * lr.exact, "scalars", "update_g0"]
        assert names[names.index("reduce"):names.index("update_g0") + 1] == between
        from alphac.tools.replay import replay_chain
        assert replay_chain(lr, write_events(tmp_path, r), 6) is None
    # `reduce` runs before `scalars`: p1 before the step is sc[2 * 2 + 1]; sc[4] is p1 a step older
    older = lambda ptx: ptx.replace("+40];", "+32];") if "+40];" in ptx else "no load of sc[5]"   # noqa: E731
    r, _ = clipped(tmp_path, NORM, ("--steps", "6", *SAMPLED), mutate={"reduce": older})
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "proven") == [1] and "mismatch at step 2" in r.events
    r, _ = clipped(tmp_path, NORM, ("--steps", "6", *SAMPLED), mutate={"scalars": off_by_one})
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "chain") == [1] and "mismatch at step 1" in r.events
    r, lr = clipped(tmp_path, NORM, ("--steps", "6", *SAMPLED), draws=b"\x01", mutate={"scalars": (off_by_one, 4)})
    assert (r.returncode, r.errors) == (0, []) and said(r, "proven") == [1, 2, 6] and r.stdout != full.stdout
    rc, out, err = alphac("verify-record", write_events(tmp_path, r), "--replay", "6", "--learner", tmp_path / "x.alpha")
    assert (rc, out) == (3, "") and "step 4's hash is not the interpreter's" in err


WHY = "sampled: a scalar state reads a reduction of the gradients"
CLIPPED = example("lsq_adam").read_text().replace(
    "  let g = grad(w)\n", "  let g = grad(w) * min(1, 0.5 / sqrt(dot(grad(w), grad(w))))\n")


def clipped(tmp_path, text=CLIPPED, args=("--steps", "6"), **kw):
    """A GPU owner of `text` (by default lsq_adam clipped by its gradient's norm) under the mock."""
    import mockgpu
    from alphac.build import build_gpu_owner
    from test_nvdrv_owner import host_for
    (tmp_path / "x.alpha").write_text(text)
    lr = compile_file(tmp_path / "x.alpha").learner
    built = build_gpu_owner(lr, "x86_64+sm_90", host_for(90))
    (tmp_path / "x.gpu").write_bytes(built.image.elf)
    (tmp_path / "x.gpu").chmod(0o755)
    return mockgpu.run(tmp_path / "x.gpu", args, card=card_for(90), kernels=built.kernels, **kw), lr


def test_reduced_scalars_of_the_update_on_the_card_one_submission_a_step(tmp_path):
    """The update's `dot(grad(w), grad(w))`: under `sampled` the card's `reduce` computes it
    between the sums and the updates (abi.card_reductions), under `full` the host writes its own
    into rd; either way a step is one submission with the interpreter's bits, and a `reduce` that
    adds a term twice is refused at step 1 (proven). A scalar state reading such a reduction:
    test_a_scalar_state_reading_a_reduction_is_the_card_s_under_sampled."""
    need_mock()
    from alphac.ir.interp import format_state, run as interp_run
    for args, launched in ((("--steps", "6"), []), (("--steps", "6", *SAMPLED), ["reduce"])):
        r, lr = clipped(tmp_path, args=args, draws=b"\x01")
        assert (r.returncode, r.stderr, r.errors) == (0, "", [])
        assert r.stdout == format_state(lr, interp_run(lr, 6)) and r.submissions == 1 + 6 + 3 * bool(launched)
        assert [la[0] for la in r.launches[:4]] == ["grad_samples", "owner_sum", *launched, "update_g0", "grad_samples"][:4]

    def twice(ptx):                 # a round's second term added twice
        add = re.search(r"bra \$L\d+;\n\tadd\.rn\.f64 (%fd\d+), \1, (%fd\d+);", ptx)
        line = add[0].split("\n")[1]
        return ptx.replace(line, f"{line}\n{line}", 1)
    r, _ = clipped(tmp_path, args=("--steps", "6", *SAMPLED), mutate={"reduce": twice})
    refused(r, "gpu-shadow-mismatch")
    assert "mismatch at step 1" in r.events


def test_a_malformed_events_file_is_refused_by_name(tmp_path):
    from alphac.tools.replay import replay_chain
    lr = compile_file(example("lsq_adam")).learner
    head = "gpu-owner lsq_adam sm_90 @1\nshadow sampled @2\n"
    good = f"chain 1 {'ab' * 32} @3\n"
    for text, why in [("gpu-owner other sm_90 @1\nshadow sampled @2\n" + good, "learner lsq_adam"),
                      ("gpu-owner lsq_adam sm_90 @1\nshadow full @2\n", "shadow sampled"),
                      (head + f"chain 1 {'ab' * 31} @3\n", "not `chain K HEX`"),
                      (head + f"chain 2 {'ab' * 32} @3\n", "where step 1 was due"),
                      (head + good, "1 chained steps, not 2")]:
        (tmp_path / "e.log").write_text(text)
        with pytest.raises(Refusal, match=why) as e:
            replay_chain(lr, tmp_path / "e.log", 2)
        assert e.value.name == "record-malformed"
    (tmp_path / "e.log").write_text(head + good)
    assert replay_chain(lr, tmp_path / "e.log", 1) == 1           # a hash that is not the step's
    rc, _, err = alphac("verify-record", tmp_path / "e.log", "--replay", "1")
    assert rc == 2 and "go together" in err
    assert exit_code("record-malformed") > 0



# exact_sum under --shadow sampled: the card's G (xsum_round) ------------------------------------
EXACT = {"lsq": lambda: exact_sum_variant(example("lsq_adam").read_text()),
         "cls": lambda: exact_sum_variant(oracle.CLASSIFIER.replace("tanh(", "relu(")),
         # terms that cancel (1e16, 1, -1e16: a left fold gives 0, the exact sum 1) and spill
         "cancel": lambda: "learner cancel\ncontract exact_sum\n"
                           "data x = [1e16, 1.0, -1e16, 1e200, 1e-200, -1e200, 3.0, -0.5]\n"
                           "param w: f64 = 0.0\nloss(i) = w * x[i] + w * w\nupdate {\n  w = w - 0.1 * grad(w)\n}\n",
         # the update's clipping norm dot(grad(w), grad(w)): an exact sum, the card's `reduce`
         "clip": lambda: exact_sum_variant(CLIPPED)}
SAMPLED_EXACT = ["xsum_clear", "grad_samples", "xsum_add", "xsum_round"]
# the card's rounding one ulp off (its last add: the exponent and the mantissa)
ROUND_ULP = lambda ptx: re.sub(r"(shl\.b64 %rd\d+, %rd\d+, 52;\n\tadd\.s64 (%rd\d+), [^\n]*\n)",
                               r"\1\tadd.s64 \2, \2, 1;\n", ptx, count=1)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_sum_sampled_g_is_the_cards_with_the_interpreters_bits(name, tmp_path):
    """Least squares, a classifier (A @ v, relu, logsumexp), sums that cancel and spill, and
    least squares clipped by its gradient's norm under `contract exact_sum` as single GPU owners
    under --shadow sampled: G rounded once on the card (xsum_round, no xsum_fold: the accumulators
    never read back), the norm's exact dot too (`reduce` zeroes its accumulator, `reduce_add` adds
    every term at once, `reduce_round` rounds it), one submission a step with the tree
    digest last (an unproven step copies back D_k alone), the interpreter's exact bits, the full
    policy's output; the chain replays."""
    need_mock()
    from alphac.ir.interp import format_state, run as interp_run
    r, lr = clipped(tmp_path, EXACT[name](), ("--steps", "6", *SAMPLED), draws=b"\x01")
    assert (r.returncode, r.stderr, r.errors) == (0, "", [])
    full, _ = clipped(tmp_path, EXACT[name]())
    assert r.stdout == format_state(lr, interp_run(lr, 6)) == full.stdout
    # G in video memory (`Gv`, the arena) for the sampled run, in `staging` for the full one
    from alphac.build import build_gpu_owner
    from test_nvdrv_owner import host_for
    img = build_gpu_owner(lr, "x86_64+sm_90", host_for(90)).gpu
    arena = next(a for a in img.allocations if a.name == "arena")
    assert arena.va <= img.buffers["Gv"] < arena.va + arena.size and img.buffers["G"] != img.buffers["Gv"]
    for run_, where in ((r, img.buffers["Gv"]), (full, img.buffers["G"])):
        assert {la[3]["G"] for la in run_.launches if "G" in la[3]} == {where}
    ups = [f"update_g{g.index}" for g in lr.groups]
    red = ["reduce", "reduce_add", "reduce_round"] * (name == "clip")
    from alphac.lower.gpu import digest_kernels
    step = SAMPLED_EXACT + red + ups + list(digest_kernels(lr))     # then the tree digest of G and states
    assert [la[0] for la in r.launches] == step * 6 and r.submissions == 1 + 6 + 3
    assert said(r, "proven") == [1, 2, 6]
    words = sum(k for _, k in message(lr))         # copied back: D_k a step, both messages when proven
    assert sum(c[2] for c in r.copies[1:]) == 6 * 32 + 3 * 2 * 8 * words     # (after the setup's)
    from alphac.tools.replay import replay_chain
    assert replay_chain(lr, write_events(tmp_path, r), 6) is None
    if name == "cancel":               # the ordered contract's fold gives other bits here
        (tmp_path / "o.alpha").write_text(EXACT[name]().replace("contract exact_sum\n", ""))
        ordered = compile_file(tmp_path / "o.alpha").learner
        assert format_state(ordered, interp_run(ordered, 6)) != r.stdout


def test_exact_sum_a_rounding_one_ulp_off_is_refused_when_proven_and_found_by_replay(tmp_path):
    need_mock()
    text = EXACT["lsq"]()
    r, _ = clipped(tmp_path, text, ("--steps", "6", *SAMPLED), mutate={"xsum_round": ROUND_ULP})
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "chain") == [1] and "mismatch at step 1" in r.events and said(r, "proven") == []
    r, lr = clipped(tmp_path, text, ("--steps", "6", *SAMPLED), draws=b"\x01",
                    mutate={"xsum_round": (ROUND_ULP, 4)})          # step 4 only: not proven
    assert (r.returncode, r.errors) == (0, []) and said(r, "proven") == [1, 2, 6]
    events = write_events(tmp_path, r)
    rc, out, err = alphac("verify-record", events, "--replay", "6", "--learner", tmp_path / "x.alpha")
    assert (rc, out) == (3, "") and "step 4's hash is not the interpreter's" in err


def test_exact_sum_a_reduce_term_one_ulp_off_is_refused_when_proven(tmp_path):
    """The clipping's exact dot on the card with one term's significand one more (the add of
    xsum.py's add_term in `reduce_add`): refused on a proven step, at step 2 (at step 1 that term's
    ulp is lost in the sum's rounding: the dot's bits are the host's), after its hash."""
    need_mock()
    ulp = lambda ptx: re.sub(r"(shl\.b64 (%rd\d+), %rd\d+, 52;\n\tor\.b64 (%rd\d+), %rd\d+, \2;)",
                             r"\1\n\tadd.s64 \3, \3, 1;", ptx, count=1)
    assert ulp(ROUND_ULP("x")) == "x"
    r, _ = clipped(tmp_path, EXACT["clip"](), ("--steps", "6", *SAMPLED), mutate={"reduce_add": ulp})
    refused(r, "gpu-shadow-mismatch")
    assert said(r, "chain") == [1, 2] and said(r, "proven") == [1] and "mismatch at step 2" in r.events
