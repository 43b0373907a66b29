"""`make fuzz`: random learners through every engine for as long as asked.

    python tests/fuzz.py [--minutes M] [--seed S] [--fast] [--keep DIR]

Seeds S, S+1, ... each make one program (tests/learngen.py) with its deployments; each is
checked by tests/differential.py: refused at compile time with a named diagnostic, or the same
bits everywhere. A line per program goes to stderr; at the end (or on Ctrl-C) the counts go to
stdout: programs tried, refused (by diagnostic code), agreed, disagreed. A disagreement is
reduced (tests/reduce.py) and kept as DIR/found-<seed>.alpha (default tests/regress), with the
.npy files it still loads beside it as DIR/found-<seed>.<data>.npy, to be looked at and
committed as a regression (the file is checked again as it was written: it must still
disagree); the exit status is 1 if there was any.
`--fast` runs only the interpreter and the plan executor (thousands of programs a minute).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import differential  # noqa: E402
import learngen  # noqa: E402
import reduce  # noqa: E402


def campaign(first: int, minutes: float, engines, keep: Path, out=sys.stderr) -> Counter:
    counts: Counter = Counter()
    work = Path(tempfile.mkdtemp(prefix="alphac-fuzz-"))
    deadline = time.monotonic() + 60 * minutes
    seed = first
    try:
        while time.monotonic() < deadline:
            prog = learngen.generate(seed, wide=None)       # wide learners too, now and then
            rep = differential.check_program(prog, work / "p", engines, seed=seed)
            counts["tried"] += 1
            counts[rep.status] += 1
            if rep.status == "refused":
                counts[f"refused {rep.code}"] += 1
            counts["deployments"] += len(prog.deployments)
            counts["deployments refused"] += len(rep.refused_deployments)
            counts["engine runs"] += len(rep.outcomes)
            counts["gpu roles"] += sum(k.startswith("roles:") and "_gpu" in k for k in rep.outcomes)
            owner = [k for k in rep.outcomes if k.startswith("gpu:")]    # the single GPU owner, as drawn
            counts.update(f"gpu {w}" for w in ("--shadow full", "--shadow sampled", "refused", "replayed",
                                               "map rm") if any(w in k for k in owner))
            counts["too large for the PTX interpreter"] += any(s.startswith("ptx") for s in rep.skipped)
            counts["gpu owners built through ptxas only"] += any(k.startswith("gpu-built") for k in rep.outcomes)
            counts["fleet runs"] += sum(k.startswith("fleet:") for k in rep.outcomes)
            counts["deployments not built as fleets"] += sum(s.startswith("fleet:") for s in rep.skipped)
            print(f"seed {seed}: {rep.status}{' ' + rep.code if rep.code else ''}, "
                  f"{len(prog.deployments)} deployments, {len(rep.outcomes)} runs", file=out, flush=True)
            if rep.status == "disagreed":
                print(rep.summary(), file=out, flush=True)
                reducer = reduce.Reducer(learngen.generate(seed, wide=None), work / "r")
                small = reducer.run(budget=400)
                path = reduce.keep(small, keep, f"found-{seed}",
                                   f"found by tests/fuzz.py, seed {seed}:\n{rep.summary()}")
                again = differential.check_file(path, work / "k", reducer.engines)
                print(f"reduced to {path}" + ("" if again.status == "disagreed" else
                                              f" (which as written {again.status}: look at it)"),
                      file=out, flush=True)
            shutil.rmtree(work / "p", ignore_errors=True)
            seed += 1
    except KeyboardInterrupt:
        pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts["next seed"] = seed
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 1_000_000)
    ap.add_argument("--fast", action="store_true", help="interpreter and plan executor only")
    ap.add_argument("--keep", type=Path, default=HERE / "regress")
    args = ap.parse_args(argv)
    engines = differential.FAST if args.fast else differential.ALL
    print(f"fuzzing from seed {args.seed} for {args.minutes:g} min, engines: {', '.join(engines)}",
          file=sys.stderr)
    counts = campaign(args.seed, args.minutes, engines, args.keep)
    for key in ("tried", "refused", "agreed", "disagreed"):
        print(f"{key:>10}: {counts[key]}")
    for key in sorted(k for k in counts if k.startswith("refused E")):
        print(f"{key:>20}: {counts[key]}")
    print(f"deployments: {counts['deployments']} checked ({counts['deployments refused']} refused); "
          f"engine runs compared: {counts['engine runs']} ({counts['gpu roles']} of GPU owners under "
          f"the mock; single GPU owners: {counts['gpu --shadow full']} --shadow full, "
          f"{counts['gpu --shadow sampled']} sampled ({counts['gpu refused']} refused: usage, "
          f"{counts['gpu replayed']} replayed), {counts['gpu map rm']} on map rm; "
          f"{counts['fleet runs']} of index-node builds, {counts['deployments not built as fleets']} "
          f"deployments not built so); too large for the PTX interpreter: "
          f"{counts['too large for the PTX interpreter']} ({counts['gpu owners built through ptxas only']} "
          f"of them built as GPU owners through ptxas only); "
          f"seeds {args.seed}..{counts['next seed'] - 1}")
    return 1 if counts["disagreed"] else 0


if __name__ == "__main__":
    sys.exit(main())
