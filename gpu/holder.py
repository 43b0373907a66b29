"""Hold the GPU from this process while a GPU owner starts in another (issue 42: is the 176 ms
between an owner's `identity` and `memory` events a start that whoever comes first pays?).

    with held(host.uuid, host.minor, "fds"):  ...    # /dev/nvidiactl and /dev/nvidia<minor> open
    with held(host.uuid, host.minor, "uvm"):  ...    # and a UVM VA space with the GPU registered

`fds`: while any file of the GPU is open the adapter stays started (kernel-open/nvidia/nv.c:
nvidia_open -> nv_open_device -> nv_start_device -> rm_init_adapter when NV_FLAG_OPEN is clear;
nv_close_device -> nv_stop_device at the last close, a full nv_shutdown_adapter unless
persistence mode set NV_FLAG_PERSISTENT_SW_STATE). `uvm`: also an owner's own first UVM calls
(UVM_INITIALIZE, UVM_MM_INITIALIZE, UVM_REGISTER_GPU with the card's UUID), after which UVM
keeps its state for the GPU (its RM device, channels, fault buffers, page tables) until the
last VA space lets it go (kernel-open/nvidia-uvm/uvm_gpu.c: gpu_retain_by_uuid_locked ->
add_gpu the first time, uvm_gpu_release_locked -> remove_gpu at the last release).

The structures are the conversation's, placed from alphac's ABI tables (conversation.Region);
nothing else is asked: no RM client, no control call, and no setting of the GPU (persistence
mode, clocks, MIG) is changed. Leaving the block closes every file, which undoes all of it.

Requires the driver's device files under `dev` (/dev). Guarantees: HoldFailed naming the file
or the call that failed, and every file it opened closed again, on success or failure.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

LEVELS = ("fds", "uvm")


class HoldFailed(Exception):
    """The GPU could not be held: the file or call, and why."""


def uvm_calls(uuid: bytes, fd_uvm: int) -> list[tuple[str, str, int, bytearray, int | None]]:
    """(fd name, call, request, argument, rmStatus offset or None when not checked) of the UVM
    calls, in order, as the conversation makes them."""
    from alphac.nvdrv.abi import UVM_IOCTLS
    from alphac.nvdrv.conversation import Region
    out = []
    for fd, name, values, checked in (("uvm", "UVM_INITIALIZE", {"flags": 0}, True),
                                      ("uvm2", "UVM_MM_INITIALIZE", {"uvmFd": fd_uvm}, False),
                                      ("uvm", "UVM_REGISTER_GPU", {"rmCtrlFd": -1, "gpu_uuid": uuid}, True)):
        io, region = UVM_IOCTLS[name], Region()
        placed = region.place(io.params, values)
        out.append((fd, name, io.cmd, region.buf, placed.at("rmStatus")[0] if checked else None))
    return out


@contextmanager
def held(uuid: bytes, minor: int, level: str, dev: str = "/dev", ioctl=fcntl.ioctl):
    """The GPU held at `level` (LEVELS) for the block's length."""
    if level not in LEVELS:
        raise HoldFailed(f"level {level!r}: not one of {', '.join(LEVELS)}")
    files = {"ctl": "nvidiactl", "gpu": f"nvidia{minor}"} | (
        {"uvm": "nvidia-uvm", "uvm2": "nvidia-uvm"} if level == "uvm" else {})
    fds: dict[str, int] = {}
    try:
        for key, name in files.items():
            path = Path(dev) / name
            try:
                fds[key] = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError as e:
                raise HoldFailed(f"cannot open {path}: {e.strerror}") from None
        for fd, name, request, arg, status in (uvm_calls(uuid, fds["uvm"]) if level == "uvm" else []):
            try:
                ioctl(fds[fd], request, arg, True)
            except OSError as e:
                raise HoldFailed(f"{name}: {e.strerror}") from None
            if status is not None and int.from_bytes(arg[status:status + 4], "little"):
                raise HoldFailed(f"{name}: status {int.from_bytes(arg[status:status + 4], 'little'):#x}")
        yield
    finally:
        for fd in reversed(fds.values()):
            os.close(fd)
