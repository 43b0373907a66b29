"""alphac.ptx: an owner's compute as PTX, assembled by a pinned `ptxas`, read back as launch images.

    render.py   the PTX instruction table (op -> format) and an emitter with virtual registers
    abi.py      the kernel ABI: each kernel's parameters, buffers, what it reads and writes
                (`Param`, `Kernel`, the param layout in `gs` and `G`, `host_scalars`)
    kernels.py  learner IR -> the owner kernels `grad_samples` and `vectors<j>` (loops over
                coordinates and rows), `owner_sum` (its terms staged in shared memory), `reduce` (the
                update's reduced scalars on the card), `update_g<N>`, as `abi.Kernel`s
    xsum.py     exact_sum's exact sums on the card: `xsum_clear`, `xsum_add`, `xsum_fold`, `xsum_round`
    digest.py   the sampled shadow's tree digest of a step's message: `digest_gather`, `digest_<r>`
    tiled.py    the tiled kernels (shared memory, bar.sync): `outer_sum_<p>`, a fused weight
                gradient's owner sum from the factors grad_samples writes; `matvec<k>` and
                `vecmat<k>`, a param matrix times the step's vectors (data rows or
                `vectors<j>`'s), which the later phases read
    ptxas.py    find, fingerprint and run `ptxas` deterministically; `PtxasMissing` without it
    mathfn.py   the contract's functions in PTX (alphac.math's staging language, third backend)
    cubin.py    read a cubin (ELF + NVIDIA `.nv.info` records) into one `LaunchImage` per kernel

The host side of the kernel ABI over any `Device` (the reference for role executables) is
gpu/ptx_host.py, outside the package: the compiler never runs a kernel.

Every binary64 operation the kernels perform is one IEEE operation rounded to nearest even, in
the order `alphac.ir.interp` performs it (docs/gpu.md); tests/test_ptx.py proves it by running
the PTX in an interpreter written in the test and comparing bits.

`build(lr, sm)` is the entry point: every kernel (the owner's, then, where the owner may run
`--shadow sampled`, the digest's) assembled and read back, or a named exception
(`PtxasMissing` first of all, which the compiler reports as a refusal of the GPU build) and no
partial result.
"""
from __future__ import annotations

from dataclasses import dataclass

from alphac.ir.learner import Learner
from alphac.ptx.cubin import CubinError, LaunchImage, read_cubin
from alphac.ptx.abi import Kernel
from alphac.ptx.kernels import kernels
from alphac.ptx.ptxas import Ptxas, assemble, find_ptxas
from alphac.ptx.render import PARAM_TYPES


@dataclass(frozen=True)
class Built:
    kernel: Kernel
    cubin: bytes
    image: LaunchImage


def build(lr: Learner, sm: int = 90, tool: Ptxas | None = None) -> list[Built]:
    """Every kernel of `lr` for sm_<sm>, assembled and read back, or an exception and nothing:
    `PtxasMissing`, `PtxasFailed`, or `CubinError` (also when ptxas laid out the parameters
    differently from the kernel's own list)."""
    tool = tool or find_ptxas()
    out = []
    from alphac.ptx.abi import can_sample
    from alphac.ptx.digest import owner_kernels
    for k in kernels(lr, sm) + (owner_kernels(lr, sm) if can_sample(lr) else []):
        blob = assemble(k.ptx, sm, tool)
        image = read_cubin(blob)[k.name]
        if [p.size for p in image.params] != [PARAM_TYPES[p.type] for p in k.params]:
            raise CubinError(f"{k.name}: ptxas's parameters differ from the kernel's")
        out.append(Built(k, blob, image))
    return out
