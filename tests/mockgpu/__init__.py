"""A mock NVIDIA driver for CI, at the syscall boundary of the real executable (tinygrad's
test/mockgpu is the model; this one shares no code with it).

    result = mockgpu.run(exe, ["--steps", "5"], card=Card(uuid=...), kernels=built)

runs a GPU-owner executable with every system call it makes delivered to this process by seccomp
user notification (seccomp.py): the driver (driver.py) answers the device files' calls and
checks each against alphac's ABI tables; memory is real pages; a rung doorbell runs the channel
on the mock GPU (gpu.py), which executes the QMD's kernel with the PTX interpreter. The result
has the exit code, stdout, stderr, the events file, the calls as the mock saw them (`trace`),
what the GPU launched, the submissions (doorbells), the memory allocated, the mock's `errors` (empty when every call matched
the ABI), and with `strace=True` the lines strace wrote while tracing the same run.

Linux only (seccomp user notification with SECCOMP_ADDFD_FLAG_SEND: kernel 5.14 or later), and
only for executables linked below 4 GiB (alphac's are, at 0x400000): calls from higher
addresses (Python, strace, the loader) are not intercepted.
"""
from __future__ import annotations

import functools
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mockgpu.driver import Card, Driver
from mockgpu.seccomp import Listener, ProcessMemory, install_in_child

__all__ = ["Card", "MockResult", "run", "available"]


@dataclass
class MockResult:
    returncode: int
    stdout: str
    stderr: str
    events: str
    trace: list
    errors: list
    launches: list
    allocations: list
    strace: list[str] | None
    boosted: bool = False           # the driver granted the SM clock's boost (PERF_BOOST)
    submissions: int = 0            # doorbells rung: the setup's, then each step's
    copies: list = None             # the copy engine's copies, (src, dst, bytes) in order
    caching: list = None            # each system memory's CPU mapping as the driver makes it

    def device_calls(self) -> list[tuple]:
        """The trace's calls on the driver's files, in conversation.expected_trace()'s form."""
        out = []
        for t in self.trace:
            if t[0] == "openat" and t[1].startswith("/dev/nvidia"):
                out.append(t)
            elif t[0] in ("ioctl", "close") and isinstance(t[1], str):
                out.append(t)
            elif t[0] == "mmap" and t[3] is not None:
                out.append(t)
        return out


@functools.lru_cache(maxsize=None)
def available() -> str | None:
    """None when the mock can run here, else why not (tried once: a child installs the filter)."""
    if os.uname().sysname != "Linux" or os.uname().machine != "x86_64":
        return "the mock driver needs Linux on x86-64"
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    if (major, minor) < (5, 14):
        return "the mock driver needs Linux 5.14 or later (seccomp user notification)"
    parent, child = socket.socketpair()
    parent.settimeout(10)
    try:
        proc = subprocess.Popen([sys.executable, "-c", "pass"], pass_fds=[child.fileno()],
                                preexec_fn=lambda: install_in_child(child))
        child.close()
        try:
            _, fds, _, _ = socket.recv_fds(parent, 1, 1)
        except (socket.timeout, OSError):
            fds = []
        proc.wait()
        for fd in fds:
            os.close(fd)
        return None if fds else f"seccomp user notification is not available here (exit {proc.returncode})"
    finally:
        parent.close()


def supervise(argv: list[str], drv: Driver, stdout, stderr, cwd, timeout: float) -> int | None:
    """Run argv with its system calls delivered to `drv`; its exit code (None: killed after
    `timeout`, an error in drv.errors)."""
    parent, child = socket.socketpair()
    memories: dict[int, ProcessMemory] = {}
    try:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, pass_fds=[child.fileno()],
                                preexec_fn=lambda: install_in_child(child), cwd=cwd)
        child.close()
        parent.settimeout(30)
        try:
            _, fds, _, _ = socket.recv_fds(parent, 1, 1)
        except (socket.timeout, OSError):
            fds = []
        if not fds:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"the child could not install the seccomp filter (exit {proc.returncode})")
        listener = Listener(fds[0])
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:      # checked on every call: a busy child too
                proc.kill()
                proc.wait()
                drv.errors.append(f"timed out after {timeout} s")
                os.close(listener.fd)
                return None
            ready, _, _ = select.select([listener.fd], [], [], 0.05)
            if ready:
                n = listener.recv()
                if n is not None:
                    mem = memories.get(n.pid)
                    if mem is None:
                        mem = memories[n.pid] = ProcessMemory(n.pid)
                    try:
                        drv.syscall(n, mem, listener)
                    except Exception as e:           # never leave the caller blocked
                        drv.errors.append(f"mock failure on {n.name}: {e!r}")
                        listener.reply(n, -38)
                    continue
            if proc.poll() is not None:
                break
        os.close(listener.fd)
        return proc.returncode
    finally:
        for m in memories.values():
            m.close()
        parent.close()


def run(exe: str | Path, args=(), card: Card | None = None, kernels=(), present: bool = True,
        strace: bool = False, timeout: float = 120.0, events: bool = True,
        mutate: dict | None = None, cards=(), hang: bool = False, latency: int = 0,
        draws: bytes | None = None) -> MockResult:
    """Run `exe args` against a mock driver holding `card` (absent when not `present`; `cards`:
    the machine's cards, `card` among them) whose GPU knows `kernels` (alphac.ptx.build's list);
    `mutate` maps a kernel name to a function of its PTX text, so the mock GPU computes something
    else (a shadow-mismatch mutant), or to (function, N): only the kernel's N-th launch does;
    `draws`: the bytes getrandom answers, in turn and repeated (None: the kernel's); with `hang` the GPU never completes (a rung doorbell runs
    nothing); with `latency` L it completes at the L-th system call after the one that saw the
    doorbell (a card that takes time, for the completion wait)."""
    with tempfile.TemporaryDirectory(prefix="alphac-mockgpu-") as tmp:
        tmp = Path(tmp)
        argv = [str(exe), *map(str, args)]
        if events:
            argv += ["--events", str(tmp / "events.log")]
        if strace:
            argv = [shutil.which("strace"), "-f", "-qq", "-X", "raw", "-o", str(tmp / "strace.txt")] + argv
        out, err = open(tmp / "stdout", "wb+"), open(tmp / "stderr", "wb+")
        drv = Driver(card, list(kernels), present, cards=list(cards), hang=hang, latency=latency, draws=draws)
        for name, fn in (mutate or {}).items():
            from ptx_interp import Ptx
            k = next(b.kernel for b in kernels if b.kernel.name == name)
            if isinstance(fn, tuple):
                drv.gpu.once[name] = (fn[1], Ptx(fn[0](k.ptx)))
            else:
                drv.gpu.programs[name] = Ptx(fn(k.ptx))
        try:
            code = supervise(argv, drv, out, err, tmp, timeout)
            out.seek(0)
            err.seek(0)
            ev = tmp / "events.log"
            st = tmp / "strace.txt"
            return MockResult(-9 if code is None else code, out.read().decode(), err.read().decode(),
                              ev.read_text() if ev.exists() else "", drv.trace, drv.errors,
                              drv.gpu.launches, drv.allocations,
                              st.read_text().splitlines() if strace and st.exists() else None,
                              drv.boosted, drv.submissions, drv.gpu.copies, drv.caching)
        finally:
            drv.close()
            out.close()
            err.close()
