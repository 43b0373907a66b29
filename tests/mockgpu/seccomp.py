"""Seccomp user notification: the syscall boundary the mock driver sits at (Linux >= 5.14, x86-64).

The child installs a filter before it executes the program under test and hands the listener fd
to the supervisor (this process). The filter sends to the supervisor every system call made from
an address below 4 GiB, which is where alphac's static executables are linked (0x400000); the
C library of Python, strace and the loader live far above, so their calls run untouched. The
supervisor then answers each call itself (an ioctl on a mock device), lets the kernel run it
(`cont`), or places a file descriptor in the target (`addfd`: a memfd standing for a device
file, or the pages of a driver allocation that mmap will then map for real).

Because nothing is traced with ptrace, `strace` can run the executable at the same time and
shows exactly the system calls it makes.
"""
from __future__ import annotations

import ctypes
import os
import socket
import struct

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

SYS_SECCOMP = 317
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 1 << 3
PR_SET_NO_NEW_PRIVS = 38
RET_ALLOW, RET_USER_NOTIF = 0x7fff0000, 0x7fc00000
AUDIT_ARCH_X86_64 = 0xc000003e
NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID, NOTIF_ADDFD = 0xc0502100, 0xc0182101, 0x40082102, 0x40182103
FLAG_CONTINUE = 1
ADDFD_SETFD, ADDFD_SEND = 1, 2
LOW_CODE = 1 << 32                     # calls from code below this go to the supervisor

# x86-64 system call numbers the mock names (arch/x86/entry/syscalls/syscall_64.tbl)
SYSCALLS = {0: "read", 1: "write", 3: "close", 9: "mmap", 11: "munmap", 16: "ioctl",
            35: "nanosleep", 60: "exit", 231: "exit_group", 257: "openat", 24: "sched_yield",
            228: "clock_gettime", 318: "getrandom"}


def _filter() -> bytes:
    ld, jeq, ret = 0x20, 0x15, 0x06           # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    prog = [(ld, 0, 0, 4),                    # A = seccomp_data.arch
            (jeq, 0, 3, AUDIT_ARCH_X86_64),   # another ABI: allow
            (ld, 0, 0, 12),                   # A = instruction_pointer >> 32
            (jeq, 0, 1, 0),                   # code above 4 GiB: allow
            (ret, 0, 0, RET_USER_NOTIF),
            (ret, 0, 0, RET_ALLOW)]
    return b"".join(struct.pack("<HBBI", *i) for i in prog)


FILTER = _filter()


def install_in_child(sock: socket.socket) -> None:
    """Run in the child between fork and exec: filter, send the listener fd, close it."""
    code = ctypes.create_string_buffer(FILTER, len(FILTER))
    fprog = ctypes.create_string_buffer(struct.pack("<HxxxxxxQ", len(FILTER) // 8, ctypes.addressof(code)), 16)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        os._exit(120)
    fd = libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, fprog)
    if fd < 0:
        os._exit(121)
    socket.send_fds(sock, [b"L"], [fd])
    os.close(fd)
    sock.close()                          # the program under test inherits neither


class Notification:
    __slots__ = ("id", "pid", "nr", "ip", "args")

    def __init__(self, raw: bytes):
        self.id, self.pid, _flags, self.nr, _arch, self.ip = struct.unpack_from("<QIIiIQ", raw)
        self.args = struct.unpack_from("<6Q", raw, 32)

    @property
    def name(self) -> str:
        return SYSCALLS.get(self.nr, f"syscall{self.nr}")


class Listener:
    """The supervisor's end: receive calls, answer them."""

    def __init__(self, fd: int):
        self.fd = fd
        self._notif = ctypes.create_string_buffer(80)
        self._resp = ctypes.create_string_buffer(24)
        self._addfd = ctypes.create_string_buffer(24)

    def recv(self) -> Notification | None:
        ctypes.memset(self._notif, 0, 80)
        if libc.ioctl(self.fd, NOTIF_RECV, self._notif) != 0:
            return None                      # the caller died, or an interrupted wait
        return Notification(self._notif.raw)

    def _send(self, n: Notification, val: int, error: int, flags: int) -> None:
        struct.pack_into("<QqiI", self._resp, 0, n.id, val, error, flags)
        libc.ioctl(self.fd, NOTIF_SEND, self._resp)      # ENOENT if the caller died meanwhile

    def cont(self, n: Notification) -> None:
        """Let the kernel run the call as made."""
        self._send(n, 0, 0, FLAG_CONTINUE)

    def reply(self, n: Notification, value: int) -> None:
        """The call returns `value` (>= 0) or fails with errno -value."""
        self._send(n, value if value >= 0 else 0, value if value < 0 else 0, 0)

    def addfd(self, n: Notification, src: int, newfd: int | None = None, cloexec: bool = False,
              send: bool = False) -> int:
        """Put our fd `src` into the caller's table (at `newfd`, replacing what is there); with
        send, that also answers the call with the new fd's number."""
        flags = (ADDFD_SETFD if newfd is not None else 0) | (ADDFD_SEND if send else 0)
        struct.pack_into("<QIIII", self._addfd, 0, n.id, flags, src, newfd or 0,
                         os.O_CLOEXEC if cloexec else 0)
        r = libc.ioctl(self.fd, NOTIF_ADDFD, self._addfd)
        if r < 0:
            raise OSError(ctypes.get_errno(), "SECCOMP_IOCTL_NOTIF_ADDFD failed")
        return r


class ProcessMemory:
    """Another process's memory, through /proc/PID/mem."""

    def __init__(self, pid: int):
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)

    def read(self, addr: int, n: int) -> bytes:
        data = os.pread(self.fd, n, addr)
        if len(data) != n:
            raise OSError(f"short read at {addr:#x}")
        return data

    def write(self, addr: int, data: bytes) -> None:
        if os.pwrite(self.fd, data, addr) != len(data):
            raise OSError(f"short write at {addr:#x}")

    def cstring(self, addr: int, limit: int = 4096) -> str:
        out = bytearray()
        while len(out) < limit:
            chunk = os.pread(self.fd, 64, addr + len(out))
            if not chunk:
                break
            z = chunk.find(b"\0")
            if z >= 0:
                out += chunk[:z]
                break
            out += chunk
        return out.decode(errors="replace")

    def close(self) -> None:
        os.close(self.fd)
