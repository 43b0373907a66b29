"""Meshes (`topology mesh(C)`): the owners reduce-scatter and all-gather directly, in pairwise
rounds. The bits are the star's with the same split, tree and strategy, in the plan executor and
in the role executables (both ISAs, checkpoints); the protocol survives unbuffered sends; what a
mesh cannot do is refused by name (E0118), and a peer on a mesh link that is not the owner it
claims, or sends what the plan does not say, is refused by name within the deadline."""
import random
import re
import socket
import struct
import subprocess
import time

import pytest

import frames
import learngen
from conftest import EXAMPLES, alphac, example, require_tool
from frames import recv_exact
from alphac.formats import HELLO_BYTES

from alphac.refusals import REFUSALS


def test_every_two_owners_meet_once_in_disjoint_pairs():
    from alphac.dist.structure import exchange_rounds
    for owners in range(1, 65):
        rounds, seen = exchange_rounds(owners), set()
        assert len(rounds) == owners - 1 + owners % 2 or owners == 1
        for pairs in rounds:
            members = [k for p in pairs for k in p]
            assert len(members) == len(set(members)), (owners, pairs)
            for a, b in pairs:
                assert 0 <= a < b < owners and (a, b) not in seen
                seen.add((a, b))
        assert len(seen) == owners * (owners - 1) // 2


def mesh_and_star(base: str, owners: int, rng: random.Random, strategy: str, nsamples: int,
                  groups) -> str:
    """`base` with a mesh and a star of one random split, tree and partition."""
    cuts = sorted(rng.randint(0, nsamples) for _ in range(owners - 1))
    b = [0] + cuts + [nsamples]
    samples = ", ".join(f"owner[{k}] = {b[k]}..{b[k + 1]}" for k in range(owners))
    tree = learngen.random_tree([f"owner[{k}]" for k in range(owners)], rng)
    part = ""
    if groups and rng.random() < 0.6:
        g = rng.choice(groups)
        c = sorted(rng.randint(0, g.size) for _ in range(owners - 1))
        c = [0] + c + [g.size]
        part = f"  partition {g.members[0]}: " + ", ".join(
            f"owner[{k}] = {c[k]}..{c[k + 1]}" for k in range(owners)) + "\n"
    out = base
    for name, topo in (("m", "mesh"), ("s", "star")):
        out += (f"\ndeployment {name} {{\n  roles coordinator, owner[{owners}]\n  topology {topo}(coordinator)\n"
                f"  samples {samples}\n  combine {tree}\n  strategy {strategy}\n{part}}}\n")
    return out


def strip_deployments(text: str) -> str:
    return re.sub(r"^deployment \w+ \{.*?^\}\n", "", text, flags=re.M | re.S)


@pytest.mark.parametrize("name", ["lsq_adam", "lsq_momentum", "independent_state", "logistic"])
def test_a_mesh_plan_is_its_stars_bits(name, tmp_path):
    from alphac.dist.execute import run_plan
    from alphac.driver import compile_deployments, compile_file
    from alphac.ir.interp import format_state
    base = strip_deployments((EXAMPLES / f"{name}.alpha").read_text())
    lr = compile_file(EXAMPLES / f"{name}.alpha").learner
    (tmp_path / "data").symlink_to(EXAMPLES / "data")     # what the examples load
    rng = random.Random(name)
    for trial in range(6):
        owners = rng.randint(1, 6)
        src = tmp_path / f"{name}{trial}.alpha"
        src.write_text(mesh_and_star(base, owners, rng, rng.choice(["zero2", "zero3"]),
                                     lr.nsamples or 0, lr.groups))
        _, plans = compile_deployments(src)
        assert plans["m"].mesh and not plans["s"].mesh
        assert plans["m"].check_protocol() == []
        steps = rng.randint(1, 7)
        got = {k: format_state(p.lr, run_plan(p.lr, p, steps)) for k, p in plans.items()}
        assert got["m"] == got["s"], (owners, src.read_text())


def test_random_learners_on_meshes_agree_with_the_contract(tmp_path):
    """Generated learners, each on a mesh and on the star of the same split, tree and strategy,
    in the plan executor, against the contract computed in tests/differential.py."""
    import differential
    from alphac.diag import CompileError
    from alphac.driver import compile_file
    checked = 0
    for seed in range(400):
        rep = differential.check_program(learngen.generate(seed), tmp_path / str(seed), ("interp",))
        if rep.status != "agreed":
            continue
        work = tmp_path / f"w{seed}"
        work.mkdir()
        for name, data in rep.files.items():
            (work / name).write_bytes(data)
        base = strip_deployments(rep.source)
        (work / "f.alpha").write_text(base)
        try:
            lr = compile_file(work / "f.alpha").learner
        except CompileError:
            continue
        if lr.loss is None or not lr.nsamples:
            continue
        rng = random.Random(seed)
        text = mesh_and_star(base, rng.randint(2, 5), rng, rng.choice(["zero2", "zero3"]),
                             lr.nsamples, lr.groups)
        got = differential.check_text(text, work, ("plan",), files=rep.files)
        if got.status == "refused":          # a partition this learner's groups refuse
            continue
        assert got.status == "agreed" and {"plan:m", "plan:s"} <= set(got.outcomes), (seed, got.summary())
        checked += 1
        if checked == 12:
            break
    assert checked == 12


def test_the_crossing_exchanges_need_the_lower_owner_to_send_first():
    """Both owners of a pair sending first fits buffered channels but not unbuffered ones: the
    rendezvous check is what catches it."""
    from alphac.dist.plan import Action, rendezvous, simulate
    from alphac.driver import compile_deployments
    plan = compile_deployments(example("lsq_adam"))[1]["lsq_adam_mesh"]
    programs = {r: plan.project(r) for r in plan.roles()}
    assert simulate(programs) == [] and rendezvous(programs) == []
    from alphac.dist.structure import Role
    o1 = Role("owner", 1)
    prog = programs[o1]
    i = next(i for i, a in enumerate(prog) if a.op == "recv" and a.peer == Role("owner", 0))
    assert prog[i + 1].op == "send" and prog[i + 1].peer == Role("owner", 0)
    prog[i], prog[i + 1] = prog[i + 1], prog[i]          # owner 1 sends first as well
    assert simulate(programs) == []
    stuck = rendezvous(programs)
    assert any("owner.1 waits forever" in p for p in stuck), stuck


@pytest.mark.parametrize("text, says", [
    ("  strategy zero1\n", "strategy `zero1` replicates the gradients"),
    ("", "strategy `replicated` replicates the gradients"),
    ("  strategy zero2\n  deliver owner[0]\n", "E0116"),
])
def test_what_a_mesh_cannot_do_is_refused_by_name(text, says, tmp_path):
    base = strip_deployments((EXAMPLES / "lsq_adam.alpha").read_text())
    src = tmp_path / "m.alpha"
    src.write_text(base + "deployment m {\n  roles coordinator, owner[2]\n  topology mesh(coordinator)\n"
                   + text + "}\n")
    rc, out, err = alphac("check", src)
    assert rc != 0 and says in err, err


def test_a_mesh_is_refused_under_exact_sum(tmp_path):
    base = strip_deployments((EXAMPLES / "lsq_adam.alpha").read_text())
    base = base.replace("learner lsq_adam", "learner lsq_adam\ncontract exact_sum", 1)
    src = tmp_path / "m.alpha"
    src.write_text(base + "deployment m {\n  roles coordinator, owner[2]\n  topology mesh(coordinator)\n"
                   "  strategy zero2\n}\n")
    rc, out, err = alphac("check", src)
    assert rc != 0 and "E0118" in err and "exact_sum" in err, err


def test_alphac_plan_shows_the_reduce_scatter_and_the_identity_names_the_mesh():
    from alphac.dist.identity import digests
    from alphac.driver import compile_deployments
    rc, out, _ = alphac("plan", example("lsq_adam"), "--deployment", "lsq_adam_mesh")
    assert rc == 0
    assert "topology: mesh of the owners" in out and "(reduce-scatter)" in out and "(all-gather)" in out
    assert "send combine -> owner.1" in out and "deliver" not in out.split("messages per step")[1]
    plans = compile_deployments(example("lsq_adam"))[1]
    m, s = digests(plans["lsq_adam_mesh"].dep), digests(plans["lsq_adam_star_zero2"].dep)
    assert m["membership"] != s["membership"]
    assert {k for k in m if m[k] == s[k]} == {"learner", "rate", "contract", "combine", "plan"}


# -- the role executables --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def roles(example_roles):
    return example_roles


def launch(dep_dir, tmp_path, **kw):
    from alphac.tools.launch import launch as run
    return run(dep_dir, records=tmp_path / "runs", **kw)


def test_the_mesh_roles_publish_the_stars_bits_and_loss_sums(roles, tmp_path):
    import os
    from conftest import ROOT
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        m = launch(roles / "lsq_adam_mesh", tmp_path, steps=7)
        s = launch(roles / "lsq_adam_star_zero2", tmp_path, steps=7)
    finally:
        os.chdir(cwd)
    assert m["passed"] and s["passed"]
    assert m["published"] == s["published"]
    assert [(e["sum"], e["n"]) for e in m["loss"]] == [(e["sum"], e["n"]) for e in s["loss"]]


def test_a_mixed_isa_mesh_resumes_a_checkpoint_exactly(tmp_path):
    """Owners on both ISAs, an odd owner count, empty shares: 3 steps, a checkpoint, 2 more
    resumed, equal to 5 straight and to the star's."""
    require_tool("qemu-aarch64")
    from backend import build_deployment
    base = strip_deployments((EXAMPLES / "lsq_adam.alpha").read_text())
    src = tmp_path / "mix.alpha"
    body = ("  samples owner[0] = 0..0, owner[1] = 0..3, owner[2] = 3..8\n"
            "  combine (owner[2], (owner[0], owner[1]))\n  strategy zero3\n"
            "  partition owner[0] = 0..2, owner[1] = 2..2, owner[2] = 2..5\n")
    src.write_text(base + "deployment m {\n  roles coordinator, owner[3]\n  topology mesh(coordinator)\n"
                   + body + "  target owner[1], coordinator = aarch64\n}\n"
                   + "deployment s {\n  roles coordinator, owner[3]\n  topology star(coordinator)\n" + body + "}\n")
    m = build_deployment(src, "m", tmp_path / "roles")
    s = build_deployment(src, "s", tmp_path / "roles")
    five = launch(m, tmp_path, steps=5)
    ck = tmp_path / "ck"
    launch(m, tmp_path, steps=3, checkpoint=ck)
    resumed = launch(m, tmp_path, steps=2, resume=ck)
    star = launch(s, tmp_path, steps=5)
    assert five["passed"] and resumed["passed"]
    assert five["published"] == resumed["published"] == star["published"]


# -- hostile peers on a mesh link ------------------------------------------------------------------
@pytest.fixture(scope="module")
def mesh():
    from alphac.dist.identity import digests
    from alphac.dist.structure import Role
    from alphac.driver import compile_deployments
    from alphac.lower.role import code_of
    plan = compile_deployments(example("lsq_adam"))[1]["lsq_adam_mesh"]
    return {"plan": plan, "id": digests(plan.dep), "coord": code_of(plan, Role("coordinator")),
            "owner": [code_of(plan, Role("owner", k)) for k in range(4)],
            "block": [plan.slice_total(k) + 2 for k in range(4)]}


def free_base() -> int:
    from alphac.tools.launch import free_ports_at
    return free_ports_at([1, 2, 3, 4], set())


def mesh_talk(roles, mesh, play, deadline_ms=800):
    """owner.0 of lsq_adam_mesh against a fake coordinator; `play(connect, mesh)` plays the
    higher owners on its mesh links (`connect()`: a new connection to owner.0's mesh port).
    Returns (exit code, stderr)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    base = free_base()
    exe = roles / "lsq_adam_mesh" / "owner.0"
    p = subprocess.Popen([str(exe), "--steps", "1", "--deadline-ms", str(deadline_ms),
                          "--parent", f"127.0.0.1:{port}", "--mesh", f"127.0.0.1:{base}+{{}}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    conns = []

    def connect():
        end = time.monotonic() + 5
        while True:
            c = socket.socket()
            try:
                c.connect(("127.0.0.1", base + 1))          # owner.0 is rank 1
                conns.append(c)
                return c
            except OSError:
                c.close()
                assert time.monotonic() < end, "owner.0 never listened on its mesh port"
                time.sleep(0.02)
    try:
        srv.settimeout(5)
        up, _ = srv.accept()
        up.sendall(frames.accept(up, mesh["coord"], mesh["id"], 1)[1])
        play(connect, mesh)
        out, err = p.communicate(timeout=deadline_ms / 1000 + 10)
        up.close()
    finally:
        srv.close()
        for c in conns:
            c.close()
        if p.poll() is None:
            p.kill()
    assert p.returncode >= 0, f"owner died of signal {-p.returncode}"
    return p.returncode, err


def hello_as(conn, mesh, code, identity=None):
    frames.connect(conn, code, mesh["owner"][0], identity or mesh["id"], 1, read_answer=False)


def three_owners(connect, mesh):
    """Owners 1, 2, 3 connect with good HELLOs; owner.0's HELLO back read on each."""
    out = []
    for k in (1, 2, 3):
        c = connect()
        hello_as(c, mesh, mesh["owner"][k])
        recv_exact(c, frames.HEADER + HELLO_BYTES)
        out.append(c)
    return out


def block(mesh, sender, **kw):
    words = mesh["block"][0]
    payload = struct.pack(f"<{words - 1}d", *[0.25] * (words - 1)) + struct.pack("<q", 2)
    args = dict(kind=2, sender=mesh["owner"][sender], payload=payload, identity=mesh["id"], version=0)
    args.update(kw)
    return frames.encode(**args)


def first_exchange(conns, mesh):
    """Owner 1's link: owner.0 sends its block first (the lower of the pair)."""
    c = conns[0]
    h = frames.decode_header(recv_exact(c, frames.HEADER))
    assert h["kind"] == 2 and h["length"] == 8 * mesh["block"][1] and h["sender"] == mesh["owner"][0]
    recv_exact(c, h["length"])
    return c


def twice(connect, mesh):
    """Owner 2 connects, then another connection claims to be owner 2."""
    c = connect()
    hello_as(c, mesh, mesh["owner"][2])
    recv_exact(c, frames.HEADER + HELLO_BYTES)
    hello_as(connect(), mesh, mesh["owner"][2])


CASES = {
    "frame-unknown-role": lambda connect, m: hello_as(connect(), m, m["coord"]),
    "rank-duplicate": lambda connect, m: twice(connect, m),
    "peer-plan": lambda connect, m: hello_as(connect(), m, m["owner"][1], {**m["id"], "plan": bytes(32)}),
    "peer-membership": lambda connect, m: hello_as(connect(), m, m["owner"][1],
                                                   {**m["id"], "membership": b"\1" * 32}),
    "frame-too-long": lambda connect, m: first_exchange(three_owners(connect, m), m).sendall(
        block(m, 1, length=8 * m["block"][0] + 8)),
    "frame-truncated": lambda connect, m: first_exchange(three_owners(connect, m), m).sendall(
        block(m, 1)[:-8]) or None,
    "frame-out-of-order": lambda connect, m: first_exchange(three_owners(connect, m), m).sendall(
        block(m, 1, kind=5)),
    "frame-checksum": lambda connect, m: first_exchange(three_owners(connect, m), m).sendall(
        block(m, 1, checksum=99)),
}


@pytest.mark.parametrize("case", sorted(CASES) + ["wrong-link", "silence"])
def test_a_hostile_peer_on_a_mesh_link_is_refused_by_name(roles, mesh, case):
    expect = case

    def play(connect, m):
        if case == "wrong-link":           # owner 2's block on owner 1's link
            first_exchange(three_owners(connect, m), m).sendall(block(m, 2))
        elif case == "silence":             # good HELLOs, then nothing: the deadline
            first_exchange(three_owners(connect, m), m)
        else:
            CASES[case](connect, m)
    t0 = time.monotonic()
    code, err = mesh_talk(roles, mesh, play)
    assert time.monotonic() - t0 < 8, "owner.0 did not respect its deadline"
    expect = {"wrong-link": "frame-unknown-role", "silence": "peer-lost",
              "frame-truncated": "frame-truncated"}.get(case, case)
    assert err.startswith("refused: ") and err.count("\n") == 1, err
    name = err.strip()[len("refused: "):]
    if case == "frame-truncated":           # short, then the deadline
        assert name in ("frame-truncated", "peer-lost"), err
    else:
        assert name == expect, (case, err)
    assert code == REFUSALS[name][0]


def test_a_mesh_owner_without_its_mesh_address_is_refused_usage(roles):
    r = subprocess.run([str(roles / "lsq_adam_mesh" / "owner.1"), "--steps", "1",
                        "--parent", "127.0.0.1:9"], capture_output=True, text=True, timeout=10)
    assert (r.returncode, r.stderr.splitlines()[-1]) == (64, "refused: usage (--mesh: missing: this role is a mesh owner)")
    r = subprocess.run([str(roles / "lsq_adam_mesh" / "owner.1"), "--steps", "1",
                        "--parent", "127.0.0.1:9", "--mesh", "127.0.0.1:99999+{}"],
                       capture_output=True, text=True, timeout=10)
    assert (r.returncode, r.stderr.splitlines()[-1]) == (64, "refused: usage (--mesh: not A.B.C.D:PORT, [IPv6]:PORT, [A.B.C.D]:PORT or NAME:PORT; {} is the rank)")
