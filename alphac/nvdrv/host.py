"""The GPU host a GPU owner is built for: which card, which driver, how much memory.

A GPU-owner executable is built for one card on one machine. Its identity is compiled in and
checked at start-up against what the driver says (`conversation.py`): the UUID
(`refused: device-uuid` on a difference), the product name and the driver version
(`refused: nvidia-plan-host`). The declared memory is the supply that memory admission checks the
owner's demand against at compile time (E0120).

A host description is a small text file, one `key value` per line, `#` comments:

    uuid     GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a   # as nvidia-smi -L and /proc print it
    product  NVIDIA H200                                 # NV2080_CTRL_CMD_GPU_GET_NAME_STRING
    memory   143771 MiB                                  # bytes, or N KiB / MiB / GiB
    driver   580.159.04                                  # the kernel module's version
    minor    0                                           # /dev/nvidia<minor> (default 0)
    topology 8 9 2 64                                    # GPCs, TPCs per GPC, SMs per TPC,
                                                         # warps per SM (optional)
    map      uvm                                         # how the GPU maps the memory: uvm
                                                         # (default) or rm (optional)
    results  copy                                        # copy (default) or bar1 (optional)
    sysmem   cached                                      # cached (default) or uncached (optional)
    inputs   sysmem                                      # sysmem (default) or bar1 (optional)
    upload   copy                                        # copy (default) or bar1 (optional)

or the same as build options (`--gpu-uuid`, `--gpu-product`, `--gpu-memory`, `--driver`,
`--gpu-minor`, `--gpu-topology`, `--gpu-map`, `--gpu-results`, `--gpu-sysmem`,
`--gpu-inputs`, `--gpu-upload`), which override the file's lines. `gpu/qualify.py` writes one from the machine.

`topology`: GR_GET_INFO's LITTER_NUM_GPCS, LITTER_NUM_TPC_PER_GPC, LITTER_NUM_SM_PER_TPC and
MAX_WARPS_PER_SM (`--probe-identity` prints them); it sizes a spilling owner's local memory (image.py).

`map`: how the owner maps its memory for the GPU (conversation.py, docs/nvdrv.md "Mapping with the
RM alone"): `uvm` through nvidia-uvm.ko (what ran on the H200), `rm` with the RM alone (no UVM file).
It is one row of `CHOICES`, the table of how the owner drives the card, which makes each key, its
`--gpu-KEY` build option and its check. `results`, `sysmem`, `inputs` and `upload` each choose between
today's path (the default) and the one that ran on the H200 on 2026-12-04 (image.plan reads them;
docs/nvdrv.md "Fallbacks to the verified paths").

Requires nothing. Guarantees: a `GpuHost` with every field valid, or `HostError` naming the
field and what is wrong with it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from alphac.files import read_regular

UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
# How the owner drives the card, each a host key and the build option --gpu-KEY: the values, the
# first the default, and what the choice is (the help text). One table: the options, the file's
# keys, describe() and the checks read it.
# Each default is today's path; the other value of results, sysmem, inputs and upload is the fallback to
# the paths the H200 ran on 2026-12-04 (docs/nvdrv.md "Fallbacks to the verified paths").
CHOICES = {"map": (("uvm", "rm"), "how the GPU maps the owner's memory: through nvidia-uvm (uvm, the "
                   "default) or with the RM alone (rm; docs/nvdrv.md)"),
           "results": (("copy", "bar1"), "how the host reads the card's results: copied to system memory "
                       "by the copy engine (copy, the default) or from video memory through BAR1 (bar1)"),
           "sysmem": (("cached", "uncached"), "the system memory of the semaphore, the notifier, the results "
                      "and staging: cached (the default) or uncached (uncached)"),
           "inputs": (("sysmem", "bar1"), "where the host writes a step's inputs (constant banks, idx, rd, "
                      "mirrored states) for the card: system memory (sysmem, the default) or video memory "
                      "through BAR1 (bar1)"),
           "upload": (("copy", "bar1"), "how the launch image and the data rows reach the card at start-up: "
                      "written to system memory and copied by the copy engine (copy, the default) or written "
                      "into video memory through BAR1 (bar1)")}
# Each choice's value on the paths that ran on the H200 of 2026-12-04 (commit 885460c,
# ../shared/device-runs/README.md): what gpu/choose.py tries when the defaults fail on a card.
VERIFIED = {"map": "uvm", "results": "bar1", "sysmem": "uncached", "inputs": "bar1", "upload": "bar1"}
KEYS = ("uuid", "product", "memory", "driver", "minor", "topology", *CHOICES)
TOPOLOGY_NAMES = ("gpcs", "tpcs-per-gpc", "sms-per-tpc", "warps-per-sm")
_UUID = re.compile(r"GPU-([0-9a-fA-F]{8})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{12})")
_DRIVER = re.compile(r"[0-9]+(\.[0-9]+){1,3}")
NAME_MAX = 63          # NV2080_GPU_MAX_NAME_STRING_LENGTH (64) with its NUL
DRIVER_MAX = 255       # NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE with its NUL


class HostError(ValueError):
    """A host description that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Topology:
    """The card's shape as the driver states it: the area a spilling owner sets up is sized for
    gpcs * tpcs_per_gpc TPCs of sms_per_tpc SMs of warps_per_sm warps of 32 lanes."""
    gpcs: int
    tpcs_per_gpc: int
    sms_per_tpc: int
    warps_per_sm: int

    @property
    def tpcs(self) -> int:
        return self.gpcs * self.tpcs_per_gpc

    @property
    def values(self) -> tuple[int, int, int, int]:
        return (self.gpcs, self.tpcs_per_gpc, self.sms_per_tpc, self.warps_per_sm)

    def text(self) -> str:
        return " ".join(str(v) for v in self.values)


def parse_topology(text: str) -> Topology:
    parts = str(text).split()
    if len(parts) != 4 or not all(p.isdigit() and 1 <= int(p) <= 4096 for p in parts):
        raise HostError(f"topology `{text}` is not four whole numbers 1..4096: GPCs, TPCs per GPC, "
                        "SMs per TPC, warps per SM")
    return Topology(*(int(p) for p in parts))


@dataclass(frozen=True)
class GpuHost:
    uuid: bytes            # the 16 bytes of the GPU's UUID, in the order the string prints them
    product: str           # the driver's product name, e.g. "NVIDIA H200"
    memory: int            # bytes of the card's memory the plan may use (the supply)
    driver: str            # the driver version, e.g. "580.159.04"
    minor: int = 0         # the card's device file /dev/nvidia<minor>
    topology: Topology | None = None   # GR_GET_INFO's shape of the card, when described
    choices: tuple[tuple[str, str], ...] = ()   # (key, value) of CHOICES other than the default, sorted

    def choice(self, key: str) -> str:
        return dict(self.choices).get(key, CHOICES[key][0][0])

    def choose(self, key: str, value: str) -> "GpuHost":
        """This host with CHOICES[key] set to value (refused HostError when not one of them)."""
        return make(self.as_dict() | {key: value})

    @property
    def gpu_map(self) -> str:
        return self.choice("map")

    @property
    def uuid_text(self) -> str:
        return format_uuid(self.uuid)

    def describe(self) -> str:
        return (f"uuid {self.uuid_text}\nproduct {self.product}\nmemory {self.memory}\n"
                f"driver {self.driver}\nminor {self.minor}\n"
                + (f"topology {self.topology.text()}\n" if self.topology else "")
                + "".join(f"{k} {v}\n" for k, v in self.choices))

    def as_dict(self) -> dict:
        return {"uuid": self.uuid_text, "product": self.product, "memory": self.memory,
                "driver": self.driver, "minor": self.minor} | \
            ({"topology": self.topology.text()} if self.topology else {}) | dict(self.choices)


def parse_uuid(text: str) -> bytes:
    m = _UUID.fullmatch(text.strip())
    if m is None:
        raise HostError(f"uuid `{text}` is not of the form GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
    return bytes.fromhex("".join(m.groups()))


def format_uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def parse_memory(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if m is None or m.group(2) not in UNITS:
        raise HostError(f"memory `{text}` is not a whole number of bytes, KiB, MiB, GiB or TiB")
    value = int(m.group(1)) * UNITS[m.group(2)]
    if value <= 0:
        raise HostError("memory must be more than 0 bytes")
    return value


def _check_text(key: str, value: str, limit: int) -> str:
    if not value or not value.isascii() or not value.isprintable() or len(value) > limit:
        raise HostError(f"{key} must be 1 to {limit} printable ASCII characters")
    return value


def make(fields: dict[str, str | int]) -> GpuHost:
    """A GpuHost from raw fields (strings from a file or the command line)."""
    missing = [k for k in ("uuid", "product", "memory", "driver") if fields.get(k) in (None, "")]
    if missing:
        raise HostError(f"the host description lacks {', '.join(missing)}")
    unknown = sorted(set(fields) - set(KEYS))
    if unknown:
        raise HostError(f"unknown key `{unknown[0]}` (keys: {', '.join(KEYS)})")
    driver = _check_text("driver", str(fields["driver"]).strip(), DRIVER_MAX)
    if not _DRIVER.fullmatch(driver):
        raise HostError(f"driver `{driver}` is not a version such as 580.159.04")
    minor = str(fields.get("minor", 0)).strip()
    if not minor.isdigit() or int(minor) > 254:
        raise HostError(f"minor `{minor}` is not a device minor number (0..254)")
    choices = []
    for key, (values, _) in CHOICES.items():
        value = str(fields.get(key) or values[0]).strip()
        if value not in values:
            raise HostError(f"{key} `{value}` is not one of {', '.join(values)}")
        choices += [(key, value)] * (value != values[0])
    return GpuHost(parse_uuid(str(fields["uuid"])),
                   _check_text("product", str(fields["product"]).strip(), NAME_MAX),
                   parse_memory(fields["memory"]), driver, int(minor),
                   parse_topology(fields["topology"]) if fields.get("topology") not in (None, "") else None,
                   tuple(sorted(choices)))


def read_fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition(" ")
        if key in out:
            raise HostError(f"line {n}: `{key}` is given twice")
        out[key] = value.strip()
    return out


def load(path: str | Path | None, overrides: dict[str, str | int | None] | None = None) -> GpuHost:
    """The host from a description file (or none) with command-line overrides applied."""
    fields: dict[str, str | int] = {}
    if path is not None:
        try:
            fields.update(read_fields(read_regular(path, 1 << 16).decode("utf-8", "replace")))
        except OSError as e:
            raise HostError(f"cannot read the host description `{path}`: {e.strerror or e}")
    fields.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return make(fields)
