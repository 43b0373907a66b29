"""alphac.nvdrv: the NVIDIA kernel driver conversation (ioctls to nvidia.ko and nvidia-uvm.ko), as data.

    abi.py           the driver's ABI for release 580 (ioctl numbers, structure layouts, classes,
                     methods, QMD layouts), each fact checked against the published headers
                     through tests/golden/nvdrv_abi_580.json (docs/nvdrv-abi.md); its numbers
                     are generated/abi_580.py, written from that file
    host.py          the GPU host a GPU owner is built for (UUID, product, memory, driver, minor)
    image.py         a GPU owner's memory plan and launch image: every address, QMD, constant
                     bank, push buffer and GPFIFO entry, fixed at compile time; memory demand
    conversation.py  the calls in order, with their structures, as the table the runtime
                     interprets (alphac/runtime/nvdrv.rt); the system calls it makes

docs/nvdrv.md describes GPU owners, the mock driver they are tested against, and qualification.
"""
