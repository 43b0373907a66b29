"""x86-64 Linux ABI for alphac's executables: registers by role, system calls, the entry stub.

Calling convention (internal: alphac's functions only call each other): integer arguments in
rdi rsi rdx rcx r8 r9, binary64 arguments in xmm0-xmm7, results in rax / xmm0; rbx rbp r12-r15
are preserved by the callee, everything else is clobbered by a call: every vector register,
xmm0-15 and, at x86_64-v4 (`REGFILE_V4`, where EVEX names them), xmm16-31 too, so a value of
class f, v, w or z live across a call is spilled. rax, rdx and r11 are never allocated: they are
the selector's scratch registers (rax and rdx also for division and system call numbers), like
xmm14 and xmm15 for binary64 (and ymm/zmm14-15 for f64x4/f64x8, at every level). System calls take rax (number) rdi rsi rdx r10
r8 r9 and clobber rcx and r11 (Linux x86-64 syscall ABI).

MXCSR is left at its power-on default (round to nearest, no flush-to-zero, no denormals-are-
zero), which is what the numerical contract requires; nothing in alphac's code changes it.
"""
from __future__ import annotations

from alphac.lower.regalloc import RegFile

REGFILE = RegFile(
    int_regs=("rcx", "rsi", "rdi", "r8", "r9", "r10", "rbx", "rbp", "r12", "r13", "r14", "r15"),
    float_regs=tuple(f"xmm{i}" for i in range(14)),
    callee_saved=frozenset({"rbx", "rbp", "r12", "r13", "r14", "r15"}),
)
REGFILE_V4 = RegFile(REGFILE.int_regs, REGFILE.float_regs + tuple(f"xmm{i}" for i in range(16, 32)),
                     REGFILE.callee_saved)
INT_ARGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
FLOAT_ARGS = tuple(f"xmm{i}" for i in range(8))
INT_RET, FLOAT_RET = "rax", "xmm0"
SYSCALL_REGS = ("rax", "rdi", "rsi", "rdx", "r10", "r8", "r9")   # number, then arguments
SCRATCH = ("rax", "r11", "rdx")
FSCRATCH = ("xmm15", "xmm14")

# Linux x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl), by the names the
# runtime uses; the runtime sees them as constants SYS_<name>.
SYSCALLS = {
    "read": 0, "write": 1, "close": 3, "fstat": 5, "lseek": 8, "mmap": 9, "munmap": 11,
    "ioctl": 16, "pread64": 17, "pwrite64": 18, "nanosleep": 35, "getpid": 39, "socket": 41,
    "connect": 42, "accept": 43, "sendto": 44, "recvfrom": 45, "shutdown": 48, "bind": 49,
    "listen": 50, "setsockopt": 54, "getsockopt": 55, "exit": 60, "kill": 62, "fcntl": 72,
    "fsync": 74, "ftruncate": 77, "getdents64": 217, "rename": 82, "mkdir": 83, "unlink": 87,
    "clock_gettime": 228, "exit_group": 231, "openat": 257, "mkdirat": 258, "renameat": 264,
    "unlinkat": 263, "ppoll": 271, "accept4": 288, "getrandom": 318,
}
