#!/usr/bin/env python3
"""Qualify alphac's GPU owners on this machine's NVIDIA GPU: one command, one run record.

    python3 gpu/qualify.py [--steps 5] [--learner independent_state --learner lsq_adam]
                           [--minor 0] [--sm 90] [--cuda-trace] [--records runs]
                           [--qmd-variant NAME [--qmd-from-trace DIR]] [--owner-timeout S]
    python3 gpu/qualify.py --list-variants [--sm 90] [--qmd-from-trace DIR]

1. Reads the card's identity from the kernel driver (/proc/driver/nvidia/version and
   /proc/driver/nvidia/gpus/*/information: driver version, model, UUID, device minor).
2. Builds a provisional GPU owner for that host and runs it with `--probe-identity`: the
   executable's own conversation asks the driver for the version, UUID, product name, classes,
   memory and topology (GR_GET_INFO), and prints the answers without allocating anything. Those answers are the host
   description (written to the record as host.gpuhost), so the build that follows is for
   exactly what the driver says.
3. With --cuda-trace, first records what CUDA's own driver says for one tiny launch
   (gpu/cuda_ioctl_trace.py into the record's cuda-trace/), when libcuda is here.
4. For each learner: builds the GPU owner (`alphac build --target x86_64+sm_NN --gpu-host`),
   runs it with `--steps N --events`, and compares what it prints with the reference
   interpreter (alphac.ir.interp) and the independent oracle (tests/oracle.py). The executable
   itself compares the GPU's bits with its host shadow after every kernel (refusing
   gpu-shadow-mismatch otherwise).
5. The ordering probe (gpu/order_probe.py): one executable of its own whose push buffers are
   built by the owners' builders, settling whether the card orders a kernel after a kernel
   (the compute WAIT_FOR_IDLE) and the copy engine after a kernel (the host's WFI), with a
   control without the WFI; kernel A spins `--order-spins` iterations before it writes its
   marker. One line each, `order CASE RESULT NOTE`; the record's `order` holds them. It never
   stops the qualification nor changes its verdict: a probe that cannot be built or run says
   `no-verdict` and why.
6. Writes runs/gpu-qualify-NNNN/record.json: the host, the GPU (UUID, product, driver, memory,
   minor, SM), the probe's output, the SHA-256 of every artifact (executables, cubins, the host
   description) and the pinned ptxas, each run's exit, refusal, output, verdicts and event
   stream, and whether the whole qualification passed; authenticated with the record key as
   alphac.tools.launch does (`alphac verify-record` checks it).

QMD variants (gpu/device-check.sh tries them in turn, one process each): `--qmd-variant NAME`
builds every owner with the named QMD fields of QMD_VARIANTS set over alphac's choices (through
alphac.nvdrv.image.QMD_OVERRIDES; the record's `qmd_variant` says which, with the values).
"default" changes nothing. "libcuda" (with --qmd-from-trace, the cuda_ioctl_trace.py output)
takes the launch-independent fields (TRACE_FIELDS) from the last QMD libcuda launched.
`--list-variants` prints the names to try for the card's SM, one a line with its fields.
`--owner-timeout S` kills an owner that runs longer (exit 124 in the record). `--runner
FILE.py:FUNCTION` runs each owner through FUNCTION(exe, args, built) -> (exit, stdout, stderr)
instead (the tests run them under tests/mockgpu this way).

Exit codes: 0 every owner ran and printed the oracle's bits; 1 something refused or differed (the
record says what); 2 it cannot run here (no NVIDIA driver, no ptxas, an unknown card).
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "gpu")]

from alphac.refusals import Refusal                                      # noqa: E402
from alphac.tools.record import (PASS_RULES, RECORD_FORMAT, new_record_dir, record_key,  # noqa: E402
                                 seal, write_record)

LEARNERS = ["independent_state", "lsq_adam"]
SM_BY_MODEL = [(r"\bH100\b|\bH200\b|\bH800\b|\bGH200\b", 90),
               (r"RTX 30\d0|RTX A\d000|\bA10\b|\bA40\b|\bA16\b|\bA2\b", 86)]


class Unavailable(Exception):
    pass


# -- QMD variants: the [inferred] rows of docs/nvdrv.md's facts table, one named change each ------
# Values are ints or the name of one of the layout's values ("FALSE" for FIELD_FALSE).
_INVALIDATIONS = ("INVALIDATE_TEXTURE_HEADER_CACHE", "INVALIDATE_TEXTURE_SAMPLER_CACHE",
                  "INVALIDATE_TEXTURE_DATA_CACHE", "INVALIDATE_SHADER_DATA_CACHE")
_CARRIED = {"QMD_GROUP_ID": 0, "CWD_MEMBAR_TYPE": "L1_NONE", "SASS_VERSION": 0} | \
    {f: "FALSE" for f in _INVALIDATIONS}
QMD_VARIANTS: dict[str, list[tuple[str, dict, str]]] = {
    "V04_00": [
        ("default", {}, "alphac's choices (alphac/nvdrv/image.py qmd_fields)"),
        ("group-id-0", {"QMD_GROUP_ID": 0}, "group id 0x3f is tinygrad's Ampere value"),
        ("no-invalidate", {f: "FALSE" for f in _INVALIDATIONS}, "the four cache invalidations are Ampere's"),
        ("membar-none", {"CWD_MEMBAR_TYPE": "L1_NONE"}, "the L1 sysmembar is Ampere's"),
        ("sm-config-228k", {"MAX_SM_CONFIG_SHARED_MEM_SIZE": (228 << 10) // 4096 + 1},
         "the largest carve-out as 228 KiB itself, not the 96 KiB step"),
        ("sass-version-0", {"SASS_VERSION": 0}, "SASS_VERSION 0x90 is the Ampere encoding carried over"),
        ("qmd-type-gpc-cga", {"QMD_TYPE": "GRID_GPC_CGA"}, "a grid of GPC clusters instead of GRID_CTA"),
        ("carried-over-off", _CARRIED, "every Ampere carry-over off at once"),
    ],
    "V03_00": [("default", {}, "tinygrad's hardware-tested values")],
}
# the fields the "libcuda" variant copies from a traced QMD: none that depends on the launch
TRACE_FIELDS = re.compile(r"(QMD_TYPE|QMD_GROUP_ID|(LATCH_ACQUIRE_)?INVALIDATE_\w+|DISABLE_AUTO_INVALIDATE|"
                          r"CONSTANT_BUFFER_INVALIDATE\(0\)|CWD_MEMBAR_\w+|SASS_VERSION|API_VISIBLE_CALL_LIMIT|"
                          r"SAMPLER_INDEX|MAX_SM_CONFIG_SHARED_MEM_SIZE|ADD_TO_HEAD_OF_QMD_GROUP_LINKED_LIST)")


def resolve_fields(layout, fields: dict) -> dict[str, int]:
    """A variant's fields as ints (a value name is looked up in the layout's values)."""
    return {k: v if isinstance(v, int) else layout.values[f"{k}_{v}"] for k, v in fields.items()}


def trace_fields(sm: int, trace: Path) -> dict[str, int] | None:
    """TRACE_FIELDS of the last whole QMD in a cuda_ioctl_trace.py output (DIR or its
    channels.json), None when there is none."""
    from alphac.nvdrv import abi
    from cuda_ioctl_trace import traced_qmd
    from nvdrv_decode import unpack_qmd
    path = trace / "channels.json" if trace.is_dir() else trace
    if not path.is_file():
        return None
    info = json.loads(path.read_text())
    found = traced_qmd(info) if info.get("sm") == sm else None
    if found is None:
        return None
    layout = abi.QMD_LAYOUTS[abi.ARCHES[f"sm_{sm}"].qmd]
    return {k: v for k, v in unpack_qmd(layout, found[0]).items() if TRACE_FIELDS.fullmatch(k)}


def qmd_variants(sm: int, trace: Path | None = None) -> list[tuple[str, dict[str, int], str]]:
    """The variants to try, in order, for sm_NN: default first, then libcuda's (when the trace
    has a QMD), then QMD_VARIANTS' others."""
    from alphac.nvdrv import abi
    layout = abi.QMD_LAYOUTS[abi.ARCHES[f"sm_{sm}"].qmd]
    table = [(n, resolve_fields(layout, f), why) for n, f, why in QMD_VARIANTS[layout.name]]
    traced = trace_fields(sm, trace) if trace is not None else None
    if traced:
        table.insert(1, ("libcuda", traced, "the launch-independent fields of libcuda's own QMD"))
    return table


# -- what the kernel driver says about itself ----------------------------------------------------
def parse_version(text: str) -> str:
    """The driver version from /proc/driver/nvidia/version."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)", text) or \
        re.search(r"NVRM version:.*?\b([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b", text)
    if m is None:
        raise Unavailable("cannot read the driver version from /proc/driver/nvidia/version")
    return m.group(1)


def parse_information(text: str) -> dict[str, str]:
    """Model, GPU UUID and Device Minor from /proc/driver/nvidia/gpus/*/information."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return {"product": out.get("Model", ""), "uuid": out.get("GPU UUID", ""),
            "minor": out.get("Device Minor", "0")}


def identity_from_smi(minor: int | None) -> dict[str, str] | None:
    """The same facts from nvidia-smi, where the driver's /proc tree is not visible (a sandbox
    that proxies the device files, gVisor's, say); None without an answer."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        run = subprocess.run([smi, "--query-gpu=name,uuid,driver_version,minor_number", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    gpus = []
    for line in run.stdout.splitlines() if run.returncode == 0 else []:
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 4 and parts[3].isdigit() and (minor is None or int(parts[3]) == minor):
            gpus.append({"product": parts[0], "uuid": parts[1], "minor": parts[3], "driver": parts[2]})
    return gpus[0] if gpus else None


def read_identity(proc: Path, minor: int | None) -> dict[str, str]:
    version = proc / "version"
    if not version.exists():
        smi = identity_from_smi(minor)
        if smi is not None:
            return smi | {"source": "nvidia-smi"}
        raise Unavailable(f"no NVIDIA kernel driver here ({version} does not exist, and nvidia-smi says nothing)")
    gpus = [parse_information(p.read_text()) for p in sorted(proc.glob("gpus/*/information"))]
    if minor is not None:
        gpus = [g for g in gpus if g["minor"] == str(minor)]
    if not gpus:
        raise Unavailable("the driver lists no GPU" + (f" with device minor {minor}" if minor is not None else ""))
    return gpus[0] | {"driver": parse_version(version.read_text())}


def sm_of(product: str, given: int | None) -> int:
    if given is not None:
        return given
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            run = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:         # a wedged GPU: the model name decides
            run = subprocess.CompletedProcess([], 124, "", "")
        for line in run.stdout.splitlines():
            name, _, cap = line.rpartition(",")
            if name.strip() == product and cap.strip():
                return int(cap.strip().replace(".", ""))
    for pattern, sm in SM_BY_MODEL:
        if re.search(pattern, product):
            return sm
    raise Unavailable(f"cannot tell the SM of `{product}`: pass --sm 90 or --sm 86")


def parse_probe(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        out[key] = value
    return out


# -- running an owner ------------------------------------------------------------------------------
def run_owner(exe: Path, args: list[str], built, timeout: float = 600) -> tuple[int, str, str]:
    """Run a GPU owner on this machine (tests replace this to run it against the mock driver);
    one that runs past `timeout` seconds is killed: exit 124."""
    try:
        p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        text = lambda b: (b or b"").decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return 124, text(e.stdout), text(e.stderr) + f"\nqualify: killed after {timeout:g} s\n"
    return p.returncode, p.stdout, p.stderr


def load_runner(spec: str | None, default=None):
    """FILE.py:FUNCTION, the --runner hook; `default` when none is given."""
    if not spec:
        return default
    path, _, name = spec.rpartition(":")
    mod_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return getattr(mod, name)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def qualify(args, runner=None) -> tuple[int, Path | None]:
    from alphac.artifacts import gpu_recipe, ptxas_tool, write_file
    from alphac.build import build_gpu_owner
    from alphac.diag import CompileError
    from alphac.driver import compile_file
    from alphac.ir.interp import format_state, run as interp_run
    from alphac.nvdrv import host as host_mod, image
    from alphac.ptx.ptxas import PtxasMissing, find_ptxas
    import oracle
    runner = runner or functools.partial(run_owner, timeout=args.owner_timeout)
    ident = read_identity(Path(args.proc), args.minor)
    sm = sm_of(ident["product"], args.sm)
    variants = {n: (f, why) for n, f, why in qmd_variants(sm, args.qmd_from_trace)}
    if args.qmd_variant not in variants:
        raise Unavailable(f"no QMD variant `{args.qmd_variant}` for sm_{sm} (--list-variants: {', '.join(variants)})")
    overrides, why = variants[args.qmd_variant]
    image.QMD_OVERRIDES.clear()
    image.QMD_OVERRIDES.update(overrides)
    try:
        tool = find_ptxas()
    except PtxasMissing as e:
        raise Unavailable(str(e))
    key = record_key(args.record_key)
    rdir = new_record_dir(Path(args.records), "gpu-qualify")
    (rdir / "bin").mkdir()
    target = f"x86_64+sm_{sm}"

    def build(name: str, host):
        lr = compile_file(ROOT / "examples" / f"{name}.alpha").learner
        return lr, build_gpu_owner(lr, target, host)

    provisional = host_mod.make({"uuid": ident["uuid"], "product": ident["product"][:63] or "unknown",
                                 "memory": "1 TiB", "driver": ident["driver"], "minor": ident["minor"]})
    _, probe_build = build(args.learner[0], provisional)
    probe_exe = rdir / "bin" / "probe"
    write_file(probe_exe, probe_build.image.elf, 0o755)
    rc, probe_out, probe_err = runner(probe_exe, ["--probe-identity", "--events", str(rdir / "events" / "probe.log")],
                                      probe_build)
    said = parse_probe(probe_out)
    record = {"format": RECORD_FORMAT, "kind": "gpu-qualification", "steps": args.steps, "target": target,
              "host": {"machine": platform.machine(), "system": platform.system(),
                       "release": platform.release(), "node": platform.node()},
              "proc": ident, "probe": {"exit": rc, "stdout": probe_out, "stderr": probe_err},
              "tools": ptxas_tool(tool), "artifacts": {"bin/probe": sha256(probe_exe)}, "roles": [],
              "published": "", "passed": False,
              "qmd_variant": {"name": args.qmd_variant, "fields": overrides, "why": why}}
    if rc != 0 or not {"driver", "uuid", "product", "memory-kib"} <= said.keys():
        record["why"] = f"the identity probe failed: exit {rc} {probe_err.strip()}"
        return finish(rdir, record, key)
    topology = [said.get(k) for k in host_mod.TOPOLOGY_NAMES]      # GR_GET_INFO, when printed
    host = host_mod.make({"uuid": said["uuid"], "product": said["product"], "driver": said["driver"],
                          "memory": str(int(said["memory-kib"]) * 1024), "minor": ident["minor"],
                          "topology": " ".join(topology) if all(topology) else None})
    (rdir / "host.gpuhost").write_text(host.describe())
    record["gpu"] = host.as_dict() | {"sm": sm}
    record["artifacts"]["host.gpuhost"] = sha256(rdir / "host.gpuhost")
    record["order"] = order(args, host, sm, rdir, runner)
    if "sha256" in record["order"]:
        record["artifacts"]["bin/order-probe"] = record["order"]["sha256"]
    if args.cuda_trace:
        trace = subprocess.run([sys.executable, str(ROOT / "gpu" / "cuda_ioctl_trace.py"), "--out",
                                str(rdir / "cuda-trace"), "--libcuda", args.libcuda])
        record["cuda_trace"] = {"exit": trace.returncode, "report": "cuda-trace/report.txt"}
    published = []
    for name in args.learner:
        try:
            lr, built = build(name, host)
        except CompileError as e:
            record["roles"].append({"role": name, "exit": None, "refused": None,
                                    "build": "\n".join(d.render() for d in e.diagnostics)})
            continue
        exe = rdir / "bin" / f"{name}.sm_{sm}"
        write_file(exe, built.image.elf, 0o755)
        record["artifacts"][f"bin/{name}.sm_{sm}"] = sha256(exe)
        for b in built.kernels:
            cub = rdir / "bin" / f"{name}.{b.kernel.name}.sm_{sm}.cubin"
            cub.write_bytes(b.cubin)
            record["artifacts"][cub.relative_to(rdir).as_posix()] = sha256(cub)
        events = rdir / "events" / f"{name}.log"
        rc, out, err = runner(exe, ["--steps", str(args.steps), "--events", str(events)], built)
        refused = next((ln[len("refused: "):] for ln in err.splitlines() if ln.startswith("refused: ")), None)
        want = format_state(lr, interp_run(lr, args.steps))
        record["roles"].append({
            "role": name, "isa": target, "sha256": record["artifacts"][f"bin/{name}.sm_{sm}"],
            "recipe": gpu_recipe(f"examples/{name}.alpha", target, host), "exit": rc, "refused": refused,
            "stdout": out, "stderr": err[-4000:], "equals_interpreter": out == want,
            "equals_oracle": out == oracle.run(name, steps=args.steps),
            "stream": {"file": f"events/{name}.log"}})
        published.append(out)
    record["published"] = "".join(published)
    record["passed"] = PASS_RULES["gpu-qualification"](record)
    return finish(rdir, record, key)


def order(args, host, sm: int, rdir: Path, runner) -> dict:
    """The ordering probe (gpu/order_probe.py) built for `host` and run: its verdicts, exit and
    output; never an exception (a probe that cannot be built or started: every case
    `no-verdict`, and why)."""
    import order_probe
    from alphac.artifacts import write_file
    out = {"spins": args.order_spins}
    exe, events = rdir / "bin" / "order-probe", rdir / "events" / "order-probe.log"
    try:
        built = order_probe.build(sm, host, args.order_spins)
        write_file(exe, built.image.elf, 0o755)
        events.parent.mkdir(exist_ok=True)
        rc, stdout, stderr = runner(exe, ["--steps", str(len(order_probe.CASES)), "--events", str(events)], built)
    except Exception as e:              # never fatal to the qualification: said, and recorded
        why = f"{type(e).__name__}: {str(e)[:300]}"
        return out | {"verdicts": [{"case": c, "result": "no-verdict", "note": f"the probe failed: {why}"}
                                   for c, *_ in order_probe.CASES]}
    said = events.read_text() if events.is_file() else ""
    return out | {"sha256": sha256(exe), "exit": rc, "stdout": stdout, "stderr": stderr[-4000:],
                  "verdicts": order_probe.verdicts(stdout, rc, stderr, args.order_spins, said)}


def finish(rdir: Path, record: dict, key: bytes) -> tuple[int, Path]:
    write_record(rdir, seal(record, rdir, key))
    return (0 if record["passed"] else 1), rdir


def main(argv=None, runner=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--learner", action="append", help=f"default: {' and '.join(LEARNERS)}")
    ap.add_argument("--minor", type=int, default=None, help="the card's device minor (default: the first)")
    ap.add_argument("--sm", type=int, choices=(86, 90), default=None)
    ap.add_argument("--records", default="runs")
    ap.add_argument("--record-key", help="the key records are authenticated with (as alphac launch)")
    ap.add_argument("--cuda-trace", action="store_true", help="first record libcuda's conversation")
    ap.add_argument("--libcuda", default="libcuda.so.1")
    ap.add_argument("--qmd-variant", default="default", help="build the owners with this QMD variant")
    ap.add_argument("--qmd-from-trace", type=Path, help="a cuda_ioctl_trace.py output: adds the libcuda variant")
    ap.add_argument("--list-variants", action="store_true", help="print the QMD variants to try, in order")
    ap.add_argument("--owner-timeout", type=float, default=600, help="seconds an owner may run")
    ap.add_argument("--order-spins", type=int, default=None,
                    help="the ordering probe's spin iterations (default order_probe.SPINS: about 1 ms on an H200)")
    ap.add_argument("--runner", help="FILE.py:FUNCTION that runs each owner (a test hook)")
    ap.add_argument("--proc", default="/proc/driver/nvidia", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.learner = args.learner or LEARNERS
    if args.order_spins is None:
        from order_probe import SPINS
        args.order_spins = SPINS
    if args.order_spins < 0:
        ap.error("--order-spins: a count of iterations, 0 or more")
    if args.runner and runner is None:
        runner = load_runner(args.runner)
    try:
        if args.list_variants:
            sm = args.sm or sm_of(read_identity(Path(args.proc), args.minor)["product"], None)
            for name, fields, why in qmd_variants(sm, args.qmd_from_trace):
                print(f"{name}\t{json.dumps(fields, sort_keys=True)}\t{why}")
            return 0
        code, rdir = qualify(args, runner)
    except Unavailable as e:
        print(f"qualify: cannot run here: {e}", file=sys.stderr)
        return 2
    except Refusal as r:
        print(f"refused: {r.name} ({r.detail})", file=sys.stderr)
        return 1
    rec = json.loads((rdir / "record.json").read_text())
    for r in rec["roles"]:
        said = [ln for ln in r.get("stderr", "").splitlines() if ln.strip()]
        why = ("refused: " + r["refused"]) if r.get("refused") else r.get("build") or \
            ("bits differ" if r.get("exit") == 0 else f"exit {r.get('exit')}")
        print(f"{r['role']}: {'PASS' if r.get('exit') == 0 and r.get('equals_oracle') else f'FAIL ({why})'}")
        if r.get("exit") != 0:
            print("".join(f"    {ln}\n" for ln in said[-8:]), end="")
    for v in rec.get("order", {}).get("verdicts", []):
        print(f"order {v['case']} {v['result']} {v['note']}")
    if rec.get("why"):
        print(f"qualify: {rec['why']}", file=sys.stderr)
    print(f"run record: {rdir}/record.json ({'pass' if rec['passed'] else 'FAIL'}, "
          f"QMD variant {rec['qmd_variant']['name']})")
    return code


if __name__ == "__main__":
    sys.exit(main())
