"""Benchmark: a distributed step of alphac's role executables against PyTorch's
torch.distributed (gloo backend) on loopback, doing the same arithmetic.

Two learners: `lsq_adam` on the reference star (4 owners with shares 1, 2, 1, 4 samples), and a
generated least-squares learner with momentum, 100,000 coordinates, 8 samples, over 4 owners
(2 samples each). Each is run on a star (whole gradients to the center and back) and on a mesh
(`topology mesh`, zero2: the owners reduce-scatter the gradients and all-gather the params
directly, docs/distribution.md), whose bits are the star's. For each: start-up time (processes started to connections made, measured as a
0-step run), time per step (a long run minus the 0-step run, divided by the steps; the median
of --repeat long runs, 3 by default, for alphac and torch alike), bytes on the
loopback wire per step (the `lo` counters of /proc/net/dev, for both systems alike), and whether
the bits agree: across owner counts (1, 2, 4), and with the numerical contract's oracle for the
split and tree (alphac's reference interpreter; torch has no such contract, so its column says
whether repeated runs at least agree with each other).

    python bench/distributed.py [--steps N] [--repeat R] [--quick]
    python bench/distributed.py --auth [--steps N] [--rounds R]

`--auth` measures what authenticated membership costs (docs/distribution.md, "Membership"): the
reference star (lsq_adam, 10 N steps) and the 100k least-squares star (N steps), each launched
with and without a run key in R interleaved rounds (the order alternating), the time per step the
root's own (its events: `connected` to its last step, so start-up is not in it), the median of
each side, their difference; the difference of the medians of all roles' CPU time (user and
system, getrusage of the launcher's children: start-up is the same on both sides), divided by
the steps, which the machine's other load disturbs less; whether both publish the same bits; and
each side's CPU time per step, all roles: the median of its runs less the median of its 0-step
runs (the start-up), divided by the steps.

`--quick` (what CI runs, so that the benchmark cannot silently break) times lsq_adam only, for a
few steps: its figures are not the ones to quote.

Needs `pip install torch` (CPU) for the torch rows; alphac's rows need nothing but this repo.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPEAT = 3       # timed runs per row (--repeat): the median is reported
SPLIT4 = {"lsq_adam": [(0, 1), (1, 3), (3, 4), (4, 8)], "lsq 100k": [(0, 2), (2, 4), (4, 6), (6, 8)]}


def lo_bytes() -> int:
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith("lo:"):
            f = line.split(":", 1)[1].split()
            return int(f[0]) + int(f[8])
    return 0


def big_learner(tmp: Path, n: int = 100_000, samples: int = 8, mesh: bool = True) -> Path:
    """The least-squares learner with momentum, its stars over 1, 2 and 4 owners (`big_P`)
    and, with `mesh`, the 4-owner mesh (`bigm_4`, zero2)."""
    rng = np.random.default_rng(7)
    np.save(tmp / "x.npy", rng.standard_normal((samples, n)))
    np.save(tmp / "y.npy", rng.standard_normal(samples))
    splits = {1: [(0, 8)], 2: [(0, 4), (4, 8)], 4: SPLIT4["lsq 100k"]}
    deps = ""
    for p, split in splits.items():
        rng_s = ", ".join(f"owner[{k}] = {a}..{b}" for k, (a, b) in enumerate(split))
        deps += (f"\ndeployment big_{p} {{\n  roles coordinator, owner[{p}]\n  topology star(coordinator)\n"
                 f"  samples {rng_s}\n}}\n")
    rng_s = ", ".join(f"owner[{k}] = {a}..{b}" for k, (a, b) in enumerate(splits[4]))
    if mesh:
        deps += (f"\ndeployment bigm_4 {{\n  roles coordinator, owner[4]\n  topology mesh(coordinator)\n"
                 f"  samples {rng_s}\n  strategy zero2\n}}\n")
    src = tmp / "big.alpha"
    src.write_text(f"""learner big
data x = load("x.npy")
data y = load("y.npy")
param w: f64[{n}] = 0.0
state v: f64[{n}] = 0.0
loss(i) = 0.5 * (dot(w, x[i]) - y[i])^2
update {{
  v = 0.9 * v + grad(w)
  w = w - 0.001 * v
}}
""" + deps)
    return src


def build(src: Path, out: Path, deps: list[str]) -> None:
    from alphac import artifacts, manifest
    from alphac.build import build_role
    cwd = os.getcwd()
    os.chdir(src.parent)
    try:
        compiled, plans = artifacts.plans_of(src.name)
        entries = {}
        for d in deps:
            plan = plans[d]
            table = artifacts.roles_table(plan)
            table["source"] = str(src)
            data = (__import__("json").dumps(table, indent=2, sort_keys=True) + "\n").encode()
            artifacts.write_file(out / d / "roles.json", data, 0o644)
            entries[f"{d}/roles.json"] = manifest.artifact_entry(data, {"kind": "bench"}, [])
            for r in plan.roles():
                elf = build_role(plan, r).elf
                artifacts.write_file(out / d / str(r), elf, 0o755)
                entries[f"{d}/{r}"] = manifest.artifact_entry(elf, {"kind": "bench"}, [])
        manifest.write(out / "MANIFEST.json", manifest.new(entries, [], {}))
    finally:
        os.chdir(cwd)


def alphac_run(out: Path, dep: str, steps: int, data: Path | None = None) -> tuple[float, int, str]:
    """A launch of the built deployment; `data`: where the owners read loaded data (the
    source's directory: the roles name it relative to where they were built)."""
    from alphac.tools.launch import launch
    b0 = lo_bytes()
    t = time.perf_counter()
    rec = launch(out / dep, steps=steps, records=out / "runs", deadline_ms=60000, data=data)
    dt = time.perf_counter() - t
    assert rec["passed"], rec["roles"]
    return dt, lo_bytes() - b0, rec["published"]


def alphac_rows(src: Path, name: str, deps: dict[int, str], steps: int, tmp: Path,
                system: str = "alphac star"):
    from alphac.driver import compile_deployments
    from alphac.dist.execute import run_plan
    from alphac.ir.interp import format_state
    out = tmp / f"build-{name}-{system.split()[-1]}"
    build(src, out, list(deps.values()))
    compiled, plans = compile_deployments(src)
    results = {}
    for p, dep in deps.items():
        results[p] = alphac_run(out, dep, 5, src.parent)[2]
    want = format_state(compiled.learner, run_plan(compiled.learner, plans[deps[4]], 5))
    oracle_ok = want == results[4]
    start = statistics.median(alphac_run(out, deps[4], 0, src.parent)[0] for _ in range(3))
    longs = [alphac_run(out, deps[4], steps, src.parent) for _ in range(REPEAT)]
    wire, wire0 = longs[0][1], alphac_run(out, deps[4], 0, src.parent)[1]
    per_step = statistics.median(max(0.0, t - start) / steps for t, _, _ in longs)
    same = len({hashlib.sha256(r.encode()).hexdigest() for r in results.values()}) == 1
    return (system, name, start, per_step, (wire - wire0) / steps, same, oracle_ok)


# -- the MACs' cost (--auth) ----------------------------------------------------------------------
def auth_row(src: Path, name: str, dep: str, steps: int, rounds: int, tmp: Path) -> tuple:
    from alphac.tools.launch import launch
    out = tmp / f"build-auth-{dep}"
    build(src, out, [dep])
    per_step, bits = {True: [], False: []}, set()
    cpu = {(a, n): [] for a in (True, False) for n in (0, steps)}
    for k in range(rounds):
        for auth in ((True, False) if k % 2 == 0 else (False, True)):
            for n in (steps, 0):            # a 0-step run: the start-up's CPU time, taken off
                t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                rec = launch(out / dep, steps=n, records=out / "runs", deadline_ms=60000, data=src.parent,
                             authenticate=auth)
                t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                assert rec["passed"], rec["roles"]
                cpu[auth, n].append(sum(getattr(t1, f) - getattr(t0, f) for f in ("ru_utime", "ru_stime")) * 1e3)
                if n:
                    root = next(r for r in rec["roles"] if r["role"] == "coordinator")      # the star's root
                    per_step[auth].append(root["timing"]["steps_ms"] / steps)
                    bits.add(rec["published"])
    off, on = (statistics.median(per_step[a]) for a in (False, True))
    cpu_off, cpu_on = ((statistics.median(cpu[a, steps]) - statistics.median(cpu[a, 0])) / steps * 1e3
                       for a in (False, True))
    return (name, dep, steps, rounds, off, on, (on - off) * 1e3, cpu_on - cpu_off, len(bits) == 1, cpu_off, cpu_on)


def auth_table(steps: int, rounds: int) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        (tmp / "lsq").mkdir()
        src = tmp / "lsq" / "lsq_adam.alpha"
        shutil.copy(ROOT / "examples" / "lsq_adam.alpha", src)
        rows.append(auth_row(src, "lsq_adam", "lsq_adam_star", steps * 10, rounds, tmp))
        (tmp / "big").mkdir()
        rows.append(auth_row(big_learner(tmp / "big", mesh=False), "lsq 100k", "big_4", steps, rounds, tmp))
    print("| learner | deployment | steps | rounds | ms per step without a key (median) | with a key | "
          "the MACs' cost per step (us) | their CPU time per step, all roles (us) | same bits | "
          "CPU time per step, all roles, without a key (us, median) | with a key |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.4f} | {r[5]:.4f} | {r[6]:.1f} | {r[7]:.1f} | {r[8]} "
              f"| {r[9]:.1f} | {r[10]:.1f} |")


# -- torch ----------------------------------------------------------------------------------------
def torch_worker(rank, world, port, name, steps, split, xs, ys, q):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dist.barrier()
    t_up = time.perf_counter() - t0
    lo, hi = split[rank]
    x = torch.tensor(xs[lo:hi], dtype=torch.float64)
    y = torch.tensor(ys[lo:hi], dtype=torch.float64)
    n = xs.shape[1]
    w = torch.zeros(n, dtype=torch.float64)
    m = torch.zeros(n, dtype=torch.float64)
    v = torch.zeros(n, dtype=torch.float64)
    p1 = p2 = 1.0
    cnt = torch.tensor([float(hi - lo)], dtype=torch.float64)
    dist.all_reduce(cnt)
    t1 = time.perf_counter()
    for _ in range(steps):
        r = x @ w - y
        G = (r[:, None] * x).sum(0) if hi > lo else torch.zeros(n, dtype=torch.float64)
        dist.all_reduce(G)
        g = G / cnt
        if name == "lsq_adam":
            m = 0.9 * m + (1 - 0.9) * g
            v = 0.999 * v + (1 - 0.999) * (g * g)
            p1 *= 0.9
            p2 *= 0.999
            w = w - (0.05 * (m / (1 - p1))) / (torch.sqrt(v / (1 - p2)) + 1e-8)
        else:
            v = 0.9 * v + g
            w = w - 0.001 * v
    dist.barrier()
    t_steps = time.perf_counter() - t1
    if rank == 0:
        q.put((t_up, t_steps, hashlib.sha256(w.numpy().tobytes()).hexdigest()))
    dist.destroy_process_group()


def torch_run(name, world, steps, xs, ys):
    import torch.multiprocessing as mp
    splits = {1: [(0, 8)], 2: [(0, 4), (4, 8)], 4: SPLIT4[name]}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    b0 = lo_bytes()
    procs = [ctx.Process(target=torch_worker, args=(r, world, port, name, steps, splits[world], xs, ys, q))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return (*q.get(), lo_bytes() - b0)


def torch_rows(name, xs, ys, steps):
    try:
        import torch  # noqa: F401
    except ImportError:
        return ("torch gloo", name, float("nan"), float("nan"), float("nan"), "n/a (no torch)", "n/a")
    hashes = {w: torch_run(name, w, 5, xs, ys)[2] for w in (1, 2, 4)}
    again = torch_run(name, 4, 5, xs, ys)[2]
    runs = [torch_run(name, 4, steps, xs, ys) for _ in range(REPEAT)]
    up, t_steps = (statistics.median(r[i] for r in runs) for i in (0, 1))
    wire, wire0 = runs[0][3], torch_run(name, 4, 0, xs, ys)[3]
    return ("torch gloo", name, up, t_steps / steps, (wire - wire0) / steps,
            len(set(hashes.values())) == 1, f"no contract (repeat equal: {again == hashes[4]})")


def main() -> None:
    global REPEAT
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="lsq_adam only, 3 steps: a smoke run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed runs per row, the median reported (default %(default)s)")
    ap.add_argument("--auth", action="store_true", help="the MACs' cost: with and without a run key")
    ap.add_argument("--rounds", type=int, default=7, help="--auth's interleaved rounds (default %(default)s)")
    args = ap.parse_args()
    if args.auth:
        return auth_table(args.steps, max(1, args.rounds))
    REPEAT = max(1, args.repeat)
    if args.quick:
        args.steps, REPEAT = 3, 1
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lsq = tmp / "lsq"
        lsq.mkdir()
        src = lsq / "lsq_adam.alpha"
        text = (ROOT / "examples" / "lsq_adam.alpha").read_text()
        for p, split in {1: [(0, 8)], 2: [(0, 4), (4, 8)]}.items():
            rng_s = ", ".join(f"owner[{k}] = {a}..{b}" for k, (a, b) in enumerate(split))
            text += (f"\ndeployment star_{p} {{\n  roles coordinator, owner[{p}]\n"
                     f"  topology star(coordinator)\n  samples {rng_s}\n}}\n")
        src.write_text(text)
        rows.append(alphac_rows(src, "lsq_adam", {1: "star_1", 2: "star_2", 4: "lsq_adam_star"},
                                args.steps * 10, tmp))
        rows.append(alphac_rows(src, "lsq_adam", {1: "star_1", 2: "star_2", 4: "lsq_adam_mesh"},
                                args.steps * 10, tmp, "alphac mesh"))
        from alphac.driver import compile_file
        lr = compile_file(ROOT / "examples" / "lsq_adam.alpha").learner
        xs = np.array(lr.datum("x").values).reshape(lr.datum("x").shape)
        ys = np.array(lr.datum("y").values)
        rows.append(torch_rows("lsq_adam", xs, ys, args.steps * 10))
        if not args.quick:
            big_dir = tmp / "big"
            big_dir.mkdir()
            bsrc = big_learner(big_dir)
            rows.append(alphac_rows(bsrc, "lsq 100k", {1: "big_1", 2: "big_2", 4: "big_4"}, args.steps, tmp))
            rows.append(alphac_rows(bsrc, "lsq 100k", {1: "big_1", 2: "big_2", 4: "bigm_4"}, args.steps, tmp,
                                    "alphac mesh"))
            rows.append(torch_rows("lsq 100k", np.load(big_dir / "x.npy"), np.load(big_dir / "y.npy"),
                                   args.steps))
    print("| system | learner | start-up s | time per step ms | loopback bytes per step | "
          "bits equal across 1/2/4 owners | bits equal to the contract's oracle |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3] * 1e3:.3f} | {r[4]:.0f} | {r[5]} | {r[6]} |")


if __name__ == "__main__":
    main()
