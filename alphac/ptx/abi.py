"""The kernel ABI: what each owner kernel takes, reads and writes (the contract between
alphac/ptx/kernels.py, which builds the kernels, and their hosts: alphac/lower/gpu.py,
alphac/nvdrv/image.py, gpu/ptx_host.py). docs/gpu.md has the same, with a worked example.

Every buffer is binary64, row-major, 8-byte aligned, and indexed by the global index (the host passes full-size buffers or
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
      `u @ A` as the interpreter's left folds, `max(v)` as its fold of exact max (loops over
      the terms ascending, from the first: kernels.py). The thread's `.local` arrays (vectors
      it keeps) are its stack: the cubin's stack size, which the host's local memory must hold.
    owner_sum     one thread per param coordinate j in [0, P)
        gs u64, G u64 (out: G[j]), n u32 (the owner's sample count, n >= 1; n = 0 writes nothing)
      G[j] = ((gs[j] + gs[P + j]) + gs[2P + j]) + ...: the left fold from the first sample.
    under `contract exact_sum`, instead of owner_sum (alphac/ptx/xsum.py), launched in order
    xsum_clear, grad_samples, xsum_add, xsum_fold:
    xsum_clear    one thread per coordinate j in [0, P): xd's words of j zeroed
        xd  u64  P dense accumulators of XS_WORDS words (alphac/formats.py: flags, 66 digits)
    xsum_add      one thread per term g in [0, rows * P) (a 64-bit index)
        gs u64, xd u64, rows u32 (the rows grad_samples wrote: hi - lo, or a minibatch's count)
      gs[g] added exactly to coordinate g mod P's digits and flags (red: any order)
    xsum_fold     one thread per coordinate j in [0, P)
        xd u64, xc u64 (out: P compact accumulators of XC_WORDS words, xsum.rt's format)
      xc[j] the sum's window, or XC_SPILLED and the sum in xd's digits of j, normalized
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

Requires: a checked, differentiated `Learner`. Guarantees: the layout functions are the only
definition of where a param coordinate lives in `gs` and `G`.
"""
from __future__ import annotations

from dataclasses import dataclass

from alphac.ir.evaluate import Env, evaluate
from alphac.ir.learner import Learner


@dataclass(frozen=True)
class Param:
    name: str                        # the PTX parameter name
    type: str                        # "u64" (a global pointer) | "u32" | "f64"
    role: str                        # state data gs G n lo hi klo khi scalar const xd xc rows
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
