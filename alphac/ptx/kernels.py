"""An owner's compute as PTX kernels: per-sample gradients, the owner sum, the per-group update.

The kernel ABI (docs/gpu.md has the same, with a worked example). Every buffer is binary64,
row-major, 8-byte aligned, and indexed by the global index (the host passes full-size buffers or
offsets the base itself). Indices and counts are u32. `P` is the number of param coordinates,
params concatenated in declaration order (`param_layout`). Each kernel is 1-D: any grid whose
`ctaid.x * ntid.x + tid.x` covers the range; threads past its end do nothing.

    grad_samples  (learners with a loss) one thread per sample i in [lo, hi)
        state_<s>  u64  for every state the loss reads, declaration order
        data_<d>   u64  for every data array, declaration order (all samples)
        gs         u64  out: gs[(i - lo) * P + j], every param coordinate j
        lo, hi     u32
      (a minibatch learner: `idx` u64, the step's samples as u64s in increasing order, and
      `count` u32 instead of lo, hi: thread t computes sample idx[t] into gs row t)
      gs[(i-lo)*P + j] is the per-sample gradient exactly as `interp.per_sample_gradient`: the
      left fold of the contributions covering j, +0.0 where none does; `dot`, `sum`, `A @ v`,
      `u @ A` unrolled as the interpreter's left folds, `max(v)` as its fold of exact max.
    owner_sum     one thread per param coordinate j in [0, P)
        gs u64, G u64 (out: G[j]), n u32 (the owner's sample count, n >= 1; n = 0 writes nothing)
      G[j] = ((gs[j] + gs[P + j]) + gs[2P + j]) + ...: the left fold from the first sample.
    update_g<N>   one thread per coordinate k in [klo, khi) of coordinate group N
        state_<s>  u64  for every member of the group the statements read or assign (decl. order)
        G, n       u64, u32  only if the update reads a gradient: the combined sum G (P coords,
                             as owner_sum writes it) and the total sample count; the kernel
                             divides, grad(p)[k] = G[off(p) + k] / float(n)
        scalar_<s>_old / scalar_<s>_new  f64  each scalar state version the statements read
                             (the host runs the scalar statements first: `host_scalars`)
        const_<c>  u64  each vector constant the statements read (`Param.values`: upload once)
        tbl_<t>    u64  each constant table the functions of alphac.math read (also uploaded
                        once; grad_samples has them too, after its data)
        klo, khi   u32
      The group's statements run in source order for coordinate k; assigned members are stored
      at the end, so every read of an old value sees the old value.
The parameters' order and meaning are data: `Kernel.params`, one `Param` each.

Requires: a checked, differentiated `Learner`. Guarantees: every binary64 operation is the one
`alphac.ir.interp` performs, in its order (tests/test_ptx.py runs the PTX to prove it); the same
learner and target give the same text, byte for byte.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from alphac.math import binary64
from alphac.ir.evaluate import Env, evaluate
from alphac.ir.learner import (Bcast, Const, DataRow, Dot, Elem, Grad, Group, Learner, MatVec,
                               Max, MaxAdj, Node, OneHot, Outer, Pick, Pow, Read, Stack, Sum,
                               Unary, VecMat, Where, children, postorder)
from alphac.ptx.mathfn import PtxSource, table_words_as_floats
from alphac.ptx.render import PTX_VERSION, Emitter, f64imm

ARITH = {"add", "sub", "mul", "div", "neg", "sqrt"}       # one PTX instruction each
RELOAD = 16       # grad_samples loads a bigger state or data row again for each node reading it


def math_tables(nodes: list[Node]) -> list:
    """The constant tables the alphac.math functions among `nodes` read, by name."""
    from alphac.math import _function_source
    used = {n.op for n in nodes if isinstance(n, (Unary, Elem)) and n.op not in ARITH}
    tables = {}
    for name in sorted(used):
        tables.update(_function_source(name)[1])
    return [t for _, t in sorted(tables.items())]


def table_params(nodes: list[Node]) -> list["Param"]:
    return [Param(f"tbl_{t.name}", "u64", "const", values=table_words_as_floats(t))
            for t in math_tables(nodes)]


@dataclass(frozen=True)
class Param:
    name: str                        # the PTX parameter name
    type: str                        # "u64" (a global pointer) | "u32" | "f64"
    role: str                        # state data gs G n lo hi klo khi scalar const
    ref: str = ""                    # the state or data name (state, data, scalar)
    version: int = 0                 # scalar: 0 the value before the update, 1 after
    values: tuple[float, ...] = ()   # const: the buffer's contents


@dataclass(frozen=True)
class Kernel:
    name: str
    sm: int
    params: tuple[Param, ...]
    ptx: str
    group: int | None = None         # update kernels: the coordinate group


def param_layout(lr: Learner) -> dict[str, int]:
    """Each param's first coordinate in the concatenated vector of `P` coordinates."""
    out, off = {}, 0
    for p in lr.params:
        out[p.name] = off
        off += p.size
    return out


def param_count(lr: Learner) -> int:
    return sum(p.size for p in lr.params)


def host_scalars(lr: Learner, state: dict[str, tuple[float, ...]]) -> dict[tuple[str, int], float]:
    """Every scalar state's (name, version) -> value: what the host passes to update kernels."""
    env = Env(state={(k, 0): v for k, v in state.items()})
    for a in lr.update:
        if lr.state(a.target).group is None:
            env.state[(a.target, 1)] = evaluate(a.node, env)
    out = {}
    for s in lr.scalar_states:
        out[(s.name, 0)] = state[s.name][0]
        out[(s.name, 1)] = env.state.get((s.name, 1), state[s.name])[0]
    return out


class _Lower:
    """Node -> this thread's registers: one per coordinate (loss), or one for coordinate k.
    The functions of alphac.math are written inline by their PTX backend; `base` maps each
    table parameter (`tbl_<name>`) to the register holding its address."""

    def __init__(self, em: Emitter, leaf: Callable[[Node], list[str]], per_coordinate: bool,
                 base: dict[str, str] | None = None, reload: Callable[[Node], bool] | None = None):
        self.em, self.leaf, self.per_coordinate = em, leaf, per_coordinate
        self.reload = reload or (lambda n: False)
        self.memo: dict[int, list[str]] = {}
        self.math = PtxSource(em, lambda t: (base or {})[f"tbl_{t.name}"])

    def call(self, name: str, *regs: str) -> str:
        from alphac.math import _IMPL
        return _IMPL[name](self.math, *(self.math.arg("f", r) for r in regs)).v

    def __call__(self, root: Node) -> list[str]:
        for n in postorder([root]):
            if id(n) not in self.memo and not self.reload(n):
                self.memo[id(n)] = self.step(n)
        return self.value(root)

    def value(self, n: Node) -> list[str]:      # a reloaded leaf: loaded again by each reader
        return self.leaf(n) if self.reload(n) else self.memo[id(n)]

    def fold(self, regs: list[str]) -> str:
        acc = regs[0]
        for r in regs[1:]:
            acc = self.em.op("add", acc, r)
        return acc

    def step(self, n: Node) -> list[str]:
        em, vals = self.em, {id(c): self.value(c) for c in children(n)}
        v = lambda c: vals[id(c)]                                           # noqa: E731
        if isinstance(n, (Const, Read, DataRow, Grad)):
            return self.leaf(n)
        if isinstance(n, Elem):         # a scalar repeats everywhere, a vector over the rows
            size = max(len(v(n.a)), len(v(n.b)))
            a, b = (v(c) * (size // len(v(c))) for c in (n.a, n.b))
            if n.op in ARITH:
                return [em.op(n.op, x, y) for x, y in zip(a, b)]
            return [self.call(n.op, x, y) for x, y in zip(a, b)]
        if isinstance(n, Unary):
            if n.op in ARITH:
                return [em.op(n.op, x) for x in v(n.a)]
            return [self.call(n.op, x) for x in v(n.a)]
        if isinstance(n, Where):
            size = max(len(v(c)) for c in (n.a, n.b, n.then, n.other))
            a, b, t, o = (v(c) * (size // len(v(c))) for c in (n.a, n.b, n.then, n.other))
            return [em.op("selpf", t[k], o[k], em.op("gtf64", a[k], b[k])) for k in range(size)]
        if isinstance(n, Pow):
            out = base = v(n.a)
            for _ in range(n.n - 1):
                out = [em.op("mul", p, x) for p, x in zip(out, base)]
            return out
        if isinstance(n, Dot):
            return [self.fold([em.op("mul", x, y) for x, y in zip(v(n.a), v(n.b))])]
        if isinstance(n, Sum):
            return [self.fold(v(n.a))]
        if isinstance(n, MatVec):       # one left fold per row r, over c ascending
            a, x = v(n.a), v(n.b)
            return [self.fold([em.op("mul", a[r * len(x) + c], y) for c, y in enumerate(x)])
                    for r in range(n.shape[0])]
        if isinstance(n, VecMat):       # one left fold per column c, over r ascending
            u, a = v(n.a), v(n.b)
            return [self.fold([em.op("mul", x, a[r * n.size + c]) for r, x in enumerate(u)])
                    for c in range(n.size)]
        if isinstance(n, Outer):
            return [em.op("mul", x, y) for x in v(n.a) for y in v(n.b)]
        if isinstance(n, Max):          # the left fold of alphac.math's max
            acc = v(n.a)[0]
            for x in v(n.a)[1:]:
                acc = self.call("max", acc, x)
            return [acc]
        if isinstance(n, MaxAdj):       # dt to the last k >= 1 with a[k] > max(a[:k]), else to 0
            a, (z,), zero, m, gt = v(n.a), v(n.dt), em.op("movf", f64imm(0.0)), v(n.a)[0], []
            for k in range(1, len(a)):
                gt.append(em.op("gtf64", a[k], m))
                m = self.call("max", m, a[k]) if k + 1 < len(a) else m
            out = [zero] * len(a)
            for k in range(len(a) - 1, 0, -1):  # z: dt while no later coordinate has won
                out[k], z = em.op("selpf", z, zero, gt[k - 1]), em.op("selpf", zero, z, gt[k - 1])
            return [z] + out[1:]
        if isinstance(n, OneHot):       # 1 where k == j (ordered: never with a NaN), else +0
            one, zero = em.op("movf", f64imm(1.0)), em.op("movf", f64imm(0.0))
            return [em.op("selpf", one, zero, em.op("eqf64", v(n.a)[0], f64imm(float(j))))
                    for j in range(n.size)]
        if isinstance(n, Stack):
            return [v(x)[0] for x in n.items]
        if isinstance(n, Pick):
            a = v(n.a)
            row = max(1, len(a) // n.a.shape[0])
            return a[n.k * row:(n.k + 1) * row]
        if isinstance(n, Bcast):
            return v(n.a) * (1 if self.per_coordinate else n.size)
        raise TypeError(f"no PTX for {type(n).__name__}")


def _pointers(em: Emitter, params: list[Param]) -> dict[str, str]:
    return {p.name: em.op("global", em.op("ldp64", p.name)) for p in params if p.type == "u64"}


def _module(em: Emitter, lr: Learner, name: str, params: list[Param], sm: int,
            group: int | None = None) -> Kernel:
    em.label("$done")
    em.op("ret")
    text = em.module(name, [(p.name, p.type) for p in params], sm, f"{lr.name}: {name}")
    return Kernel(name, sm, tuple(params), text, group)


def grad_samples(lr: Learner, sm: int = 90) -> Kernel:
    assert lr.loss is not None, "grad_samples needs a loss"
    em = Emitter()
    read = {n.name for n in postorder([lr.loss]) if isinstance(n, Read)}
    params = [Param(f"state_{s.name}", "u64", "state", s.name) for s in lr.states if s.name in read]
    params += [Param(f"data_{d.name}", "u64", "data", d.name) for d in lr.data]
    params += table_params(postorder([c.node for cs in lr.grads.values() for c in cs]))
    if lr.batch:        # a minibatch: the step's samples, listed by the host (u64 each)
        params += [Param("gs", "u64", "gs"), Param("idx", "u64", "idx"), Param("count", "u32", "count")]
        base = _pointers(em, params)
        t = em.thread_index()
        em.op("braif", em.op("ge", t, em.op("ldp32", "count")), "$done")
        i = em.op("cvt32", em.op("ldu64", em.op("add64", base["idx"], em.op("wide", t, 8)), 0))
    else:
        params += [Param("gs", "u64", "gs"), Param("lo", "u32", "lo"), Param("hi", "u32", "hi")]
        base = _pointers(em, params)
        lo, hi = em.op("ldp32", "lo"), em.op("ldp32", "hi")
        t = em.thread_index()
        i = em.op("add32", lo, t)
        em.op("braif", em.op("ge", i, hi), "$done")
    loaded: dict[str, list[str]] = {}

    def leaf(n: Node) -> list[str]:
        if isinstance(n, Const):
            return [em.op("movf", f64imm(x)) for x in n.values]
        key = ("state_" if isinstance(n, Read) else "data_") + n.name
        if key not in loaded or n.size > RELOAD:
            addr = base[key]
            if isinstance(n, DataRow):
                addr = em.op("add64", addr, em.op("wide", i, 8 * n.size))
            loaded[key] = [em.op("ld", addr, 8 * c) for c in range(n.size)]
        return loaded[key]

    big = lambda n: isinstance(n, (Read, DataRow)) and n.size > RELOAD     # noqa: E731
    lower = _Lower(em, leaf, False, base, big)
    out = em.op("add64", base["gs"], em.op("wide", t, 8 * param_count(lr)))
    offsets, zero = param_layout(lr), None
    for p in lr.params:
        em.comment(f"per-sample gradient of {p.name}")
        g: list[str | None] = [None] * p.size
        for c in lr.grads[p.name]:
            for k, r in enumerate(lower(c.node)):
                j = c.offset + k
                g[j] = r if g[j] is None else em.op("add", g[j], r)
        for j, r in enumerate(g):
            if r is None:
                r = zero = zero or em.op("movf", f64imm(0.0))
            em.op("st", out, 8 * (offsets[p.name] + j), r)
    return _module(em, lr, "grad_samples", params, sm)


def owner_sum(lr: Learner, sm: int = 90) -> Kernel:
    em = Emitter()
    params = [Param("gs", "u64", "gs"), Param("G", "u64", "G"), Param("n", "u32", "n")]
    base = _pointers(em, params)
    n = em.op("ldp32", "n")
    j = em.thread_index()
    em.op("braif", em.op("ge", j, param_count(lr)), "$done")
    em.op("braif", em.op("ge", em.op("mov32", 0), n), "$done")
    off = em.op("wide", j, 8)
    src = em.op("add64", base["gs"], off)
    acc = em.op("ld", src, 0)
    i = em.op("mov32", 1)
    em.label("$loop")
    em.op("braif", em.op("ge", i, n), "$store")
    em.op("add64", src, 8 * param_count(lr), d=src)
    em.op("add", acc, em.op("ld", src, 0), d=acc)
    em.op("add32", i, 1, d=i)
    em.op("bra", "$loop")
    em.label("$store")
    em.op("st", em.op("add64", base["G"], off), 0, acc)
    return _module(em, lr, "owner_sum", params, sm)


def update(lr: Learner, group: Group, sm: int = 90) -> Kernel:
    em = Emitter()
    stmts = [a for a in lr.update if lr.state(a.target).group == group.index]
    nodes = postorder([a.node for a in stmts])
    reads = [n for n in nodes if isinstance(n, Read)]
    touched = {a.target for a in stmts} | {n.name for n in reads}
    params = [Param(f"state_{s.name}", "u64", "state", s.name)
              for s in lr.states if s.group == group.index and s.name in touched]
    if any(isinstance(n, Grad) for n in nodes):
        params += [Param("G", "u64", "G"), Param("n", "u32", "n")]
    order = {s.name: i for i, s in enumerate(lr.states)}
    scalars = sorted({(n.name, n.version) for n in reads if lr.state(n.name).group is None},
                     key=lambda sv: (order[sv[0]], sv[1]))
    params += [Param(f"scalar_{s}_{('old', 'new')[v]}", "f64", "scalar", s, v) for s, v in scalars]
    consts: dict[tuple[int, ...], str] = {}
    for n in nodes:
        if isinstance(n, Const) and n.size > 1:
            key = tuple(binary64.bits(x) for x in n.values)
            if key not in consts:
                consts[key] = f"const_{len(consts)}"
                params.append(Param(consts[key], "u64", "const", values=n.values))
    params += table_params(nodes)
    params += [Param("klo", "u32", "klo"), Param("khi", "u32", "khi")]
    base = _pointers(em, params)
    klo, khi = em.op("ldp32", "klo"), em.op("ldp32", "khi")
    k = em.op("add32", klo, em.thread_index())
    em.op("braif", em.op("ge", k, khi), "$done")
    kb = em.op("wide", k, 8)
    cache: dict[str, str] = {}

    def once(key: str, make: Callable[[], str]) -> str:
        if key not in cache:
            cache[key] = make()
        return cache[key]

    def at(name: str) -> str:                       # the address of coordinate k of a buffer
        return once("&" + name, lambda: em.op("add64", base[name], kb))

    offsets, new = param_layout(lr), {}

    def leaf(n: Node) -> list[str]:
        if isinstance(n, Const):
            if n.size == 1:
                return [em.op("movf", f64imm(n.values[0]))]
            name = consts[tuple(binary64.bits(x) for x in n.values)]
            return [once(name, lambda: em.op("ld", at(name), 0))]
        if isinstance(n, Grad):
            nf = once("n", lambda: em.op("cvtf", em.op("ldp32", "n")))
            g = once("G" + n.param, lambda: em.op("ld", at("G"), 8 * offsets[n.param]))
            return [em.op("div", g, nf)]
        if lr.state(n.name).group is None:
            name = f"scalar_{n.name}_{('old', 'new')[n.version]}"
            return [once(name, lambda: em.op("ldpf", name))]
        if n.version == 1:
            return [new[n.name]]
        name = f"state_{n.name}"
        return [once(name, lambda: em.op("ld", at(name), 0))]

    lower = _Lower(em, leaf, per_coordinate=True, base=base)
    for a in stmts:
        em.comment(f"line {a.line}: {a.target}")
        (new[a.target],) = lower(a.node)
    for s in lr.states:
        if s.name in new:
            em.op("st", at(f"state_{s.name}"), 0, new[s.name])
    return _module(em, lr, f"update_g{group.index}", params, sm, group.index)


GPU_NODES = (Const, Read, DataRow, Grad, Elem, Unary, Where, Pow, Dot, Sum, Pick, Bcast, MatVec,
             VecMat, Outer, Max, MaxAdj, OneHot, Stack)


def kernels(lr: Learner, sm: int = 90) -> list[Kernel]:
    """The owner's kernels: grad_samples and owner_sum (with a loss; under `contract exact_sum`
    no owner_sum: the host adds the per-sample rows exactly), then one update per group. A
    learner with an operation these kernels do not have is refused with BuildError before
    anything is generated."""
    from alphac.diag import BuildError
    roots = ([lr.loss] if lr.loss is not None else []) + [a.node for a in lr.update] + \
        [c.node for cs in lr.grads.values() for c in cs]
    missing = sorted({type(n).__name__ for n in postorder(roots) if not isinstance(n, GPU_NODES)})
    if missing:
        raise BuildError(f"learner `{lr.name}` uses operations the GPU owner kernels do not "
                         f"have yet ({', '.join(missing)}); build it for x86_64 or aarch64")
    # exact_sum: no binary64 owner sum; the host sums the per-sample rows exactly
    out = [grad_samples(lr, sm)] + ([] if lr.exact else [owner_sum(lr, sm)]) if lr.loss is not None else []
    return out + [update(lr, g, sm) for g in lr.groups]


def module(lr: Learner, sm: int = 90) -> str:
    """Every owner kernel of `lr` in one PTX module, what `alphac build --emit ptx` writes: the
    header once, then each kernel's entry exactly as the build assembles it alone."""
    ks = kernels(lr, sm)
    head = [f"// {lr.name}: {', '.join(k.name for k in ks) or 'no kernels'}",
            "// generated by alphac (alphac/ptx/kernels.py)", "", f".version {PTX_VERSION}",
            f".target sm_{sm}", ".address_size 64", ""]
    return "\n".join(head + [k.ptx[k.ptx.index(".visible .entry"):] for k in ks])


def function_kernel(name: str, sm: int = 90) -> Kernel:
    """`y[i] = name(x[i], ...)` for i in [0, n): one of the functions of alphac.math alone, for
    checking its PTX against the oracle (tests/test_math.py) and timing it on a device.
    Parameters: x u64 (FUNCTIONS[name] binary64 arguments per i, consecutive), y u64 (out),
    n u32, then tbl_<t> for each table the function reads."""
    from alphac.math import FUNCTIONS, _function_source
    arity = FUNCTIONS[name]
    em = Emitter()
    tables = [t for _, t in _function_source(name)[1]]
    params = [Param("x", "u64", "data", "x"), Param("y", "u64", "gs"), Param("n", "u32", "n")]
    params += [Param(f"tbl_{t.name}", "u64", "const", values=table_words_as_floats(t))
               for t in tables]
    base = _pointers(em, params)
    i = em.thread_index()
    em.op("braif", em.op("ge", i, em.op("ldp32", "n")), "$done")
    src = em.op("add64", base["x"], em.op("wide", i, 8 * arity))
    args = [em.op("ld", src, 8 * k) for k in range(arity)]
    out = _Lower(em, lambda n: [], False, base).call(name, *args)
    em.op("st", em.op("add64", base["y"], em.op("wide", i, 8)), 0, out)
    em.label("$done")
    em.op("ret")
    text = em.module(f"fn_{name}", [(p.name, p.type) for p in params], sm, f"alphac.math: {name}")
    return Kernel(f"fn_{name}", sm, tuple(params), text)
