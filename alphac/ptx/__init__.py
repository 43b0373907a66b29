"""alphac.ptx: an owner's compute as PTX, assembled by a pinned `ptxas`, read back as launch images.

    render.py   the PTX instruction table (op -> format) and an emitter with virtual registers
    kernels.py  learner IR -> the owner kernels `grad_samples`, `owner_sum`, `update_g<N>`; the
                kernel ABI (parameters, buffer layouts) as data
    ptxas.py    find, fingerprint and run `ptxas` deterministically; `PtxasMissing` without it
    cubin.py    read a cubin (ELF + NVIDIA `.nv.info` records) into one `LaunchImage` per kernel

Every binary64 operation the kernels perform is one IEEE operation rounded to nearest even, in
the order `alphac.ir.interp` performs it (docs/gpu.md); tests/test_ptx.py proves it by running
the PTX in an interpreter written in the test and comparing bits.
"""
