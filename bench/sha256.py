"""Benchmark: the runtime's SHA-256 (alphac/runtime/sha256.rt, `sha256(p, n, out)`: what checks
checkpoints, GPU launch images and data-file chunks) against Python's hashlib (OpenSSL) on the
same bytes, side by side in one run.

The contender is a small executable over the runtime: it reads a file of random bytes into memory,
hashes its first N bytes R times between two reads of the monotonic clock, and prints the digest
and the nanoseconds; the digest must be hashlib's. Each ISA has two rows: the path the runtime
found at start (the CPU's SHA-256 instructions, x86-64 SHA-NI or the AArch64 SHA2 extension,
where it has them) and the scalar code, forced. hashlib hashes the same N bytes R times, the
best of 3 (and the executable's best of 3 runs). MB/s = N R / time (10^6 bytes). x86-64 runs natively; the AArch64 executable runs
under qemu-aarch64 (when it is installed), so its figure counts emulated instructions and is only
indicative, never a hardware figure.

    python bench/sha256.py [--mib M] [--quick]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alphac.build import link_program, runtime_closure, target   # noqa: E402
from alphac.lower import rt                                      # noqa: E402
from alphac.lower.rt_lower import lower_program                  # noqa: E402

CAP = 1 << 24           # the executable's buffer: 16 MiB
PATHS = {"x86-64": "SHA-NI", "AArch64": "SHA2 instructions"}

# sha_bench PATH N R [scalar]: hash the first N bytes of PATH R times; prints "DIGEST NS HW", HW
# 1 when the CPU's SHA-256 instructions did it.
MAIN = f"""
global buf: [u8; {CAP}];
global digest: [u8; 32];

fn main(argc: i64, argv: i64) -> i64 {{
    if argc != 4 && argc != 5 {{ refuse("usage"); }}
    if argc == 5 {{ store64(sha_hw, 0); }}
    let n = rt_parse_dec(load64(argv + 16));
    let reps = rt_parse_dec(load64(argv + 24));
    if n < 0 || n > {CAP} || reps < 1 {{ refuse("usage"); }}
    let fd = syscall(SYS_openat, AT_FDCWD, load64(argv + 8), 0, 0);
    if fd < 0 {{ refuse("usage"); }}
    let got = 0;
    while got < n {{
        let k = syscall(SYS_read, fd, buf + got, n - got);
        if k <= 0 {{ refuse("usage"); }}
        got = got + k;
    }}
    let t0 = rt_now_ns();
    let i = 0;
    while i < reps {{
        sha256(buf, n, digest);
        i = i + 1;
    }}
    let t = rt_now_ns() - t0;
    i = 0;
    while i < 32 {{
        rt_out_byte(load8(rt_hex_digits + (load8(digest + i) >> 4)));
        rt_out_byte(load8(rt_hex_digits + (load8(digest + i) & 15)));
        i = i + 1;
    }}
    rt_out_byte(32);
    rt_out_dec(t);
    rt_out_byte(32);
    rt_out_dec(load64(sha_hw));
    rt_out_byte(10);
    rt_flush();
    return 0;
}}
"""


def build(isa: str, out: Path) -> Path:
    tgt = target(isa)
    own = rt.parse(MAIN, "bench.rt")           # the benchmark's program: generated code's rule
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") + own
    elf, _, _ = link_program(lower_program(items, generated=frozenset(map(id, own))), tgt)
    out.write_bytes(elf)
    os.chmod(out, 0o755)
    return out


def ours(cmd: list[str], path: Path, n: int, reps: int, runs: int = 3, scalar: str = "") -> tuple[str, float, str]:
    best = float("inf")
    for _ in range(runs):
        r = subprocess.run(cmd + [str(path), str(n), str(reps)] + ([scalar] if scalar else []),
                           capture_output=True, text=True, check=True)
        digest, ns, hw = r.stdout.split()
        best = min(best, max(int(ns), 1) / 1e9)
    return digest, best, hw


def theirs(data: bytes, reps: int) -> tuple[str, float]:
    best = float("inf")
    view = memoryview(data)
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            h = hashlib.sha256(view).hexdigest()
        best = min(best, time.perf_counter() - t)
    return h, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=8, help="the large message, MiB (at most 16)")
    ap.add_argument("--quick", action="store_true", help="small messages, one pass: a smoke run (CI)")
    args = ap.parse_args()
    big = (1 << 16) if args.quick else min(args.mib << 20, CAP)
    # (message bytes, repeats): a whole data file, one 1 MiB chunk, a launch image's few KiB,
    # one block (an HMAC's message)
    cases = [(big, 1), (min(big, 1 << 20), 1 if args.quick else 4),
             (4096, 10 if args.quick else 1000), (64, 10 if args.quick else 20000)]
    cases = list(dict.fromkeys(cases))                  # --quick: the first two are one
    data = os.urandom(big)
    qemu = shutil.which("qemu-aarch64")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / "data.bin"
        path.write_bytes(data)
        contenders = []
        if platform.machine() in ("x86_64", "AMD64"):
            exe = str(build("x86_64", tmp / "sha.x86_64"))
            contenders += [("alphac x86-64", [exe], ""), ("alphac x86-64", [exe], "scalar")]
        if qemu:
            exe = str(build("aarch64", tmp / "sha.aarch64"))
            contenders += [("alphac AArch64 under qemu (indicative)", [qemu, exe], ""),
                           ("alphac AArch64 under qemu (indicative)", [qemu, exe], "scalar")]
        for n, reps in cases:
            want, t_py = theirs(data[:n], reps)
            py = n * reps / t_py / 1e6
            rows.append(["Python hashlib (OpenSSL)", n, reps, f"{py:.1f}", "1.00", "yes"])
            for name, cmd, scalar in contenders:
                r = 1 if "qemu" in name and n > 4096 else max(1, reps // 10) if "qemu" in name else reps
                got, t, hw = ours(cmd, path, n, r, 1 if "qemu" in name else 3, scalar)
                mbs = n * r / t / 1e6
                how = PATHS[name.split()[1]] if hw == "1" else "scalar"
                rows.append([f"{name}, {how}", n, r, f"{mbs:.1f}", f"{mbs / py:.2f}",
                             "yes" if got == want else "NO"])
            print(f"  {n} bytes done", file=sys.stderr)
    cpu = "sha_ni" if "sha_ni" in Path("/proc/cpuinfo").read_text() else "no sha_ni"
    print(f"SHA-256 throughput, random bytes, one run ({platform.machine()}, cpu flags: {cpu})\n")
    print("| system | message bytes | repeats | MB/s | vs hashlib | digest equal |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")
    if any(r[-1] == "NO" for r in rows):
        sys.exit("bench/sha256.py: a digest differs from hashlib's")


if __name__ == "__main__":
    main()
