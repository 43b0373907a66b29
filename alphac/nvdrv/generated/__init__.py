"""alphac.nvdrv.generated: files a generator writes, never edited by hand, each saying so on its
first line (`generated; do not edit`); tests/test_size.py counts them apart and keeps them here.
abi_580.py: the driver ABI's numbers (release 580), written by tests/nvdrv_layout_probe/autogen.py
from tests/golden/nvdrv_abi_580.json; alphac/nvdrv/abi.py gives them their types and meaning.
"""
