"""alphac.nvdrv: the NVIDIA kernel driver conversation (ioctls to nvidia.ko and nvidia-uvm.ko), as data.

abi.py holds the driver's ABI for release 580 (ioctl numbers, structure layouts, classes,
methods, QMD layouts), each fact checked against the published headers through
tests/golden/nvdrv_abi_580.json.
"""
