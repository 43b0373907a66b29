#!/usr/bin/env python3
"""Run alphac's cubins through CUDA's own driver API and compare the bits with alphac.ir.interp.

For the day an NVIDIA GPU is at hand: this is the vendor-side check of alphac/ptx, independent of
alphac's own driver conversation (alphac/nvdrv). For each reference learner it builds (or reads)
the cubins of its kernels, loads them with cuModuleLoadData, runs `--steps` steps through
gpu/ptx_host.py (the same host logic the tests drive through their PTX interpreter), and
compares every state coordinate's bits with the reference interpreter after every step.

    python3 gpu/vendor_check.py [--steps 5] [--learner NAME ...] [--libcuda PATH]
                                [--cubins DIR] [--build DIR --sm 90]

`--build DIR` only writes `<learner>.<kernel>.sm_<sm>.cubin` files (needs ptxas, no GPU), for a
GPU machine without ptxas; `--cubins DIR` then reads them there instead of running ptxas.

Exit codes: 0 every learner agrees bit for bit; 1 a difference (the table shows where); 2 the
check could not run (no libcuda, no device, no ptxas and no cubins, a CUDA error, bad usage).
Requires: Python 3.11, this repository; libcuda.so.1 and an sm_86..sm_89 or sm_90 device.
"""
from __future__ import annotations

import argparse
import ctypes
import struct
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from alphac.driver import compile_file                     # noqa: E402
from alphac.ir import interp                               # noqa: E402
from ptx_host import Owner                          # noqa: E402
from alphac.ptx.kernels import kernels                     # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LEARNERS = ["scalar_regression", "two_coordinate", "independent_state", "lsq_momentum", "lsq_adam"]
BLOCK = 128


class Unavailable(Exception):
    """The check cannot run here (exit 2)."""


class Cuda:
    """The few driver-API calls the check needs, through ctypes."""

    def __init__(self, path: str):
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise Unavailable(f"cannot load libcuda ({path}): {e}") from None
        self.call("cuInit", 0)
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), 0)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(major), 75, dev)   # ..._CAPABILITY_MAJOR
        self.call("cuDeviceGetAttribute", ctypes.byref(minor), 76, dev)   # ..._CAPABILITY_MINOR
        self.sm = 90 if (major.value, minor.value) == (9, 0) else \
            86 if major.value == 8 and minor.value >= 6 else None
        if self.sm is None:
            raise Unavailable(f"device sm_{major.value}{minor.value}: there are cubins for "
                              "sm_86 (runs on sm_86..89) and sm_90")
        self.ctx = ctypes.c_void_p()
        if hasattr(self.lib, "cuCtxCreate_v2"):
            self.call("cuCtxCreate_v2", ctypes.byref(self.ctx), 0, dev)
        else:                                   # a driver without the CUDA 3.2..12 entry point
            self.call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), dev)
            self.call("cuCtxSetCurrent", self.ctx)

    def call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            err = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(err))
            raise Unavailable(f"{name}: {(err.value or b'?').decode()} ({rc})")


class CudaDevice:
    """gpu/ptx_host.py's Device over the CUDA driver API."""

    def __init__(self, cuda: Cuda, cubins: dict[str, bytes]):
        self.cuda, self.functions, self.modules = cuda, {}, []
        for name, blob in cubins.items():
            mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
            cuda.call("cuModuleLoadData", ctypes.byref(mod), ctypes.c_char_p(blob))
            cuda.call("cuModuleGetFunction", ctypes.byref(fn), mod, name.encode())
            self.modules.append(mod)
            self.functions[name] = fn

    def alloc(self, values):
        ptr = ctypes.c_uint64()
        self.cuda.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(8 * max(1, len(values))))
        self.write(ptr.value, values)
        return ptr.value

    def write(self, addr, values):
        if values:
            buf = struct.pack(f"<{len(values)}d", *values)
            self.cuda.call("cuMemcpyHtoD_v2", ctypes.c_uint64(addr), buf, ctypes.c_size_t(len(buf)))

    def read(self, addr, count):
        buf = ctypes.create_string_buffer(8 * count)
        self.cuda.call("cuMemcpyDtoH_v2", buf, ctypes.c_uint64(addr), ctypes.c_size_t(8 * count))
        return list(struct.unpack(f"<{count}d", buf.raw))

    def launch(self, kernel, args, threads):
        if threads <= 0:
            return
        ctype = {"u64": ctypes.c_uint64, "u32": ctypes.c_uint32, "f64": ctypes.c_double}
        vals = [ctype[p.type](v) for p, v in zip(kernel.params, args)]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                               for v in vals])
        block = kernel.block or BLOCK           # a tiled kernel's own
        grid = (threads + block - 1) // block
        self.cuda.call("cuLaunchKernel", self.functions[kernel.name], grid, 1, 1, block, 1, 1,
                       0, None, ptrs, None)
        self.cuda.call("cuCtxSynchronize")


def cubin_name(learner: str, kernel: str, sm: int) -> str:
    return f"{learner}.{kernel}.sm_{sm}.cubin"


def cubins_for(lr, ks, sm: int, where: Path | None) -> dict[str, bytes]:
    if where is not None:
        try:
            return {k.name: (where / cubin_name(lr.name, k.name, sm)).read_bytes() for k in ks}
        except OSError as e:
            raise Unavailable(f"no cubin: {e}") from None
    from alphac.ptx.ptxas import PtxasMissing, assemble
    try:
        return {k.name: assemble(k.ptx, sm) for k in ks}
    except PtxasMissing as e:
        raise Unavailable(f"{e} (or pass --cubins DIR built elsewhere with --build)") from None


def check(cuda: Cuda, name: str, steps: int, where: Path | None) -> list[str]:
    lr = compile_file(ROOT / "examples" / f"{name}.alpha").learner
    ks = kernels(lr, cuda.sm)
    owner = Owner(CudaDevice(cuda, cubins_for(lr, ks, cuda.sm, where)), lr, ks)
    want, rows = interp.initial_state(lr), []
    for step in range(1, steps + 1):
        owner.step()
        want = interp.step(lr, want)
        got = owner.read_state()
        for s in lr.states:
            for k, (g, w) in enumerate(zip(got[s.name], want[s.name])):
                gh, wh = (struct.pack(">d", g).hex(), struct.pack(">d", w).hex())
                if gh != wh:
                    rows.append(f"{name:18} step {step:3}  {s.coord_name(k):8} gpu {gh}  ref {wh}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--learner", action="append", choices=LEARNERS)
    ap.add_argument("--libcuda", default="libcuda.so.1")
    ap.add_argument("--cubins", type=Path, help="read prebuilt cubins from this directory")
    ap.add_argument("--build", type=Path, help="only write cubins into this directory (no GPU)")
    ap.add_argument("--sm", type=int, choices=[86, 90], default=90, help="for --build")
    args = ap.parse_args(argv)
    names = args.learner or LEARNERS
    try:
        if args.build is not None:
            args.build.mkdir(parents=True, exist_ok=True)
            for name in names:
                lr = compile_file(ROOT / "examples" / f"{name}.alpha").learner
                ks = kernels(lr, args.sm)
                for kname, blob in cubins_for(lr, ks, args.sm, None).items():
                    (args.build / cubin_name(name, kname, args.sm)).write_bytes(blob)
            print(f"wrote the cubins of {len(names)} learners for sm_{args.sm} to {args.build}")
            return 0
        cuda = Cuda(args.libcuda)
        print(f"{'learner':18} {'steps':>5}  result   (sm_{cuda.sm}, bits vs alphac.ir.interp)")
        failed = False
        for name in names:
            rows = check(cuda, name, args.steps, args.cubins)
            print(f"{name:18} {args.steps:5}  {'differs' if rows else 'same'}")
            for r in rows:
                print("    " + r)
            failed |= bool(rows)
        return 1 if failed else 0
    except Unavailable as e:
        print(f"vendor_check: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
