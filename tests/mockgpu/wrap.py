"""The mock driver as a command wrapper, for runs whose processes something else starts:

    python tests/mockgpu/wrap.py CONFIG.json EXE ARGS...

runs `EXE ARGS` under the mock (as `mockgpu.run` does) with the standard streams passed through,
and exits with its exit code (the mock's own failure: 125). `alphac launch --gpu-wrapper` starts
each GPU owner of a deployment this way, so every role process gets its own mock driver, serving
the machine's cards; each process opens its own card (the mock refuses a second).

CONFIG: {"cards": [{uuid (hex), name, driver, sm, minor, memory, gpu_id, device_instance}...],
"kernels": a pickle of alphac.ptx.build lists (every SM the cards have), "logs": a directory,
and optionally "mutate": {kernel: [old, new]} with "mutate_minor": the card whose GPU runs that
kernel's PTX with its first `old` replaced by `new` (a mutant the host shadow must catch)}.
Each run writes logs/<pid>.json: argv, the card it opened, the mock's errors, the device calls,
the kernels launched, the video memory allocated, the copies the copy engine made and how the
driver mapped each system memory for the CPU.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent), str(HERE.parent.parent / "gpu")]

from mockgpu import Card, Driver, supervise          # noqa: E402


def card_of(d: dict) -> Card:
    return Card(uuid=bytes.fromhex(d["uuid"]), name=d["name"], driver=d["driver"], sm=d["sm"],
                minor=d["minor"], memory=d["memory"], gpu_id=d["gpu_id"],
                device_instance=d["device_instance"])


def config(cards: list[Card], kernels_file: str, logs: str) -> dict:
    return {"cards": [{"uuid": c.uuid.hex(), "name": c.name, "driver": c.driver, "sm": c.sm,
                       "minor": c.minor, "memory": c.memory, "gpu_id": c.gpu_id,
                       "device_instance": c.device_instance} for c in cards],
            "kernels": kernels_file, "logs": logs}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: wrap.py CONFIG.json EXE ARGS...", file=sys.stderr)
        return 125
    cfg = json.loads(Path(argv[0]).read_text())
    cards = [card_of(c) for c in cfg["cards"]]
    kernels = [b for group in pickle.loads(Path(cfg["kernels"]).read_bytes()) for b in group]
    drv = Driver(cards[0], kernels, cards=cards)
    minor = cfg.get("mutate_minor")          # the card whose GPU computes another bit, if any
    for name, (old, new) in cfg.get("mutate", {}).items():
        from ptx_interp import Ptx
        drv.mutated = (minor, name, Ptx(next(b.kernel for b in kernels if b.kernel.name == name)
                                           .ptx.replace(old, new, 1)))
    try:
        code = supervise(argv[1:], drv, None, None, None, 300.0)
    except Exception as e:
        drv.errors.append(f"wrapper: {e!r}")
        code = None
    finally:
        drv.close()
    log = {"argv": argv[1:], "card": drv.opened.minor if drv.opened else None,
           "errors": drv.errors, "launches": [name for name, _, _, _ in drv.gpu.launches],
           "vram": drv.vram, "copies": len(drv.gpu.copies), "caching": drv.caching, "opened": sorted({t[1] for t in drv.trace if t[0] == "openat"
                                                and str(t[1]).startswith("/dev/nvidia")})}
    Path(cfg["logs"], f"{os.getpid()}.json").write_text(json.dumps(log, indent=1))
    if code is None:
        return 125
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
