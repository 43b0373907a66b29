"""Check: every example learner prints the same bits when built by an earlier alphac and by this one.

An optimization of the generated code (issue 18) must change no bit. For each learner in
examples/ this builds the single-process executable with the compiler at REV (a git worktree of
this repository, checked out in a temporary directory) and with the working tree, for x86-64, its
levels x86_64-v3 and x86_64-v4 (where this CPU runs them) and AArch64 (run under qemu-aarch64), from a copy of the learner without its deployments and
strategies (which an earlier compiler may not read, and a single process does not use), runs both for N steps and compares their output byte for byte (an example REV lacks, or one
REV's compiler cannot read, is listed, not compared: compare it by hand, REV's source on REV);
it also reports each build's executable size and the x86-64 time of the N steps.

    python bench/bits_before_after.py [REV] [--steps N] [--quick] [--exact] [--targets x86_64,...]

REV defaults to HEAD (the working tree's changes against the last commit). `--quick` (what the
tests run) compares two small learners for 5 steps; `--exact` compares each learner's
`contract exact_sum` variant (the contract line inserted after `learner NAME`) instead.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = """
import sys
from alphac.build import build_learner
from alphac.driver import compile_file
lr = compile_file(sys.argv[1]).learner
for isa, out in zip(sys.argv[2::2], sys.argv[3::2]):
    open(out, "wb").write(build_learner(lr, isa).elf)
"""


def build(tree: Path, src: Path, outs: dict[str, Path]) -> None:
    """src built by the compiler of `tree` for each ISA of `outs` (ISA -> executable), in one process."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-c", BUILD, str(src), *(str(x) for pair in outs.items() for x in pair)],
                   check=True, env=env, cwd=src.parent, capture_output=True)
    for out in outs.values():
        out.chmod(0o755)


def learner_only(src: Path, into: Path, exact: bool = False) -> Path:
    """src without its deployments and strategies (with `exact`, under `contract exact_sum`), in
    `into` beside a link to the data it loads."""
    into.mkdir(exist_ok=True)
    if not (into / "data").exists():
        (into / "data").symlink_to(src.parent / "data")
    text = re.sub(r"^(deployment|strategy) \w+ \{.*?^\}\n", "", src.read_text(), flags=re.M | re.S)
    if exact:
        text = re.sub(r"^(learner \w+)$", r"\1\ncontract exact_sum", text, count=1, flags=re.M)
    out = into / src.name
    out.write_text(text)
    return out


def run(exe: Path, isa: str, steps: int, cwd: Path) -> tuple[bytes, float]:
    runner = [shutil.which("qemu-aarch64") or "qemu-aarch64"] if isa == "aarch64" else []
    t = time.perf_counter()
    r = subprocess.run(runner + [str(exe), "--steps", str(steps)], cwd=cwd, capture_output=True,
                       check=True, timeout=600)
    return r.stdout, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rev", nargs="?", default="HEAD",
                    help="the earlier commit, e.g. the one before an optimization (default HEAD)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="two small learners, 5 steps")
    ap.add_argument("--exact", action="store_true", help="each learner under `contract exact_sum`")
    ap.add_argument("--targets", default="x86_64,x86_64-v3,x86_64-v4,aarch64",
                    help="comma-separated (default: all; a level this CPU lacks is left out, and said so)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from alphac.targets import LEVELS, host_runs
    targets = [t for t in args.targets.split(",") if t not in LEVELS or host_runs(t)]
    for t in sorted(set(args.targets.split(",")) - set(targets)):
        print(f"{t} left out: this CPU does not run it")
    sources = sorted((ROOT / "examples").glob("*.alpha"))
    if args.quick:
        args.steps = 5
        sources = [ROOT / "examples" / f"{n}.alpha" for n in ("scalar_regression", "lsq_adam")]
    new = [s for s in sources if subprocess.run(    # an example REV lacks may use what REV cannot read
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{args.rev}:examples/{s.name}"],
        capture_output=True).returncode != 0]
    sources = [s for s in sources if s not in new]
    rows, same_all = [], True
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        old = tmp / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(old), args.rev],
                       check=True)
        try:
            for full in sources:
                src = learner_only(full, tmp / "src", args.exact)
                exes = {isa: (tmp / f"{src.stem}.{isa}.old", tmp / f"{src.stem}.{isa}.new") for isa in targets}
                try:                                   # the same source file, two compilers
                    build(old, src, {isa: a for isa, (a, _) in exes.items()})
                except subprocess.CalledProcessError:   # it uses what REV cannot read
                    new.append(full)
                    continue
                build(ROOT, src, {isa: b for isa, (_, b) in exes.items()})
                for isa, (a, b) in exes.items():
                    (out_a, ta), (out_b, tb) = (run(e, isa, args.steps, src.parent) for e in (a, b))
                    same = out_a == out_b
                    same_all &= same
                    rows.append((src.stem, isa, same, len(out_b), a.stat().st_size, b.stat().st_size,
                                 ta, tb))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=True)
    print(f"examples/*.alpha{' (exact_sum)' * args.exact}, {args.steps} steps, built by {args.rev[:12]} "
          "and by the working tree\n")
    print("| learner | ISA | output identical | output bytes | size before | size after | "
          "run s before | run s after |")
    print("|---|---|---|---|---|---|---|---|")
    rows += [(s.stem, "-", f"not compared: new since {args.rev[:12]}, or {args.rev[:12]} cannot read it",
              0, 0, 0, 0.0, 0.0) for s in new]
    for name, isa, same, n, sa, sb, ta, tb in rows:
        note = " (qemu)" if isa == "aarch64" else ""
        print(f"| {name} | {isa} | {same} | {n} | {sa} | {sb} | {ta:.3f}{note} | {tb:.3f}{note} |")
    return 0 if same_all else 1


if __name__ == "__main__":
    sys.exit(main())
