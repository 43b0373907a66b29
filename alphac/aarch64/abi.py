"""AArch64 Linux ABI for alphac's executables: registers by role, system calls, the entry stub's needs.

Calling convention (internal: alphac's functions only call each other; AAPCS64-shaped): integer
arguments in x0-x7, binary64 arguments in d0-d7, results in x0 / d0; x19-x28 and the low 64 bits
of d8-d15 are preserved by the callee (the low 64 bits are all alphac uses), everything else is
clobbered by a call. x29 is the frame pointer and x30 the link register: every function saves
both. x15, x16 and x17 are never allocated: they are the selector's scratch registers, like d30
and d31 for binary64. x18 (the platform register) is left alone. System calls take x8 (number)
and x0-x5 and return in x0 (`svc #0`; the kernel preserves every other register).

FPCR is left at the value Linux gives a new process (round to nearest even, no flush-to-zero, no
default-NaN mode), which is what the numerical contract requires; nothing in alphac's code
changes it.
"""
from __future__ import annotations

from alphac.lower.regalloc import RegFile

REGFILE = RegFile(
    int_regs=tuple(f"x{i}" for i in range(15)) + tuple(f"x{i}" for i in range(19, 29)),
    float_regs=tuple(f"d{i}" for i in (*range(8), *range(16, 30), *range(8, 16))),
    callee_saved=frozenset({f"x{i}" for i in range(19, 29)} | {f"d{i}" for i in range(8, 16)}),
)
INT_ARGS = tuple(f"x{i}" for i in range(8))
FLOAT_ARGS = tuple(f"d{i}" for i in range(8))
INT_RET, FLOAT_RET = "x0", "d0"
SYSCALL_REGS = ("x8", "x0", "x1", "x2", "x3", "x4", "x5")    # number, then arguments
SCRATCH = ("x16", "x17", "x15")
FSCRATCH = ("d31", "d30")

# Linux AArch64 system call numbers (the generic table, include/uapi/asm-generic/unistd.h), by the
# names of x86_64/abi.py's table. AArch64 has no open, rename, mkdir or unlink (only the *at
# forms), so those names are absent here and the runtime must not use them.
SYSCALLS = {
    "read": 63, "write": 64, "close": 57, "fstat": 80, "lseek": 62, "mmap": 222, "munmap": 215,
    "ioctl": 29, "pread64": 67, "pwrite64": 68, "nanosleep": 101, "getpid": 172, "socket": 198,
    "connect": 203, "accept": 202, "sendto": 206, "recvfrom": 207, "shutdown": 210, "bind": 200,
    "listen": 201, "setsockopt": 208, "getsockopt": 209, "exit": 93, "kill": 129, "fcntl": 25,
    "fsync": 82, "ftruncate": 46, "getdents64": 61, "clock_gettime": 113, "exit_group": 94,
    "openat": 56, "mkdirat": 34, "renameat": 38, "unlinkat": 35, "ppoll": 73, "accept4": 242,
    "getrandom": 278,
}
