"""A latency model of owner_sum: how long one thread's fold of n terms takes, from its PTX.

Runs one thread of owner_sum (a least squares of W coordinates, or `--ptx FILE`) on the PTX
interpreter (tests/ptx_interp.py), records the instructions it executes, and issues them in order
on a scoreboard: an instruction issues one cycle after the previous one, or when its source
registers are ready, whichever is later; a global load's result is ready L_MEM cycles after it
issues, an f64 add's L_ADD, anything else's L_INT. That is a warp alone on its scheduler (the
owner sum of a few coordinates: 64 threads, 2 warps on a card of 132 SMs), and it is a model, not
a timing: ptxas may reorder or unroll (the PTX's loops carry `nounroll`), caches are not modeled,
and no card is involved.

    python3 bench/owner_sum.py [--W 64] [--n 8192 65536] [--mem 300 600] [--add 8] [--ptx FILE]

prints, for each n and L_MEM: the instructions executed, the cycles, cycles per term, and the
floor n * L_ADD (the fold's adds in sequence: what the ordered contract costs).
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


def executed(text: str, W: int, n: int) -> list[tuple]:
    """The instructions thread 0 executes (guard, op, args), in order."""
    prog = Ptx(text)
    steps, seen = [prog._compile(pc, *ins) for pc, ins in enumerate(prog.code)], []

    def wrap(pc, f):
        def run(env):
            seen.append(prog.code[pc])
            return f(env)
        return run
    prog.steps = [wrap(pc, f) for pc, f in enumerate(steps)]
    mem = Memory()
    gs, G = mem.alloc([1.0] * (n * W)), mem.alloc([0.0] * W)
    prog.launch(mem, {"gs": gs, "G": G, "n": n}, 1, block=1, grid=1)
    return seen


def cycles(trace: list[tuple], l_mem: int, l_add: int, l_int: int = 4) -> int:
    ready: dict[str, int] = {}
    t = 0
    for guard, op, args in trace:
        writes = not (op.startswith("st.") or op.startswith("bra") or op == "ret")
        srcs = [r for a in (args[1:] if writes else args) for r in re.findall(r"%\w+", a)]
        srcs += [guard.lstrip("!")] if guard else []
        t = max([t + 1] + [ready.get(r, 0) for r in srcs])
        if writes and args:
            ready[args[0]] = t + (l_mem if op.startswith("ld.global") else l_add if op == "add.rn.f64" else l_int)
    return max([t] + list(ready.values()))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--W", type=int, default=64)
    ap.add_argument("--n", type=int, nargs="+", default=[8192, 65536])
    ap.add_argument("--mem", type=int, nargs="+", default=[300, 600])
    ap.add_argument("--add", type=int, default=8)
    ap.add_argument("--ptx")
    a = ap.parse_args()
    if a.ptx:
        text = Path(a.ptx).read_text()
    else:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "lsq.alpha").write_text(LSQ.format(W=a.W, row=[1.0] * a.W))
            text = owner_sum(compile_file(Path(d) / "lsq.alpha").learner).ptx
    print("n\tL_MEM\tinstructions\tcycles\tcycles/term\tfloor n*L_ADD")
    for n in a.n:
        trace = executed(text, a.W, n)
        for m in a.mem:
            c = cycles(trace, m, a.add)
            print(f"{n}\t{m}\t{len(trace)}\t{c}\t{c / n:.1f}\t{n * a.add}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
