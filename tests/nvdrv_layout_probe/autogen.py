#!/usr/bin/env python3
"""Write alphac/nvdrv/generated/abi_580.py, the numbers of NVIDIA's driver ABI (release 580),
from the golden file the probe wrote (tests/golden/nvdrv_abi_580.json), as tinygrad's autogen
does from headers: the subset alphac uses is named once, in probe.py's SPEC; gcc computes every number
from the published headers; this script turns them into Python data; alphac/nvdrv/abi.py
gives them their types and meaning.

    python tests/nvdrv_layout_probe/autogen.py            # rewrite alphac/nvdrv/generated/abi_580.py
    python tests/nvdrv_layout_probe/autogen.py --check    # exit 1 if it is not what this writes

tests/test_nvdrv_abi.py runs the check, so the generated file cannot drift from the golden one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "nvdrv_abi_580.json"
OUT = ROOT / "alphac" / "nvdrv" / "generated" / "abi_580.py"


def table(name: str, items, fmt=repr) -> list[str]:
    out = [f"{name} = {{"]
    out += [f"    {k!r}: {fmt(v)}," for k, v in items]
    return out + ["}", ""]


def hexint(v: int) -> str:
    return f"{v:#x}" if v >= 256 else str(v)


def render(g: dict) -> str:
    src = g["source"]
    out = ['"""NVIDIA driver ABI, release 580: the numbers, generated; do not edit.',
           "",
           "Written by tests/nvdrv_layout_probe/autogen.py from tests/golden/nvdrv_abi_580.json, which",
           "tests/nvdrv_layout_probe/probe.py computed with gcc from the published headers of",
           f"open-gpu-kernel-modules {src['open-gpu-kernel-modules']['tag']} "
           f"({src['open-gpu-kernel-modules']['commit'][:12]}) and open-gpu-doc "
           f"({src['open-gpu-doc']['commit'][:12]}).",
           "alphac/nvdrv/abi.py gives them their types and meaning.",
           '"""', ""]
    out += ["SOURCE = {"]
    for t in ("open-gpu-kernel-modules", "open-gpu-doc"):
        out.append(f"    {t!r}: {{")
        out += [f"        {k!r}: {v!r}," for k, v in sorted(src[t].items())]
        out.append("    },")
    out += ["}", ""]
    out += ["# struct -> (size, align, fields); a field is (name, offset, size, kind, count)",
            "STRUCTS = {"]
    for name, s in g["structs"].items():
        out.append(f"    {name!r}: ({s['size']}, {s['align']}, (")
        out += [f"        {tuple(f)!r}," for f in s["fields"]]
        out.append("    )),")
    out += ["}", ""]
    out += table("NV_ESCAPES", g["escapes"].items())
    out += ["# (escape, struct, count): the command number is _IOWR(NV_IOCTL_MAGIC, escape, size)",
            "NV_IOCTLS = ("]
    out += [f"    {(v['escape'], v['struct'], v['count'])!r}," for v in g["nv_ioctls"].values()]
    out += [")", ""]
    out += table("UVM_IOCTLS", [(k, (v["cmd"], v["params"])) for k, v in g["uvm_ioctls"].items()],
                 lambda t: f"({hexint(t[0])}, {t[1]!r})")
    out += table("CTRL_CMDS", [(k, (v["cmd"], v["params"])) for k, v in g["ctrl_cmds"].items()],
                 lambda t: f"({t[0]:#x}, {t[1]!r})")
    out += table("CLASSES", g["classes"].items(), lambda v: f"{v:#06x}")
    out += ["METHODS = {"]
    for cls, methods in g["methods"].items():
        out.append(f"    {cls!r}: {{")
        out += [f"        {m!r}: {v:#06x}," for m, v in methods.items()]
        out.append("    },")
    out += ["}", ""]
    out += table("CONSTANTS", g["constants"].items(), hexint)
    out += ["# name -> (high bit, low bit)"]
    out += table("BITFIELDS", g["bitfields"].items(), lambda v: repr(tuple(v)))
    out += table("STATUS_CODES", g["status_codes"].items(), hexint)
    out += ["# QMD layouts: header, macro prefix, size in bits, fields (name -> (high, low)), the",
            "# number of instances of each indexed family, named values", "QMD = {"]
    for name, q in g["qmd"].items():
        out.append(f"    {name!r}: {{")
        out.append(f"        'header': {q['header']!r}, 'prefix': {q['prefix']!r}, 'bits': {q['bits']},")
        out.append("        'fields': {")
        out += [f"            {f!r}: {tuple(v)!r}," for f, v in q["fields"].items()]
        out.append("        },")
        out.append("        'indexed_counts': {")
        out += [f"            {f!r}: {n}," for f, n in q["indexed_counts"].items()]
        out.append("        },")
        out.append("        'values': {")
        out += [f"            {f!r}: {hexint(v)}," for f, v in q["values"].items()]
        out.append("        },")
        out.append("    },")
    out += ["}"]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    text = render(json.loads(GOLDEN.read_text()))
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run {Path(__file__).relative_to(ROOT)}",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
