"""A GPU owner's generated code: the conversation, the launch image and one step, as runtime source.

Requires: a checked learner, its `image.GpuImage` and its `conversation.Conversation`.
Guarantees: runtime-language source (with the bytes of its `extern` globals) that, over
`alphac/runtime/nvdrv.rt` and `gpu.rt`, defines every constant the runtime reads (GPU_*, NV_*),
the conversation table `nv_calls` and region `nv_conv`, the launch image `nv_image` and its
SHA-256, and `gpu_step(step)`:

    learner_grad on the CPU                 the host shadow's G (exact_sum: rounded once and
                                            written to the card, which the updates read)
    learner_mean, learner_reduce,           the reduced scalars and the scalar statements, on
    learner_scalars                         the host's own G
    per group: scalar parameters into the kernel's constant bank, reduced scalars into rd
    one submission (`chains`: one push buffer) on the GPU: the batch kernels
    (abi.batch_kernels), grad_samples, owner_sum,
    outer_sum_<p> (learners with a loss; under exact_sum xsum_clear, grad_samples, xsum_add,
    xsum_fold: exact sums), every update_g<N>; meanwhile learner_group_<N> on the CPU
    (the chain ends with the copy engine copying G, or the accumulators, and the states to
    system memory: image.GpuImage.results, where the host reads every result of the card)
    one wait; G compared bit for bit (exact_sum: the card's accumulators, gpu_exact_check),
    then every member of every group
    learner_commit

(where the card needs nothing the host computes from its own G, the ordered contract without a
reduced scalar over a group, the scalar statements and the submission come first, and
learner_grad and learner_mean run on the CPU while the card works: a step costs the slower of
the two, not their sum),

so the state the executable prints is the shadow's, which equals the GPU's after every step.
`gpu_step_sampled(step, last)` is the same step under `--shadow sampled` (docs/gpu.md "Shadow
policies"): every kernel first, in one submission (no scalar statement reads the card's
reduced scalars, which `reduce` computes before the updates: else the policy is refused at
start), then the card's tree digest of its message (alphac/ptx/digest.py), the only result it
copies back, into the chain (gpu.rt gpu_chain); on a step drawn to be proven, the card's
messages before and after the step copied back, the host's step from the former compared with
the latter (exact_sum: G rounded on the card by xsum_round, against the host's own exact sums
rounded), and both digests checked; on any other step the host reads nothing more.
"""
from __future__ import annotations

from alphac.ir.learner import Learner, update_reductions
from alphac.lower.learner import clock_call
from alphac.nvdrv import abi
from alphac.nvdrv.abi import CONSTANTS
from alphac.nvdrv.conversation import Conversation
from alphac.nvdrv.image import GPFIFO_ENTRIES, READBACK, SEM_RELEASED, GpuImage
from alphac.ptx.abi import (batch_kernels, can_sample, card_reductions, card_scalars, exact_positions, param_count,
                            param_layout, sum_kernels)

# The completion wait (runtime/nvdrv.rt gpu_wait): its bound by the clock (10^6 polls of a 10 us
# nanosleep took about 90 s); spinning for SPIN_NS before sleeping between polls, with one clock
# read every SPIN_POLLS polls (a kernel's launch-to-release on the H200 was 10-460 us)
WAIT_NS, SPIN_NS, SPIN_POLLS = 4_000_000_000, 2_000_000, 4096


def constants(img: GpuImage, conv: Conversation, table: bytes) -> dict[str, int]:
    return {
        "NV_CALL_WORDS": len(table) // 8,
        "NV_SLOT_TOKEN": conv.slots["token"],
        "GPU_IMAGE_BYTES": len(img.image),
        "GPU_STAGING": img.alloc("staging").va,
        "GPU_UPLOAD_BAR1": img.upload if img.upload != img.alloc("staging").va else 0,   # `upload bar1`
        "GPU_SEMAPHORE": img.semaphore_va,
        "GPU_RELEASED": SEM_RELEASED,
        "GPU_RING": img.ring_va,
        "GPU_RING_ENTRIES": GPFIFO_ENTRIES,
        "GPU_GPPUT": img.userd_va + abi.USERD_GPPUT_OFFSET,
        "GPU_DOORBELL": img.doorbell_va,
        "GPU_WAIT_NS": WAIT_NS,
        "GPU_SPIN_NS": SPIN_NS,
        "GPU_SPIN_POLLS": SPIN_POLLS,
        "GPU_GPGET": img.userd_va + abi.USERD_GPGET_OFFSET,
        "GPU_NOTIFIER": img.alloc("sysmem").va,              # the channel's error notifier
        "GPU_NOTIFIER_WORDS": CONSTANTS["NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1"] * 4,   # 16 B each
        "GPU_SETUP_ENTRY": img.setup_entry,
    }


def loss_reads(lr: Learner) -> list:
    """The states the loss reads (grad_samples' state parameters)."""
    from alphac.ir.learner import Read, postorder
    read = {n.name for n in postorder([lr.loss]) if isinstance(n, Read)}
    return [s for s in lr.states if s.name in read]


def g_pieces(lr: Learner, img: GpuImage, read: bool = False) -> list[tuple[str, int, int]]:
    """(param, the card's address of its part of G, its size), in declaration order; `read`:
    where the host reads it, the copy engine's copy in system memory (image.GpuImage.results)."""
    offs = param_layout(lr)
    base = img.results["G"] if read else img.buffers["G"]
    return [(p.name, base + 8 * offs[p.name], p.size) for p in lr.params]


def from_card(img: GpuImage, s) -> bool:
    """Does the card write state `s` (its update kernel's result, copied out: image.plan's
    `results`)? A scalar state, or a grouped one no statement assigns, is the host's alone."""
    return s.group is not None and f"state_{s.name}" in img.results


def upload(img: GpuImage, name: str, size: int) -> str:
    return f"vec_copy({img.buffers[f'state_{name}']:#x}, st_{name}, {size});"


def grad_kernels(lr: Learner) -> list[str]:
    """The card's gradient kernels, in launch order (none without a loss)."""
    if lr.loss is None:
        return []
    return ["xsum_clear", "grad_samples", "xsum_add", "xsum_fold"] if lr.exact else \
        [*batch_kernels(lr), "grad_samples", *sum_kernels(lr)]


def update_kernels(lr: Learner) -> list[str]:
    return [f"update_g{g.index}" for g in lr.groups]


def reduce_kernels(lr: Learner) -> list[str]:
    """`reduce`, where the card computes reduced scalars of the update (abi.card_reductions; with
    reduce_add and reduce_round where any is an exact sum), and `scalars`, where it runs the
    scalar statements (abi.card_scalars): the sampled step launches
    them before the updates; the full step, whose host computes them anyway from its own G, and
    a deployment's GPU role, which may not hold a whole group, write the host's into rd and sc
    instead (`host_reduced`): `reduce` folds on one thread a reduction."""
    return ["reduce"] * bool(card_reductions(lr)) + ["reduce_add", "reduce_round"] * bool(exact_positions(lr)) + \
        ["scalars"] * bool(card_scalars(lr))


def host_reduced(lr: Learner, img: GpuImage) -> list[str]:
    """The host's reduced scalars rd<k> written into the card's rd, and its scalar states before
    and after the step into sc (abi.card_scalars), for the update kernels."""
    assigned = {a.target for a in lr.update}
    return [f"storef({img.buffers['rd'] + 8 * at:#x}, loadf(rd{k}));" for k, at in card_reductions(lr).items()] + \
        [f"storef({img.buffers['sc'] + 16 * i + 8 * v:#x}, loadf({'sn' if v and name in assigned else 'st'}_{name}));"
         for name, i in card_scalars(lr).items() for v in (0, 1)]


def sampled_kernels(lr: Learner) -> list[str]:
    """A sampled step's one submission: the gradient kernels (under exact_sum xsum_round, G rounded
    on the card, in place of xsum_fold: the host reads G, not the accumulators), `reduce`, the
    updates."""
    grad = grad_kernels(lr)
    if lr.exact and grad:
        grad = grad[:-1] + ["xsum_round"]
    return grad + reduce_kernels(lr) + update_kernels(lr)


def chains(lr: Learner) -> tuple[tuple[str, ...], ...]:
    """The kernel sequences an owner submits, each one push buffer (image.plan lays them out):
    the gradient kernels, the updates, and a whole step (the sampled one: sampled_kernels and the
    digest's kernels)."""
    grad, upd = tuple(grad_kernels(lr)), tuple(update_kernels(lr))
    return tuple(dict.fromkeys(c for c in (grad, upd, grad + upd, tuple(sampled_kernels(lr)) + digest_kernels(lr),
                                           READBACK * can_sample(lr)) if c))


def digest_kernels(lr: Learner) -> tuple[str, ...]:
    """The sampled step's digest kernels (alphac/ptx/digest.py), in launch order."""
    from alphac.ptx.digest import levels, message
    return ("digest_gather", *(f"digest_{r}" for r in range(len(levels(8 * sum(n for _, n in message(lr)))) + 1))) \
        if can_sample(lr) else ()


def digest_sizes(lr: Learner) -> tuple[int, ...]:
    """image.OwnerData.digest: the message's words, the levels' digest words, the host's words."""
    from alphac.ptx.digest import host_words, message, scratch_words
    if not can_sample(lr):
        return ()
    words = sum(n for _, n in message(lr))
    return words, scratch_words(8 * words), sum(s.size for s in lr.states if s.name in host_words(lr))


def kick(img: GpuImage, names, wait: bool = False) -> list[str]:
    """Start the chain of `names` (nothing when the share launches none of them)."""
    c = img.chain(names) if names else None
    return [f"gpu_{'submit' if wait else 'kick'}({c.entry:#x});      // {', '.join(c.kernels)}"] if c else []


def scalars(lr: Learner, sampled: bool = False) -> list[str]:
    """The host's scalar statements, after its reduced scalars (learner_reduce) when the
    update has any. `sampled`: before a sampled step's submission, whose host has no G: its
    reduced scalars only where the card does not compute one (of scalars and constants alone,
    which the kernels read), its scalar statements only where the card does not run them
    (abi.card_scalars)."""
    if sampled:
        return ["learner_reduce();"] * (len(update_reductions(lr.update)) > len(card_reductions(lr))) + \
            ["learner_scalars();"] * (not card_scalars(lr))
    return ["learner_reduce();"] * bool(update_reductions(lr.update)) + ["learner_scalars();"]


def update_params(lr: Learner, img: GpuImage, n: str = "n") -> list[str]:
    """Each update kernel's (and `reduce`'s) counts (a minibatch's `n`) and scalar parameters,
    into its bank."""
    out = []
    for name in reduce_kernels(lr) + update_kernels(lr):
        la = img.launch(name)
        out += [f"store32({va:#x}, {n});" for va in la.counts]
        out += [f"storef({s.va:#x}, {scalar_value(s)});" for s in la.scalars]
    return out


def scalar_value(s) -> str:
    """The value the host writes into an update kernel's f64 parameter (an image.Scalar): a
    scalar state's old or new value, a reduced scalar, or `step` or `epoch` (learner_clock's clock_t)."""
    if s.ref.startswith("clock."):
        return "loadf(clock_t)" if s.ref == "clock.step" else "loadf(clock_t + 8)"
    if s.version == 2:          # a reduced scalar: learner_reduce's host global
        return f"loadf({s.ref})"
    return f"loadf({'sn' if s.version else 'st'}_{s.ref})"


def step(lr: Learner, img: GpuImage) -> str:
    """`gpu_step(step)`, the full shadow's step. Where the card needs nothing the host computes
    from its own G (no exact_sum G, no reduced scalar over a group), the submission goes first
    and the host's learner_grad runs while the card works (`early`); else after it."""
    n = lr.nsamples or 0
    out, compare, host = [], [], []
    early = not lr.exact and not card_reductions(lr)
    if lr.loss is not None:     # scalar states the loss reads: the host computes them
        card, host, compare = grad_parts(lr, img, 0, n, "step - 1", "step",
                                         [st for st in loss_reads(lr) if st.group is None])
        out += card
        if lr.exact:             # rounded once; the update kernels read it from the card
            host.append("learner_exact_round();")
            host += [f"vec_copy({va:#x}, G_{p}, {size});" for p, va, size in g_pieces(lr, img)]
        host.append(f"learner_mean({'n' if lr.batch else n});")
    pre = clock_call(lr, "step - 1") + scalars(lr) + update_params(lr, img, "gn" if early else "n")
    pre += host_reduced(lr, img) + kick(img, grad_kernels(lr) + update_kernels(lr))
    out += pre + host if early else host + pre
    out += [f"learner_group_{g.index}(0, {g.size});" for g in lr.groups] + ["gpu_wait();"] + compare
    out += [f"gpu_compare({img.results[f'state_{s.name}']:#x}, st_{s.name}, {s.size}, step);"
            for g in lr.groups for s in lr.states if s.group == g.index and from_card(img, s)]
    return "fn gpu_step(step: i64) {\n" + "\n".join("    " + x for x in out + ["learner_commit();"]) + "\n}\n\n"


def reduced_compare(lr: Learner, img: GpuImage) -> list[str]:
    """The card's reduced scalars (rd, written by `reduce`) compared with the host's rd<k>."""
    return [f"gpu_compare({img.buffers['rd'] + 8 * at:#x}, rd{k}, 1, step);" for k, at in card_reductions(lr).items()]


def no_sampled_step() -> str:
    """What gpu.rt reads of the sampled shadow, for an executable that refuses it (gpu.rt's main
    refuses `--shadow sampled` first: the step is never reached)."""
    return ("const GPU_SAMPLED = 0;\nconst GPU_CHAIN_BYTES = 72;\nglobal gpu_chain_msg: [u8; 72];\n"
            "global gpu_tree_dg: [u8; 32];\nfn gpu_step_sampled(step: i64, last: i64) {\n    refuse(\"usage\");\n}\n"
            "fn gpu_sampled_start() {\n}\n")


def sampled_start(img: GpuImage) -> str:
    """`gpu_sampled_start()`, before a sampled run's first step: under exact_sum every kernel's
    bank pointed at `Gv`, G in video memory (the card alone writes and reads it there: no 8P
    bytes over the bus each way a step), in place of `staging`'s G, the full step's."""
    body = [f"    store64({va:#x}, {img.buffers['Gv']:#x});" for la in img.launches for va in la.gslots] \
        if "Gv" in img.buffers else []
    return "fn gpu_sampled_start() {\n" + "".join(x + "\n" for x in body) + "}\n"


def sampled_step(lr: Learner, img: GpuImage) -> str:
    """`gpu_step_sampled(step, last)` and the chain's message `gpu_chain_msg` (the previous hash,
    the step, the card's tree digest D of G and every state after the step, declaration order:
    alphac/ptx/digest.py); GPU_SAMPLED 0 when the policy is refused (`can_sample`). Under
    exact_sum G is the card's xsum_round; a proven step's host rounds its own exact sums and
    compares G bit for bit (not the accumulators, which the sampled step does not read), and
    gpu_tree_dg, the scratch of gpu.rt's `gpu_tree` (the host's digest of its own message)."""
    if not can_sample(lr):              # (the host's scalars would read the card's G before it is back)
        return no_sampled_step()
    from alphac.ptx.digest import host_words, message, scratch_words
    n, host = lr.nsamples or 0, host_words(lr)
    assigned = {a.target for a in lr.update}
    pieces = g_pieces(lr, img, read=True) if lr.loss is not None else []
    words = sum(k for _, k in message(lr))
    out = ["fn gpu_step_sampled(step: i64, last: i64) {"]
    if lr.loss is not None:
        out += grad_parts(lr, img, 0, n, "step - 1", "step", [st for st in loss_reads(lr) if st.group is None])[0]
        out += ["let n = gn;"] if lr.batch else []
    # a scalar state never reads a gradient (types/check.py: one that does is a coordinate
    # state), so the update kernels' parameters need no G: the whole step one submission; the
    # host's states written where the digest's gather reads them
    out += clock_call(lr, "step - 1") + scalars(lr, sampled=True) + update_params(lr, img)
    out += [f"vec_copy({img.buffers['dhost'] + 8 * at:#x}, {'sn' if name in assigned else 'st'}_{name}, "
            f"{lr.state(name).size});" for name, at in host.items()]
    out += kick(img, sampled_kernels(lr) + list(digest_kernels(lr)), wait=True)
    out += ["vec_copy(gpu_chain_msg, gpu_chain_h, 4);", "store64(gpu_chain_msg + 32, step);",
            f"vec_copy(gpu_chain_msg + 40, {img.results['dout']:#x}, 4);      // D_k: all the host reads"]
    # drawn: the card's message before the step (its states: where the host's step starts; their
    # digest must be D_{k-1}) and after it, copied back; the host's step from the former, compared
    # with the latter, and the digest of its own message with D_k
    prev, now, moff, at = img.results["dprev"], img.results["dmsg"], {}, 0
    for name, k in message(lr):
        moff[name], at = at, at + 8 * k
    slots = card_scalars(lr)
    card = [s for s in lr.states if from_card(img, s) or s.name in slots]
    out += ["if gpu_chain(step, last) {", f"    gpu_submit({img.chain(READBACK).entry:#x});      // dprev, dmsg",
            "    if step > 1 {", f"        gpu_tree({prev:#x}, {8 * words}, gpu_tree_d);",
            "        if bytes_eq(gpu_tree_d, gpu_prev_d, 32) == 0 { gpu_digest_mismatch(step - 1); }"]
    out += [f"        vec_copy(st_{s.name}, {prev + moff[s.name]:#x}, {s.size});" for s in card] + ["    }"]
    hostc = []
    if lr.loss is not None:
        h = grad_parts(lr, img, 0, n, "step - 1", "step", [], "hn", "n")[1]     # the host's part
        cmp = [f"gpu_compare({now + moff['G'] + 8 * param_layout(lr)[p]:#x}, G_{p}, {size}, step);" for p, _, size in pieces]
        h += ["learner_exact_round();"] * lr.exact       # its own exact sums rounded
        hostc += h + (["if n > 0 {"] + ["    " + x for x in cmp] + ["}"] if lr.batch else cmp)
        hostc.append(f"learner_mean({'n' if lr.batch else n});")
    hostc += ["learner_reduce();"] * bool(card_reductions(lr))    # the host's, compared below
    hostc += ["learner_scalars();"] * bool(slots)                 # from the card's states before
    hostc += [f"gpu_compare({now + moff[name]:#x}, {'sn' if name in assigned else 'st'}_{name}, 1, step);"
              for name in slots]
    for g in lr.groups:
        hostc.append(f"learner_group_{g.index}(0, {g.size});")
        hostc += [f"gpu_compare({now + moff[s.name]:#x}, st_{s.name}, {s.size}, step);" for s in card if s.group == g.index]
    hostc += reduced_compare(lr, img)
    hostc += [f"vec_copy(gpu_dmsg + {moff['G'] + 8 * param_layout(lr)[p]}, G_{p}, {size});" for p, _, size in pieces]
    hostc += [f"vec_copy(gpu_dmsg + {moff[s.name]}, {'sn' if s.name in assigned and s.group is None else 'st'}_{s.name}, "
              f"{s.size});" for s in lr.states]                  # at digest.message's offsets (moff)
    hostc += [f"gpu_tree(gpu_dmsg, {8 * words}, gpu_tree_d);",
              "if bytes_eq(gpu_tree_d, gpu_chain_msg + 40, 32) == 0 { gpu_digest_mismatch(step); }"]
    out += ["    " + x for x in hostc] + ['    rt_event_num("proven ", step);', "}"]
    out += ["vec_copy(gpu_prev_d, gpu_chain_msg + 40, 4);", "learner_commit();"]
    return (f"const GPU_SAMPLED = 1;\nconst GPU_CHAIN_BYTES = 72;\nglobal gpu_chain_msg: [u8; 72];\nglobal gpu_prev_d: [u8; 32];\n"
            f"global gpu_dmsg: [u8; {8 * max(1, words)}];\nglobal gpu_tree_dg: [u8; {8 * scratch_words(8 * words)}];\n"
            + out[0] + "\n"
            + "\n".join("    " + x for x in out[1:]) + "\n}\n" + sampled_start(img))


def gpu_globals(lr: Learner, img: GpuImage, conv: Conversation, label: str) -> tuple[list[str], dict[str, bytes]]:
    """The constants and extern globals nvdrv.rt reads: the conversation, the launch image."""
    table = conv.encode()
    region = bytes(conv.region.buf)
    lines = [f"// generated by alphac: {label} for sm_{img.sm}, "
             f"host {conv.host.uuid_text} ({conv.host.product}, driver {conv.host.driver})"]
    lines += [f"const {k} = {v:#x};" for k, v in constants(img, conv, table).items()]
    lines += [f"data nv_calls: [i64; {len(table) // 8}] = extern;",
              f"var nv_conv: [u8; {len(region)}] = extern;",
              f"data nv_image: [u8; {len(img.image)}] = extern;",
              "data nv_image_sha: [u8; 32] = extern;",
              f'data gpu_owner_name: [u8] = "{label} sm_{img.sm}\\0";', "", batch_source(lr, img),
              exact_source(lr, img)]
    return lines, {"nv_calls": table, "nv_conv": region, "nv_image": img.image, "nv_image_sha": img.sha256}


def gpu_owner_source(lr: Learner, img: GpuImage, conv: Conversation) -> tuple[str, dict[str, bytes]]:
    """The owner's runtime source and the bytes of its extern globals."""
    lines, blobs = gpu_globals(lr, img, conv, f"gpu-owner {lr.name}")
    return "\n".join(lines) + "\n" + step(lr, img) + sampled_step(lr, img) + rows_source(lr, img, 0, lr.nsamples or 0), blobs


# -- a GPU owner inside a deployment (alphac.lower.role) ---------------------------------------
# The role's host state stays the reference: before a kernel runs, the states it reads are
# written from the host's arrays (a partitioned strategy's gathers and a resume change them
# there), the combined G before the updates; after it, its results are compared bit for bit.

def batch_source(lr: Learner, img: GpuImage) -> str:
    """A minibatch learner's `gpu_batch(lo, hi, t)`: the samples of lo..hi-1 that step t uses
    (alphac.ir.order: position in the epoch's order within the batch's window), in increasing
    order, written to the card's idx buffer; their count."""
    if not lr.batch:
        return ""
    pos = "i" if lr.shuffle is None else "learner_position(i, ep)"
    return (f"fn gpu_batch(lo: i64, hi: i64, t: i64) -> i64 {{\n    let ep = t / {lr.batches};\n"
            f"    let first = (t - ep * {lr.batches}) * {lr.batch};\n    let n = 0;\n    let i = lo;\n"
            f"    while i < hi {{\n        let pos = {pos};\n"
            f"        if pos >= first && pos < first + {lr.batch} {{\n"
            f"            store64({img.buffers['idx']:#x} + 8 * n, i);\n            n = n + 1;\n        }}\n"
            f"        i = i + 1;\n    }}\n    return n;\n}}\n")


def exact_source(lr: Learner, img: GpuImage) -> str:
    """exact_sum: `gpu_exact_check(step)`. The card sums the per-sample rows exactly
    (alphac/ptx/xsum.py); the host reads its compact accumulators (XK, checked well formed:
    their headers drive addresses) and the dense digits of the spilled ones (XKSP), and its own
    accumulators XA hold the exact sums of its own rows. Their flags must be equal, coordinate
    by coordinate, and where the host's sum is finite, a copy of XA merged with the card's
    negated (negation is exact, digit by digit) must round to zero (a NaN or infinity is never
    published: non-finite-state). The host's accumulators then travel: they equal the card's."""
    if not lr.exact_sums:
        return ""
    from alphac.formats import XC_SPILLED, XC_WORDS, XS_DIGITS, XS_FLAGS, XS_WORDS
    P, xd, xc = param_count(lr), img.results["xd"], img.results["xc"]
    special = XS_FLAGS["pinf"] | XS_FLAGS["ninf"] | XS_FLAGS["nan"]      # a non-finite sum
    return f"""global XK: [i64; {P * XC_WORDS}];
global XKSP: [i64; {P * XS_DIGITS}];
global XD: [i64; {P * XC_WORDS}];
global XDSP: [i64; {P * XS_DIGITS}];
global XR: [f64; {P}];
fn gpu_exact_mismatch(step: i64) {{
    rt_event_num("mismatch at step ", step);
    refuse("gpu-shadow-mismatch");
}}
fn gpu_exact_negate(a: i64 writes 8 * n, n: i64) {{
    let i = 0;
    while i < n {{
        store64(a + 8 * i, 0 - load64(a + 8 * i));
        i = i + 1;
    }}
}}
fn gpu_exact_check(step: i64) {{
    xc_clear_n(XK, XKSP, {P});
    vec_copy(XK, {xc:#x}, {P * XC_WORDS});
    if xc_check_n(XK, {P}) == 0 {{ gpu_exact_mismatch(step); }}
    let j = 0;
    while j < {P} {{
        let h = load64(XK + {8 * XC_WORDS} * j);
        if ((h ^ load64(XA + {8 * XC_WORDS} * j)) & 0xf) != 0 {{ gpu_exact_mismatch(step); }}
        if (h & {XC_SPILLED}) != 0 {{
            vec_copy(XKSP + {8 * XS_DIGITS} * j, {xd + 8:#x} + {8 * XS_WORDS} * j, {XS_DIGITS});
            gpu_exact_negate(XKSP + {8 * XS_DIGITS} * j, {XS_DIGITS});
        }}
        gpu_exact_negate(XK + {8 * XC_WORDS} * j + 8, {XC_WORDS - 1});
        j = j + 1;
    }}
    xc_clear_n(XD, XDSP, {P});
    xc_merge_n(XD, XDSP, XA, XSP, {P});
    xc_merge_n(XD, XDSP, XK, XKSP, {P});
    xc_round_into(XR, XD, XDSP, {P});
    j = 0;
    while j < {P} {{
        if (load64(XA + {8 * XC_WORDS} * j) & {special}) == 0 && (load64(XR + 8 * j) << 1) != 0 {{
            gpu_exact_mismatch(step);
        }}
        j = j + 1;
    }}
}}
"""


def rows_source(lr: Learner, img: GpuImage, lo: int, hi: int) -> str:
    """`gpu_rows()`: the owner's data rows lo..hi-1 written to `staging`, which the setup push
    buffer copies to the card (the host read and checked them; a minibatch learner's are read
    from their files here, a row at a time)."""
    from alphac.lower.learner import row_address, streamed
    body = []
    if hi > lo and lr.data:
        body += [f"    let i = {lo};", f"    while i < {hi} {{"]
        body += [f"        vec_copy({img.staged(f'rows_{d.name}'):#x} + {8 * d.cols} * (i - {lo}), "
                 f"{row_address(d, 'i', streamed(lr))}, {d.cols});" for d in lr.data]
        body += ["        i = i + 1;", "    }"]
    return "fn gpu_rows() {\n" + "\n".join(body) + "\n}\n"


def role_start(lr: Learner, img: GpuImage, lo: int, hi: int) -> str:
    """`role_device_start()`: the image checked, the conversation, the image and the role's rows
    written to `staging`, the channel set up and they copied to the card."""
    body = ["    rt_event(gpu_owner_name);", "    gpu_check_image();", "    nv_converse(0);",
            "    gpu_upload();", '    rt_event("image");', "    gpu_rows();", '    rt_event("rows");',
            "    gpu_submit(GPU_SETUP_ENTRY);", '    rt_event("uploaded");']
    return "fn role_device_start() {\n" + "\n".join(body) + "\n}\n" + rows_source(lr, img, lo, hi)


def grad_parts(lr: Learner, img: GpuImage, lo: int, hi: int, t: str, at: str, states, mine: str = "n",
               card_n: str = "gn") -> tuple[list[str], list[str], list[str]]:
    """An owner's compute over lo..hi (a minibatch learner: step t's samples among them) in three
    parts, the launch left to the caller: the card's (`states` written to it; a minibatch's
    samples into idx, their count `gn` into the gradient kernels' banks), the host's
    (learner_grad; a minibatch's count `mine` checked against `card_n`), G compared (as step
    `at`; exact_sum: the card's exact sums against the host's)."""
    card = [upload(img, s.name, s.size) for s in states]
    compare = ([f"gpu_exact_check({at});"] if lr.exact else
               [f"gpu_compare({va:#x}, G_{p}, {size}, {at});" for p, va, size in g_pieces(lr, img, read=True)])
    flush = ["learner_exact_flush();"] if lr.exact else []     # XA complete (xsum.rt's expansions)
    if not lr.batch:
        return card, [f"learner_grad({lo}, {hi});"] + flush, compare
    card += [f"let gn = gpu_batch({lo}, {hi}, {t});"]
    card += [f"store32({va:#x}, gn);" for x in grad_kernels(lr) for va in img.launch(x).counts]
    host = [f"let {mine} = learner_grad({lo}, {hi}, {t});",
            f'if {mine} != {card_n} {{ refuse("gpu-shadow-mismatch"); }}'] + flush
    return card, host, ["if n > 0 {"] + ["    " + x for x in compare] + ["}"]


def grad_lines(lr: Learner, img: GpuImage, lo: int, hi: int, t: str, at: str, states,
               card: bool = True) -> list[str]:
    """grad_parts' parts with the gradient kernels' chain: started after the card's part, the
    host's part meanwhile, waited for, G compared. An owner without samples in the step launches
    nothing. Without `card`, the host's part and the compare alone (after the card's: `n`
    already its count, the host's `hn`)."""
    c, h, compare = grad_parts(lr, img, lo, hi, t, at, states, *(("n", "gn") if card else ("hn", "n")))
    if not card:
        return h + compare
    start, wait = kick(img, grad_kernels(lr)), ["gpu_wait();"]
    if lr.batch:
        start, wait = ["if gn > 0 {"] + ["    " + x for x in start] + ["}"], ["if gn > 0 { gpu_wait(); }"]
    return c + start + h + wait + compare


def role_update(lr: Learner, img: GpuImage, ranges: dict[int, tuple[int, int]]) -> list[str]:
    """After learner_mean and learner_scalars: the combined G written to the card, the members
    and scalar parameters of each group the owner updates, their update_g<N> in one submission
    with learner_group_<N> on the host meanwhile, then the updated coordinates compared."""
    out = []
    if lr.loss is not None:
        out += [f"vec_copy({va:#x}, G_{p}, {size});" for p, va, size in g_pieces(lr, img)]
    mine = [g for g in lr.groups if ranges.get(g.index, (0, 0))[1] > ranges.get(g.index, (0, 0))[0]]
    out += host_reduced(lr, img) * bool(mine)
    for g in mine:
        la = img.launch(f"update_g{g.index}")
        out += [upload(img, s.name, s.size) for s in lr.states if s.group == g.index]
        out += [f"store32({va:#x}, load64(g_n));" for va in la.counts]     # the step's total
        out += [f"storef({x.va:#x}, {scalar_value(x)});" for x in la.scalars]
    out += kick(img, update_kernels(lr)) + [f"learner_group_{g.index}({ranges[g.index][0]}, {ranges[g.index][1]});"
                                            for g in mine] + (["gpu_wait();"] if mine else [])
    for g in mine:
        lo, hi = ranges[g.index]
        out += [f"gpu_compare({img.results[f'state_{s.name}'] + 8 * lo:#x}, st_{s.name} + {8 * lo}, "
                f"{hi - lo}, v + 1);" for s in lr.states if s.group == g.index and from_card(img, s)]
    return out
