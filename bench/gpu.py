"""Benchmark: a GPU owner beside alphac's CPU executable and PyTorch float64 on the same card.

The learners (issue 42), each trained with Adam:
  lsq     least squares, 64 coordinates x 65,536 samples read at run time, `contract exact_sum`
  mlp     a 784-256-10 tanh MLP with softmax cross-entropy on 256 samples (full batch: batch 256)
  digits  examples/digits_mlp.alpha (64-32-10, 1,500 images)
(gpu/local_check.py's generators write the first two, their data as .npy files beside them.)

For each, the same span is timed on every side, the set-up apart and warm-up excluded:
  * alphac's GPU owner (with the full host shadow, and with `--shadow sampled` at each rate of
    --rates where the owner allows it, exact_sum's least squares included: docs/gpu.md "Shadow
    policies"; built with the host choices of --choose) and CPU executable, both at the best
    level this CPU runs (x86_64-v4, -v3, else x86_64: the owner's host part, its shadow, is
    lowered as the CPU executable is; the header names it): a step by difference, a run of
    W + N steps minus a run of W steps, over N (start-up, reading the data and the first W steps
    cancel); the GPU owner's start-up is a whole `--steps 0` run, its parts from its events file:
    alone (`cold`), then with this process holding the GPU's files open (`fds`), then holding
    them and a UVM registration of the GPU (`uvm`; gpu/holder.py), R times in turn, all before
    this process touches CUDA (a context of torch's would hold the GPU for every later run);
    then, after those are printed, the same owner built with `--gpu-map rm` (no UVM: docs/nvdrv.md
    "Mapping with the RM alone"), alone, R times, and one run of W + N steps whose bits are
    compared with the CPU executable's after the table; its failure is said, never fatal (each
    run bounded: RM_RUN_TIMEOUT seconds);
  * PyTorch float64 on the card (eager: autograd and torch.optim.Adam; and the step captured in a
    CUDA graph, Adam `capturable`), N steps after W untimed ones, synchronized at both ends; the
    model, data and optimizer made before.
The systems take turns in each of R rounds (interleaved); the table shows the median and the
spread (lowest..highest) over the rounds, and whether the GPU owner's printed state after W + N
steps is the CPU executable's, bit for bit, under each policy. Without a card, torch or CUDA, the rows say so.

    python bench/gpu.py [--learners lsq,mlp,digits] [--steps N] [--warmup W] [--rounds R] [--out DIR]
                        [--rates 8,64] [--choose KEY=VALUE ...]
    python bench/gpu.py --quick [--runner FILE.py:FUNCTION] [--proc DIR]

--quick: small learners (8 x 64 least squares, a 6-5-3 MLP on 16 samples), 2 + 2 steps, 2
rounds; with --runner (tests/test_device_check_local.py:mock_runner) every GPU owner runs against
the mock, which checks the run and its bits but whose times mean nothing. The card is found as
gpu/local_check.py finds it (--proc, default /proc/driver/nvidia, then the owner's
--probe-identity). Exit 0 when every GPU owner ran and gave the CPU executable's bits, 1 if one
did not, 2 when nothing could run (no card, no ptxas).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gpu")]

from bench.digits import median_spread          # noqa: E402
from local_check import NoCard, card_host, lsq_source, mlp_source, run_exe   # noqa: E402

# name -> (what the table calls it, from its size; its full size; its --quick size)
LEARNERS = {
    "lsq": (lambda z: f"least squares {z['width']} x {z['rows']:,}, exact_sum, Adam",
            {"width": 64, "rows": 65536}, {"width": 8, "rows": 64}),
    "mlp": (lambda z: "MLP {}-{}-{} tanh, batch {}, Adam".format(*z["dims"], z["rows"]),
            {"dims": (784, 256, 10), "rows": 256}, {"dims": (6, 5, 3), "rows": 16}),
    "digits": (lambda z: "digits MLP 64-32-10, batch 1,500, Adam", {}, None),
}


def learner_source(name: str, size: dict, where: Path) -> Path:
    """The learner's source file under `where` (its data beside it); digits is the example's."""
    if name == "digits":
        return ROOT / "examples" / "digits_mlp.alpha"
    path = where / f"bench_{name}.alpha"
    if name == "lsq":
        text = lsq_source(size["width"], size["rows"], f"bench_{name}", keep=False, where=where,
                          optimizer="adam", exact=True)
    else:
        text = mlp_source(*size["dims"], size["rows"], f"bench_{name}", where=where, optimizer="adam")
    path.write_text(text)
    return path


# Start-up's spans as 2026-12-04's card run reported them; its parts are finer: gpu.rt's events
# before the conversation (the data read at run time is checked first), every event the
# conversation writes (Conversation.marks(): docs/nvdrv.md "Where start-up goes"), then gpu.rt's
# three after it (the image and the rows written, the setup submission done).
START_MARKS = ("identity", "uvm", "memory", "channel", "uploaded")
BEFORE_CONVERSATION = ("shadow full", "data checked")
AFTER_CONVERSATION = ("image", "rows", "uploaded")
HOLD = ("cold", "fds", "uvm")       # start-up alone, and with the GPU held (gpu/holder.py LEVELS)
RM_RUN_TIMEOUT = 15                 # seconds a `--gpu-map rm` run may take (the device time is short)


def start_parts(events: Path, marks=START_MARKS) -> dict[str, float]:
    """The milliseconds between consecutive `marks` in a GPU owner's events file (of those it
    has), each named "A->B"; {} without the file."""
    from alphac.tools.record import split_event
    at = {}
    if events.exists():
        for line in events.read_text().splitlines():
            what, ns = split_event(line)
            if what in marks and ns is not None:
                at[what] = ns
    seen = [m for m in marks if m in at]
    return {f"{a}->{b}": (at[b] - at[a]) / 1e6 for a, b in zip(seen, seen[1:])}


def start_ups(args, runner, host, exes: dict, gpu, events: Path) -> dict:
    """Each of HOLD in turn, `args.rounds` times, a whole `--steps 0` run of the GPU owner with its
    events: its seconds, its spans (START_MARKS) and its parts (every mark), or why a hold was not
    made (gpu/holder.py's HoldFailed; then that kind is not tried again). Run before this process
    touches CUDA: a context here would hold the GPU for every run after it."""
    from holder import HoldFailed, held
    marks = (*BEFORE_CONVERSATION, *gpu.conversation.marks(), *AFTER_CONVERSATION)
    res = {k: {"start": [], "spans": [], "parts": [], "why": ""} for k in HOLD}
    for _ in range(args.rounds):
        for kind in HOLD:
            r = res[kind]
            if r["why"]:
                continue
            ev = events.with_suffix(f".{kind}.events")
            try:
                with (held(host.uuid, host.minor, kind) if kind != "cold" else nullcontext()):
                    r["start"].append(run_span(runner, exes["gpu"][0], 0, gpu, ("--events", str(ev)))[0])
            except HoldFailed as e:
                r["why"] = str(e)
                continue
            r["spans"].append(start_parts(ev))
            r["parts"].append(start_parts(ev, marks))
    return {k: {"start": r["start"], "why": r["why"], "spans": merged(r["spans"]), "parts": merged(r["parts"])}
            for k, r in res.items()}


def print_start_ups(title: str, starts: dict) -> None:
    """Where start-up goes (issue 42), from the owner's own events: a line of spans and one of
    parts for each kind of HOLD (or why it was not measured), flushed: a later deadline keeps them."""
    for kind, s in starts.items():
        said = {"cold": "", "fds": ", the GPU's files held open",
                "uvm": ", the GPU held open and registered with UVM"}[kind]
        if s["why"]:
            print(f"# {title}: start-up{said}: not measured: {s['why']}", flush=True)
            continue
        for what, whole in (("spans", f"whole run {ms(s['start'])}, "), ("parts", "")):
            print(f"# {title}: start-up {what}{said}, ms: {whole}" + ", ".join(
                f"{k} {ms([v / 1e3 for v in vs])}" for k, vs in s[what].items()), flush=True)


def rm_start_ups(args, runner, host, lr, target: str, where: Path) -> dict:
    """The owner built with `--gpu-map rm`: R `--steps 0` runs alone (its seconds and parts), then
    one of W + N steps (its exit and output); every failure caught and said in "why"."""
    from alphac.build import build_gpu_owner
    r = {"start": [], "parts": [], "why": "", "run": None}
    try:
        gpu = build_gpu_owner(lr, target, host.choose("map", "rm"))
        exe = where / f"{lr.name}.{target}.rm"
        exe.write_bytes(gpu.image.elf)
        exe.chmod(0o755)
        marks = (*BEFORE_CONVERSATION, *gpu.conversation.marks(), *AFTER_CONVERSATION)
        ev = where / f"{lr.name}.start.rm.events"
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            rc, _, err = runner(exe, ["--steps", "0", "--events", str(ev)], gpu)
            if rc != 0:
                r["why"] = f"exit {rc}: {err.strip()[-300:]}"
                return r
            r["start"].append(time.perf_counter() - t0)
            r["parts"].append(start_parts(ev, marks))
        rc, out, err = runner(exe, ["--steps", str(args.warmup + args.steps)], gpu)
        r["run"] = (rc, out)
        if rc != 0:
            r["why"] = f"exit {rc} after {args.warmup + args.steps} steps: {err.strip()[-300:]}"
    except Exception as e:          # noqa: BLE001  an option under trial: said, never fatal
        r["why"] = f"{type(e).__name__}: {e}"[:300]
    return r


def print_rm(title: str, r: dict) -> None:
    if r["start"]:
        parts = merged(r["parts"])
        print(f"# {title}: start-up parts, map rm, ms: whole run {ms(r['start'])}, " + ", ".join(
            f"{k} {ms([v / 1e3 for v in vs])}" for k, vs in parts.items()), flush=True)
    if r["why"]:
        print(f"# {title}: map rm FAILED: {r['why']}", flush=True)


def merged(rounds: list[dict[str, float]]) -> dict[str, list[float]]:
    """Each key's values over the rounds, in the first round's order."""
    keys = list(dict.fromkeys(k for r in rounds for k in r))
    return {k: [r[k] for r in rounds if k in r] for k in keys}


def run_span(runner, exe: Path, steps: int, built, more=()) -> tuple[float, int, str]:
    """(seconds, exit code, stdout) of one whole run of `steps` steps (`more`: other options)."""
    t0 = time.perf_counter()
    rc, out, _ = runner(exe, ["--steps", str(steps), *more], built)
    return time.perf_counter() - t0, rc, out


# -- PyTorch float64, the same learners ---------------------------------------------------------
def torch_model(name: str, size: dict, where: Path, torch, device: str):
    """(parameters, a closure computing the loss, their data) at the learner's initial values."""
    import numpy as np
    f64 = torch.float64
    load = lambda n: torch.from_numpy(np.load(n)).to(device=device, dtype=f64)     # noqa: E731
    if name == "lsq":
        x, y = load(where / "bench_lsq_x.npy"), load(where / "bench_lsq_y.npy")
        w = torch.zeros(size["width"], dtype=f64, device=device, requires_grad=True)
        return [w], lambda: 0.5 * ((x @ w - y) ** 2).mean()
    if name == "digits":
        data = ROOT / "examples" / "data"
        x, y = load(data / "digits_x_train.npy"), load(data / "digits_y_train.npy").long()
        ps = [load(data / f"digits_{n}.npy").requires_grad_() for n in ("w1", "b1", "w2", "b2")]
    else:
        i, h, c = size["dims"]
        x, y = load(where / "bench_mlp_x.npy"), load(where / "bench_mlp_y.npy").long()
        ps = [torch.full((h, i), 1 / 1024, dtype=f64, device=device),
              torch.tensor([((k * 5) % 9 - 4) / 32 for k in range(h)], dtype=f64, device=device),
              torch.tensor([[((cc * 7 + k * 5) % 13 - 6) / 64 for k in range(h)] for cc in range(c)],
                           dtype=f64, device=device),
              torch.zeros(c, dtype=f64, device=device)]
        ps = [p.requires_grad_() for p in ps]
    W1, b1, W2, b2 = ps
    return ps, lambda: torch.nn.functional.cross_entropy(torch.tanh(x @ W1.T + b1) @ W2.T + b2, y)


def torch_time(name: str, size: dict, where: Path, torch, device: str, warmup: int, steps: int,
               graph: bool) -> float:
    """Seconds for `steps` Adam steps after `warmup` untimed ones (set-up outside the span)."""
    ps, loss = torch_model(name, size, where, torch, device)
    lr = 0.01 if name != "lsq" else 0.05
    opt = torch.optim.Adam(ps, lr=lr, betas=(0.9, 0.999), eps=1e-8, capturable=graph)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=not graph)
        loss().backward()
        opt.step()
    if graph:       # torch's whole-network capture: warm up on a side stream, capture, replay
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=False)
        with torch.cuda.graph(g):
            step()
        step = g.replay
    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return time.perf_counter() - t0


def torch_or_why():
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    torch.set_num_threads(1)
    return torch, ("" if torch.cuda.is_available() else "torch has no CUDA here: on the CPU")


# -- the table ----------------------------------------------------------------------------------
def ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    med, lo, hi = median_spread(xs)
    return f"{med * 1e3:.3f} ({lo * 1e3:.3f}..{hi * 1e3:.3f})"


def bench(args, runner) -> int:
    from alphac.build import build_gpu_owner, build_learner
    from alphac.driver import compile_file
    from alphac.ptx.abi import can_sample
    from alphac.targets import host_runs
    out = Path(args.out or tempfile.mkdtemp(prefix="alphac-bench-gpu-"))
    (out / "bin").mkdir(parents=True, exist_ok=True)
    try:
        sm, host, _ = card_host(out, runner, Path(args.proc), None, None)
    except NoCard as e:
        print(f"bench/gpu.py: {e.args[1]}", file=sys.stderr)
        return e.args[0]
    for key, value in args.choose:      # how every owner drives the card (the default otherwise)
        host = host.choose(key, value)
    level = next(t for t in ("x86_64-v4", "x86_64-v3", "x86_64") if host_runs(t))
    target = f"{level}+sm_{sm}"         # the owner's host part (its shadow) at the CPU's level
    made = {}
    for name in args.learners:
        title, full, quick = LEARNERS[name]
        size = quick if args.quick else full
        title = title(size)
        src = learner_source(name, size, out / "bin")
        lr = compile_file(src).learner
        t0 = time.perf_counter()
        gpu = build_gpu_owner(lr, target, host)
        build_s = time.perf_counter() - t0
        gpu_exe = out / "bin" / f"{lr.name}.{target}"
        exes = {"gpu": (gpu_exe, gpu, gpu.image.elf, ()),
                "cpu": (out / "bin" / f"{lr.name}.{level}", None, build_learner(lr, level).elf, ())}
        for rate in args.rates * can_sample(lr):      # the sampled shadow, where the owner allows it
            exes[f"sampled 1/{rate}"] = (gpu_exe, gpu, gpu.image.elf,
                                         ("--shadow", "sampled", "--shadow-rate", str(rate)))
        for path, _, elf, _ in exes.values():
            path.write_bytes(elf)
            path.chmod(0o755)
        made[name] = (title, size, lr, gpu, exes, build_s)
    starts = {}                 # every start-up first (torch's CUDA would hold the GPU), said at once
    for name, (title, _, lr, gpu, exes, _) in made.items():
        starts[name] = start_ups(args, runner, host, exes, gpu, out / "bin" / f"{lr.name}.start")
        print_start_ups(title, starts[name])
    rms = {}                    # then the owners mapped by the RM alone: after the default's lines
    timed = (lambda exe, a, built: run_exe(exe, a, built, RM_RUN_TIMEOUT)) if runner is run_exe else runner
    for name, (title, _, lr, _, _, _) in made.items():
        rms[name] = rm_start_ups(args, timed, host, lr, target, out / "bin")
        print_rm(title, rms[name])
    torch, why = torch_or_why()
    device = "cuda" if torch is not None and not why else "cpu"
    rows, ok, graph_failed = [], True, {}
    sampled = [f"sampled 1/{rate}" for rate in args.rates]
    for name in args.learners:
        title, size, lr, gpu, exes, build_s = made[name]
        times = {k: [] for k in ("gpu", *sampled, "cpu", "torch", "graph")}
        outputs, w, n = {}, args.warmup, args.steps
        for _ in range(args.rounds):
            for kind, (path, built, _, more) in exes.items():
                long_s, rc, text = run_span(runner, path, w + n, built, more)
                short_s, rc0, _ = run_span(runner, path, w, built, more)
                outputs[kind] = (rc, rc0, text)
                times[kind].append((long_s - short_s) / n)
            if torch is not None:
                times["torch"].append(torch_time(name, size, out / "bin", torch, device, w, n, False) / n)
                if device == "cuda" and name not in graph_failed:
                    try:
                        times["graph"].append(torch_time(name, size, out / "bin", torch, device, w, n, True) / n)
                    except RuntimeError as e:       # a capture torch refuses: said, not fatal
                        graph_failed[name] = str(e).splitlines()[0][:200]
        same = all(outputs[k][:2] == (0, 0) and outputs[k][2] == outputs["cpu"][2] for k in outputs)
        ok = ok and same
        rows.append({"learner": title, "gpu": times["gpu"], "sampled": {k: times[k] for k in sampled}, "cpu": times["cpu"],
                     "start": starts[name]["cold"]["start"], "start_ups": starts[name],
                     "torch": times["torch"], "graph": times["graph"], "bits": same,
                     "build_s": round(build_s, 2), "rm": {**{k: v for k, v in rms[name].items() if k != "run"},
                                                "bits": rms[name]["run"] == (0, outputs["cpu"][2])}})
    where = "against the mock: times mean nothing" if args.runner else f"sm_{sm}, {host.product}"
    print(f"# GPU owner ({target}) beside the CPU executable ({level}) and PyTorch float64 ({where}); "
          f"{args.rounds} rounds of {args.warmup} + {args.steps} steps; ms a step, median (spread)"
          + "".join(f"; {k} {v}" for k, v in host.choices))
    print(f"# torch: {why or 'CUDA, eager and a CUDA graph'}" if torch is not None else f"# {why}")
    print("| learner | alphac GPU owner | " + "".join(f"alphac GPU owner, {k} | " for k in sampled)
          + "alphac CPU executable | PyTorch eager | PyTorch CUDA graph | GPU start-up | bits = CPU |")
    print("| --- | ---: | " + "---: | " * len(sampled) + "---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['learner']} | {ms(r['gpu'])} | " + "".join(f"{ms(r['sampled'][k])} | " for k in sampled)
              + f"{ms(r['cpu'])} | {ms(r['torch'])} | "
              f"{ms(r['graph'])} | {ms(r['start'])} | {'yes' if r['bits'] else 'NO'} |")
    for name, why_not in sorted(graph_failed.items()):
        print(f"# {name}: no CUDA graph: {why_not}")
    for r in rows:              # the RM-mapped owners' bits: said, not the exit code (an option on trial)
        print(f"# {r['learner']}: map rm, bits = CPU: {'yes' if r['rm']['bits'] else 'NO'}")
    (out / "bench-gpu.json").write_text(json.dumps({"sm": sm, "level": level, "target": target, "rows": rows}, indent=1,
                                                   sort_keys=True) + "\n")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", default=None, help=f"comma-separated, of {', '.join(LEARNERS)}")
    ap.add_argument("--steps", type=int, default=20, help="timed steps a round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--rates", default=None, help="the sampled shadow's rates timed, comma-separated "
                    "(--shadow-rate N: one step in N proven on the host; default 8,64, --quick 8)")
    ap.add_argument("--choose", action="append", default=[], metavar="KEY=VALUE",
                    help="a host choice for every GPU owner built (alphac/nvdrv/host.py CHOICES, e.g. map=rm)")
    ap.add_argument("--quick", action="store_true", help="small learners, 2 + 2 steps, 2 rounds")
    ap.add_argument("--out", help="where the executables, the host description and bench-gpu.json go")
    ap.add_argument("--runner", help="FILE.py:FUNCTION that runs each executable (a test hook)")
    ap.add_argument("--proc", default="/proc/driver/nvidia", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 2, 2, 2
    names = args.learners.split(",") if args.learners else [k for k, v in LEARNERS.items() if v[2] or not args.quick]
    bad = [k for k in names if k not in LEARNERS or (args.quick and LEARNERS[k][2] is None)]
    if bad:
        ap.error(f"--learners: {', '.join(bad)} not among {', '.join(LEARNERS)}"
                 + (" (digits has no --quick size)" if args.quick else ""))
    if min(args.steps, args.rounds) < 1 or args.warmup < 0:
        ap.error("--steps and --rounds at least 1, --warmup at least 0")
    args.learners = names
    try:
        args.rates = [int(r) for r in (args.rates or ("8" if args.quick else "8,64")).split(",")]
    except ValueError:
        ap.error("--rates: whole numbers, comma-separated")
    if min(args.rates) < 1:
        ap.error("--rates: each at least 1")
    from alphac.nvdrv.host import CHOICES
    for c in args.choose:
        key, _, value = c.partition("=")
        if value not in CHOICES.get(key, ((),))[0]:
            ap.error(f"--choose {c}: " + "; ".join(f"{k}={'|'.join(v)}" for k, (v, _) in CHOICES.items()))
    args.choose = [tuple(c.partition("=")[::2]) for c in args.choose]
    from qualify import load_runner
    return bench(args, load_runner(args.runner, run_exe))


if __name__ == "__main__":
    sys.exit(main())
