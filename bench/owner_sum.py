"""A latency model of owner_sum: how long a block's fold of n terms takes, from its PTX.

Runs one block of owner_sum (a least squares of W coordinates, or `--ptx FILE` with
`--block B`) on the PTX interpreter (tests/ptx_interp.py), records the instructions two of its
threads execute: thread 0 (the folding warp's first lane) and, when the block has more than one
warp, thread 32 (the first loading warp's), and issues each thread's in order on its own
scoreboard: an instruction issues one cycle after the thread's previous one, or when its source
registers are ready, whichever is later; a global load's result is ready L_MEM cycles after it
issues, a shared load's L_SH, an f64 add's L_ADD, anything else's L_INT. A `bar.sync` issues for
every thread at the latest of the threads' arrivals, plus L_BAR. That is each warp alone on its
scheduler (64 coordinates: two blocks of 5 warps, or 2 warps before, on a card of 132 SMs), and
it is a model, not a timing: ptxas may reorder or unroll (the PTX's loops carry `nounroll`),
caches, bandwidth and the issue contention of warps sharing a scheduler are not modeled, and no
card is involved.

    python3 bench/owner_sum.py [--W 64] [--n 8192 65536] [--mem 300 600] [--add 8] [--ptx FILE --block B]

prints, for each n and L_MEM: the instructions thread 0 executed, the cycles, cycles per term,
and the floor n * L_ADD (the fold's adds in sequence: what the ordered contract costs).
"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from ptx_interp import Memory, Ptx  # noqa: E402

from alphac.driver import compile_file  # noqa: E402
from alphac.ptx.kernels import owner_sum  # noqa: E402

LSQ = """learner lsq
data x = [{row}, {row}]
data y = [1.0, 2.0]
param w: f64[{W}] = 0.0
loss(i) {{
  let r = dot(w, x[i]) - y[i]
  0.5 * r * r
}}
update {{
  w = w - 0.1 * grad(w)
}}
"""


def executed(text: str, W: int, n: int, block: int) -> dict[int, list[tuple]]:
    """The instructions threads 0 and 32 (if the block has it) of block 0 execute, in order."""
    prog = Ptx(text)
    steps = [prog._compile(pc, *ins) for pc, ins in enumerate(prog.code)]
    seen: dict[int, list[tuple]] = {t: [] for t in (0, 32) if t < block}

    def wrap(pc, f):
        def run(env):
            t = env[0]["%tid.x"]
            if t in seen:
                seen[t].append(prog.code[pc])
            return f(env)
        return run
    prog.steps = [wrap(pc, f) for pc, f in enumerate(steps)]
    mem = Memory()
    gs, G = mem.alloc([1.0] * (n * W)), mem.alloc([0.0] * W)
    prog.launch(mem, {"gs": gs, "G": G, "n": n}, block, block=block, grid=1)
    return seen


def latency(op: str, l_mem: int, l_add: int, l_sh: int, l_int: int) -> int:
    return l_mem if op.startswith("ld.global") else l_sh if op.startswith("ld.shared") else \
        l_add if op == "add.rn.f64" else l_int


def cycles(traces: dict[int, list[tuple]], l_mem: int, l_add: int, l_sh: int = 30,
           l_bar: int = 20, l_int: int = 4) -> int:
    """The cycles until every traced thread is done: each thread's scoreboard, in phases
    between barriers; a barrier releases every thread at the latest arrival plus l_bar."""
    ready = {t: {} for t in traces}
    clock = {t: 0 for t in traces}
    pos = {t: 0 for t in traces}
    while any(pos[t] < len(tr) for t, tr in traces.items()):
        for t, tr in traces.items():        # each thread up to its next barrier (or its end)
            while pos[t] < len(tr):
                guard, op, args = tr[pos[t]]
                pos[t] += 1
                if op.startswith("bar."):
                    break
                writes = not (op.startswith("st.") or op.startswith("bra") or op == "ret")
                srcs = [r for a in (args[1:] if writes else args) for r in re.findall(r"%\w+", a)]
                srcs += [guard.lstrip("!")] if guard else []
                clock[t] = max([clock[t] + 1] + [ready[t].get(r, 0) for r in srcs])
                if writes and args:
                    ready[t][args[0]] = clock[t] + latency(op, l_mem, l_add, l_sh, l_int)
        out = max(clock.values()) + l_bar
        clock = {t: out for t in traces}
    return max(max(clock.values()), *(max(r.values(), default=0) for r in ready.values()))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--W", type=int, default=64)
    ap.add_argument("--n", type=int, nargs="+", default=[8192, 65536])
    ap.add_argument("--mem", type=int, nargs="+", default=[300, 600])
    ap.add_argument("--add", type=int, default=8)
    ap.add_argument("--ptx")
    ap.add_argument("--block", type=int, help="--ptx's block size (its kernel's Kernel.block)")
    a = ap.parse_args()
    if a.ptx:
        text, block = Path(a.ptx).read_text(), a.block or 1
    else:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "lsq.alpha").write_text(LSQ.format(W=a.W, row=[1.0] * a.W))
            k = owner_sum(compile_file(Path(d) / "lsq.alpha").learner)
            text, block = k.ptx, k.block or 1
    print("n\tL_MEM\tinstructions\tcycles\tcycles/term\tfloor n*L_ADD")
    for n in a.n:
        traces = executed(text, a.W, n, block)
        for m in a.mem:
            c = cycles(traces, m, a.add)
            print(f"{n}\t{m}\t{len(traces[0])}\t{c}\t{c / n:.1f}\t{n * a.add}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
