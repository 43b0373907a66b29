"""gpu/choose.py: which way of driving this card gives the contract's bits, before the benchmark.

Each host choice of alphac/nvdrv/host.py `CHOICES` is either a fallback to a path that ran on the
H200 of 2026-12-04 or an option on trial (docs/nvdrv.md "Fallbacks to the verified paths"). For
the candidates, in this order: the defaults; each choice alone at each of its other values; every
choice at the value that ran on that H200 (`host.VERIFIED`), this script builds small learners (bench/gpu.py's least squares under
exact_sum and its tanh MLP, both with Adam) as GPU owners for the card, runs each W steps under
`--shadow full` and under `--shadow sampled --shadow-rate 1` (every step proven: the digest and
the read-back too), and compares what each prints with the x86-64 executable's output, bit for
bit. It prints a line a candidate (PASS, or FAIL with the learner, the policy and why) into
OUT/choose.txt and writes the first candidate that passed, as bench/gpu.py's `--choose`
arguments, to OUT/choose.args (empty for the defaults; gpu/device-all.sh passes it on). So one
device run both says which assumption of the defaults failed (the single choice that mends it)
and still gets the benchmark's table.

    python gpu/choose.py --out DIR [--keys map,...] [--steps W] [--quick] [--runner FILE.py:FUNCTION]

Exit 0 when a candidate passed, 1 when none did, 2 when nothing could run (no card, no ptxas).
--quick: the learners at bench/gpu.py's --quick sizes (the tests run it against the mock).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gpu")]

from local_check import NoCard, card_host, run_exe    # noqa: E402

# bench/gpu.py's learners at a size where every kernel runs on more than one block
SIZES = {"lsq": ({"width": 64, "rows": 4096}, {"width": 8, "rows": 64}),
         "mlp": ({"dims": (64, 32, 10), "rows": 256}, {"dims": (6, 5, 3), "rows": 16})}
POLICIES = {"full": (), "sampled": ("--shadow", "sampled", "--shadow-rate", "1")}


def candidates(keys: list[str]) -> list[tuple[tuple[str, str], ...]]:
    """The defaults, each key alone at each other value, then every key at its verified value (the
    paths that ran on the H200 of 2026-12-04, `host.VERIFIED`), the defaults left out."""
    from alphac.nvdrv.host import CHOICES, VERIFIED
    out: list[tuple[tuple[str, str], ...]] = [()]
    out += [((k, v),) for k in keys for v in CHOICES[k][0][1:]]
    verified = tuple((k, VERIFIED[k]) for k in keys if VERIFIED[k] != CHOICES[k][0][0])
    return out + [verified] * (verified not in out)


def say(pairs) -> str:
    return " ".join(f"{k}={v}" for k, v in pairs) or "defaults"


def choose(args, runner) -> int:
    from bench.gpu import learner_source
    from alphac.build import build_gpu_owner, build_learner
    from alphac.driver import compile_file
    out = Path(args.out)
    (out / "bin").mkdir(parents=True, exist_ok=True)
    try:
        sm, host, _ = card_host(out, runner, Path(args.proc), None, None)
    except NoCard as e:
        print(f"gpu/choose.py: {e.args[1]}", file=sys.stderr)
        return e.args[0]
    learners = {}
    for name in args.learners:
        lr = compile_file(learner_source(name, SIZES[name][bool(args.quick)], out / "bin")).learner
        cpu = out / "bin" / f"{lr.name}.x86_64"
        cpu.write_bytes(build_learner(lr, "x86_64").elf)
        cpu.chmod(0o755)
        learners[name] = (lr, run_exe(cpu, ["--steps", str(args.steps)], None))
    lines, chosen = [], None
    for n, pairs in enumerate(candidates(args.keys)):
        t0, why = time.monotonic(), ""
        for name, (lr, (crc, cout, cerr)) in learners.items():
            if crc != 0:
                why = f"{name}: the CPU executable exited {crc}: {cerr.strip()[-200:]}"
                break
            chosen_host = host
            for k, v in pairs:
                chosen_host = chosen_host.choose(k, v)
            try:
                gpu = build_gpu_owner(lr, f"x86_64+sm_{sm}", chosen_host)
            except Exception as e:          # a build refused for this candidate: said, not fatal
                why = f"{name}: not built: {type(e).__name__}: {e}"
                break
            exe = out / "bin" / f"{lr.name}.sm_{sm}.{n}"
            exe.write_bytes(gpu.image.elf)
            exe.chmod(0o755)
            for policy, more in POLICIES.items():
                rc, text, err = runner(exe, ["--steps", str(args.steps), *more], gpu)
                if rc != 0 or text != cout:
                    refused = next((ln[9:] for ln in err.splitlines() if ln.startswith("refused: ")), "")
                    why = f"{name}, {policy}: " + (f"exit {rc}" + (f" (refused: {refused})" if refused else "")
                                                   if rc != 0 else "bits differ from the CPU executable's")
                    break
            if why:
                break
        line = f"{say(pairs)}: {'FAIL (' + why + ')' if why else 'PASS'}, {time.monotonic() - t0:.1f} s"
        print(line, flush=True)
        lines.append(line)
        if not why and chosen is None:
            chosen = pairs
    (out / "choose.txt").write_text("\n".join(lines) + "\n" + f"chosen: {say(chosen) if chosen is not None else 'none'}\n")
    (out / "choose.args").write_text(" ".join(f"--choose {k}={v}" for k, v in chosen or ()) + "\n")
    print(f"chosen: {say(chosen) if chosen is not None else 'none passed'}")
    return 0 if chosen is not None else 1


def main(argv=None) -> int:
    from alphac.nvdrv.host import CHOICES
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where choose.txt, choose.args and the executables go")
    ap.add_argument("--keys", default=",".join(CHOICES), help=f"the choices tried (default all: {', '.join(CHOICES)})")
    ap.add_argument("--learners", default=",".join(SIZES), help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--steps", type=int, default=3, help="steps a run")
    ap.add_argument("--quick", action="store_true", help="the learners at bench/gpu.py's --quick sizes")
    ap.add_argument("--runner", help="FILE.py:FUNCTION that runs each executable (a test hook)")
    ap.add_argument("--proc", default="/proc/driver/nvidia", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.keys = [k for k in args.keys.split(",") if k]
    args.learners = [k for k in args.learners.split(",") if k]
    bad = [k for k in args.keys if k not in CHOICES] + [k for k in args.learners if k not in SIZES]
    if bad or not args.learners or args.steps < 1:
        ap.error(f"--keys of {', '.join(CHOICES)}; --learners of {', '.join(SIZES)}; --steps at least 1"
                 + (f" (not: {', '.join(bad)})" if bad else ""))
    from qualify import load_runner
    return choose(args, load_runner(args.runner, run_exe))


if __name__ == "__main__":
    sys.exit(main())
