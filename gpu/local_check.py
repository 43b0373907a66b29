#!/usr/bin/env python3
"""GPU owners that use local memory or are wide, on this machine's NVIDIA GPU, against the CPU.

    python3 gpu/local_check.py --out DIR [--widths 128,512,2048] [--learners lsq:65536,digits,...]
                               [--steps 3] [--rows 8]
                               [--owner-timeout S] [--runner FILE.py:FUNCTION] [--minor N] [--sm 90]
    python3 gpu/local_check.py --measure [--widths 64,...,65536 | --learners ...] [--sm 90] [--rows 2]

1. Reads the card's identity from /proc (gpu/qualify.py's read_identity), builds a provisional
   owner of a learner that uses no local memory and runs it with `--probe-identity`: the driver's
   version, UUID, product, memory and topology (GR_GET_INFO: GPCs, TPCs per GPC, SMs per TPC,
   warps per SM) become the host description, DIR/host.gpuhost.
2. For each width: the least-squares learner `lsq_source(width, rows)` (w: f64[width], its
   prediction through p = w * x[i], which grad_samples keeps in a .local array: local memory),
   then each --learners entry (plain least squares `lsq:W`, e.g. 65,536 wide, its data in .npy
   files; a tanh MLP `mlp:I-H-C` on generated data; `digits`, examples/digits_mlp.alpha on its
   1,500 images), built as a GPU owner for that host (the build's seconds, its kernels' ptxas
   time, cubin bytes and stack bytes a thread recorded) and as an x86-64 executable; both run
   `--steps N`; the owner's output must equal the CPU executable's, bit for bit, and the
   reference interpreter's where that is quick (the least squares up to 20,000 values of data).
3. Writes DIR/local.json (every figure, exit, refusal, output, verdict) as it goes and one line
   per learner on standard output. An owner that fails is built and run once more with the QMD's
   SHADER_LOCAL_MEMORY_LOW_SIZE set to HIGH_SIZE's value too (NVK writes LOW_SIZE, tinygrad
   HIGH_SIZE; alphac the latter), and the line after it says whether that passed: informative
   only, the exit stays 1.

`--measure` only builds the kernels (no card, no run) and prints ptxas's time, the cubins' and
code's size, the PTX lines, stack and registers per learner (by default plain and kept least
squares of widths 64 to 65,536): the figures docs/gpu.md quotes. `--runner` runs each executable
through FUNCTION(exe, args, built) -> (exit, stdout, stderr) (tests/test_device_check_local.py
runs the owners against tests/mockgpu this way; `built` is None for the CPU executable).

Exit codes: 0 every owner ran and gave the CPU's bits; 1 something refused or differed; 2 it
cannot run here (no NVIDIA driver, no ptxas, an unknown card).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "gpu")]

PROBE_LEARNER = "lsq_adam"          # does not spill: its owner builds without a topology


def adam(params: list[tuple[str, str]], lr: float) -> tuple[str, str]:
    """(declarations, update statements) of Adam over `params` ((name, type) each), written as
    examples/lsq_adam.alpha writes it: beta1 0.9, beta2 0.999, eps 1e-8, bias corrections by
    scalar powers."""
    decl = ("const beta1 = 0.9\nconst beta2 = 0.999\nconst c1 = 1 - beta1\nconst c2 = 1 - beta2\n"
            f"const eps = 1e-8\nconst lr = {lr!r}\nstate p1: f64 = 1.0\nstate p2: f64 = 1.0\n")
    decl += "".join(f"state m_{n}: {t} = 0.0\nstate v_{n}: {t} = 0.0\n" for n, t in params)
    body = "  p1 = p1 * beta1\n  p2 = p2 * beta2\n"
    for n, _ in params:
        body += (f"  let g_{n} = grad({n})\n  m_{n} = beta1 * m_{n} + c1 * g_{n}\n"
                 f"  v_{n} = beta2 * v_{n} + c2 * (g_{n} * g_{n})\n"
                 f"  {n} = {n} - (lr * (m_{n} / (1 - p1))) / (sqrt(v_{n} / (1 - p2)) + eps)\n")
    return decl, body


def lsq_source(width: int, rows: int, name: str = "lsq_wide", keep: bool = True,
               where: Path | None = None, optimizer: str = "sgd", exact: bool = False) -> str:
    """Least squares with `w: f64[width]` on `rows` samples, plain gradient descent. The data are
    small dyadic rationals, so every product and sum of the first steps is exact or nearly so.
    `keep`: the prediction goes through p = w * x[i], which the loss also penalizes (0.5 p.p), so
    grad_samples reads p several times and keeps it in a .local array (from width 17 up to
    alphac.ptx.kernels.STORE_MAX): the learner uses local memory. Without it, the plain least
    squares: loops over w and x[i], no local memory at any width. `optimizer` "adam": Adam
    (lr 0.05) instead of plain gradient descent; `exact`: under `contract exact_sum`."""
    xs = [[((r * 7 + c * 3) % 11 - 5) / 8 for c in range(width)] for r in range(rows)]
    ys = [(r % 5 - 2) / 4 for r in range(rows)]
    if where is not None:       # in .npy files beside the source (a wide learner's literal is too long)
        import numpy as np
        np.save(where / f"{name}_x.npy", np.array(xs, dtype="<f8"))
        np.save(where / f"{name}_y.npy", np.array(ys, dtype="<f8"))
        data = f'data x = load("{name}_x.npy")\ndata y = load("{name}_y.npy")\n'
    else:
        data = ("data x = [" + ",\n  ".join("[" + ", ".join(map(repr, r)) + "]" for r in xs) + "]\n"
                "data y = [" + ", ".join(map(repr, ys)) + "]\n")
    loss = ("  let p = w * x[i]\n  let r = sum(p) - y[i]\n  0.5 * r^2 + 0.5 * dot(p, p)\n" if keep else
            "  let r = dot(w, x[i]) - y[i]\n  0.5 * r^2\n")
    decl, body = adam([("w", f"f64[{width}]")], 0.05) if optimizer == "adam" else ("", "  w = w - 0.05 * grad(w)\n")
    return (f"learner {name}\n{'contract exact_sum' + chr(10) if exact else ''}{data}"
            f"param w: f64[{width}] = 0.0\n{decl}loss(i) {{\n{loss}}}\nupdate {{\n{body}}}\n")


def mlp_source(inputs: int, hidden: int, classes: int, rows: int, name: str,
               where: Path | None = None, optimizer: str = "sgd") -> str:
    """An inputs-hidden-classes tanh MLP with softmax cross-entropy, plain gradient descent, on
    `rows` generated samples (small dyadic pixels, labels 0..classes-1); W1 starts uniform, b1 and
    W2 vary by coordinate, so every unit and class computes something of its own. With `where`,
    the samples in .npy files there (a wide data literal passes the 1 MiB a source may have).
    `optimizer` "adam": Adam (lr 0.01) instead."""
    vec = lambda n, f: "[" + ", ".join(repr(f(k)) for k in range(n)) + "]"      # noqa: E731
    pixel = lambda r, c: ((r * 5 + c * 3) % 17) / 16                           # noqa: E731
    if where is not None:
        import numpy as np
        np.save(where / f"{name}_x.npy", np.array([[pixel(r, c) for c in range(inputs)]
                                                   for r in range(rows)], dtype="<f8"))
        np.save(where / f"{name}_y.npy", np.array([r * 3 % classes for r in range(rows)], dtype="<f8"))
        data = f'data x = load("{name}_x.npy")\ndata y = load("{name}_y.npy")\n'
    else:
        xs = ",\n  ".join(vec(inputs, lambda c, r=r: pixel(r, c)) for r in range(rows))
        data = f"data x = [{xs}]\ndata y = [{', '.join(str(r * 3 % classes) for r in range(rows))}]\n"
    w2 = ",\n  ".join(vec(hidden, lambda h, c=c: ((c * 7 + h * 5) % 13 - 6) / 64) for c in range(classes))
    params = [("W1", f"f64[{hidden}, {inputs}]"), ("b1", f"f64[{hidden}]"),
              ("W2", f"f64[{classes}, {hidden}]"), ("b2", f"f64[{classes}]")]
    decl, body = adam(params, 0.01) if optimizer == "adam" else \
        ("", "".join(f"  {n} = {n} - 0.1 * grad({n})\n" for n, _ in params))
    return (f"learner {name}\n{data}"
            f"param W1: f64[{hidden}, {inputs}] = {1 / 1024!r}\n"
            f"param b1: f64[{hidden}] = {vec(hidden, lambda h: ((h * 5) % 9 - 4) / 32)}\n"
            f"param W2: f64[{classes}, {hidden}] = [{w2}]\nparam b2: f64[{classes}] = 0.0\n{decl}"
            "loss(i) {\n  let h = tanh(W1 @ x[i] + b1)\n  let z = W2 @ h + b2\n"
            f"  logsumexp(z) - dot(onehot(y[i], {classes}), z)\n}}\nupdate {{\n{body}}}\n")


def learner_of(width: int, rows: int, where: Path):
    """The learner lsq_wide<width>, from its source written under `where` (kept beside the
    executables, so a run's learners can be rebuilt)."""
    return spec_learner(f"kept:{width}", rows, where)[1]


LEARNER_SPECS = "lsq:W (plain least squares, w: f64[W]), kept:W (with a kept vector), mlp:I-H-C, digits"


def spec_learner(spec: str, rows: int, where: Path) -> tuple[str, object, bool]:
    """(name, learner, whether the reference interpreter is quick enough to compare with) for a
    --learners entry (LEARNER_SPECS); ValueError for anything else."""
    from alphac.driver import compile_file
    kind, _, arg = spec.partition(":")
    if kind == "digits" and not arg:
        return "digits_mlp", compile_file(ROOT / "examples" / "digits_mlp.alpha").learner, False
    try:
        dims = [int(v) for v in arg.split("-")]
    except ValueError:
        raise ValueError(f"`{spec}`: not one of {LEARNER_SPECS}") from None
    if kind in ("lsq", "kept") and len(dims) == 1 and dims[0] > 0:
        name = f"lsq_{'wide' if kind == 'kept' else 'plain'}{dims[0]}"
        text = lsq_source(dims[0], rows, name, kind == "kept", where if dims[0] * rows > 20000 else None)
    elif kind == "mlp" and len(dims) == 3 and min(dims) > 0:
        name = "mlp" + "_".join(map(str, dims))
        text = mlp_source(*dims, rows, name, where if dims[0] * rows > 20000 else None)
    else:
        raise ValueError(f"`{spec}`: not one of {LEARNER_SPECS}")
    (where / f"{name}.alpha").write_text(text)
    return name, compile_file(where / f"{name}.alpha").learner, kind != "mlp" and dims[0] * rows <= 20000


def kernels_of(lr, sm: int) -> tuple[list, float]:
    """alphac.ptx.build's kernels and ptxas's wall time for them."""
    from alphac import ptx
    from alphac.ptx.ptxas import find_ptxas
    tool = find_ptxas()
    t0 = time.monotonic()
    built = ptx.build(lr, sm, tool)
    return built, time.monotonic() - t0


def figures(built, seconds: float) -> dict:
    return {"ptxas_s": round(seconds, 2), "cubin_bytes": sum(len(b.cubin) for b in built),
            "code_bytes": sum(len(b.image.code) for b in built),
            "stack": {b.kernel.name: b.image.local for b in built},
            "registers": {b.kernel.name: b.image.registers for b in built}}


def measure(specs: list[str], sm: int, rows: int) -> int:
    """ptxas's time, the cubins' and code's bytes, the PTX lines, and each kernel's stack and
    registers, one line per learner (docs/gpu.md quotes the table)."""
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="alphac-local-measure-"))
    print(f"{'learner':<18} {'ptxas s':>8} {'cubin B':>9} {'code B':>8} {'PTX lines':>9}  "
          "stack (bytes a thread) / registers")
    for spec in specs:
        name, lr, _ = spec_learner(spec, rows, tmp)
        built, secs = kernels_of(lr, sm)
        f = figures(built, secs)
        lines = sum(b.kernel.ptx.count("\n") for b in built)
        per = ", ".join(f"{k} {f['stack'][k]}/{f['registers'][k]}" for k in sorted(f["stack"]))
        print(f"{name:<18} {f['ptxas_s']:>8.2f} {f['cubin_bytes']:>9} {f['code_bytes']:>8} {lines:>9}  {per}",
              flush=True)
    return 0


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class NoCard(Exception):
    """The card cannot be used here: (exit code, why[, the probe's record])."""


def card_host(out: Path, runner, proc: Path, minor, sm_asked) -> tuple[int, object, dict]:
    """(sm, the card's host description, the probe's record): /proc/driver/nvidia names the card,
    an owner's --probe-identity (built for a provisional host) asks the driver, and its answers,
    topology included, make the host description (written to out/host.gpuhost). NoCard(2, why)
    where nothing can run (no card, no ptxas), NoCard(1, why) when the probe fails."""
    from qualify import Unavailable, parse_probe, read_identity, sm_of
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from alphac.nvdrv import host as host_mod
    from alphac.ptx.ptxas import PtxasMissing, find_ptxas
    try:
        find_ptxas()
        ident = read_identity(proc, minor)
        sm = sm_of(ident["product"], sm_asked)
    except (Unavailable, PtxasMissing) as e:
        raise NoCard(2, f"cannot run here: {e}") from None
    provisional = host_mod.make({"uuid": ident["uuid"], "product": ident["product"][:63] or "unknown",
                                 "memory": "1 TiB", "driver": ident["driver"], "minor": ident["minor"]})
    probe = build_gpu_owner(compile_file(ROOT / "examples" / f"{PROBE_LEARNER}.alpha").learner,
                            f"x86_64+sm_{sm}", provisional)
    (out / "bin").mkdir(parents=True, exist_ok=True)
    exe = out / "bin" / "probe"
    exe.write_bytes(probe.image.elf)
    exe.chmod(0o755)
    rc, said_text, err = runner(exe, ["--probe-identity"], probe)
    said = parse_probe(said_text)
    record = {"exit": rc, "stdout": said_text, "stderr": err[-2000:]}
    if rc != 0 or not {"driver", "uuid", "product", "memory-kib", *host_mod.TOPOLOGY_NAMES} <= said.keys():
        raise NoCard(1, f"the identity probe failed: exit {rc} {err.strip()[-300:]}", record)
    host = host_mod.make({"uuid": said["uuid"], "product": said["product"], "driver": said["driver"],
                          "memory": str(int(said["memory-kib"]) * 1024), "minor": ident["minor"],
                          "topology": " ".join(said[k] for k in host_mod.TOPOLOGY_NAMES)})
    (out / "host.gpuhost").write_text(host.describe())
    return sm, host, record


def check(args, runner) -> int:
    from alphac.build import build_gpu_owner, build_learner
    from alphac.diag import BuildError, CompileError
    from alphac.ir.interp import format_state, run as interp_run
    from alphac.nvdrv import image
    out = Path(args.out)
    (out / "bin").mkdir(parents=True, exist_ok=True)
    result = {"widths": args.widths, "steps": args.steps, "rows": args.rows, "learners": [], "passed": False}

    def save():
        (out / "local.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")

    try:
        sm, host, result["probe"] = card_host(out, runner, Path(args.proc), args.minor, args.sm)
    except NoCard as e:
        code, result["why"], *probe = e.args
        result.update({"probe": p for p in probe})
        save()
        print(f"local_check: {result['why']}", file=sys.stderr)
        return code
    target = f"x86_64+sm_{sm}"
    result["target"] = target
    result["host"] = host.as_dict()
    save()
    ok = True
    for spec in [f"kept:{w}" for w in args.widths] + args.learners:
        name, row = spec, {"learner": spec, "spec": spec}
        result["learners"].append(row)
        try:
            name, lr, quick = spec_learner(spec, args.rows, out / "bin")
            row["learner"] = name
            built, secs = kernels_of(lr, sm)
            row.update(figures(built, secs))
            t0 = time.monotonic()
            gpu = build_gpu_owner(lr, target, host)
            row["build_s"] = round(time.monotonic() - t0, 2)
            cpu = build_learner(lr, "x86_64")
        except (CompileError, BuildError) as e:
            row["build"] = str(e)[-2000:]
            ok = False
            save()
            print(f"{name}: FAIL (build: {str(e).strip()[-300:]})", flush=True)
            continue
        g = gpu.gpu
        row["local"] = {"per_thread": g.local_per_thread, "per_tpc": g.local_per_tpc,
                        "area": next((a.size for a in g.allocations if a.name == "local"), 0),
                        "demand": g.demand}
        paths = {"gpu": out / "bin" / f"{name}.sm_{sm}", "cpu": out / "bin" / f"{name}.x86_64"}
        paths["gpu"].write_bytes(gpu.image.elf)
        paths["cpu"].write_bytes(cpu.elf)
        want = format_state(lr, interp_run(lr, args.steps)) if quick else None
        for kind in ("gpu", "cpu"):
            row[kind] = run_one(runner, paths[kind], args.steps, gpu if kind == "gpu" else None, want)
        row["passed"] = passed(row["gpu"], row["cpu"])
        ok = ok and row["passed"]
        save()
        print(f"{name}: {verdict(row['gpu'], row['passed'])}  build {row['build_s']} s, "
              f"stack {max(row['stack'].values())} B, "
              f"area {row['local']['area'] >> 20} MiB, ptxas {row['ptxas_s']} s, cubins {row['cubin_bytes']} B, "
              f"owner {row['gpu']['seconds']} s", flush=True)
        if not row["passed"] and g.local_per_thread and row["gpu"]["refused"] != "gpu-topology":
            # The one unconfirmed choice that could fail the hardware alone: HIGH_SIZE (tinygrad's)
            # rather than LOW_SIZE (NVK's). Tried with both set, to say which the card wants.
            image.QMD_OVERRIDES.update({"SHADER_LOCAL_MEMORY_LOW_SIZE": g.local_per_thread})
            try:
                both = build_gpu_owner(lr, target, host)
            finally:
                image.QMD_OVERRIDES.clear()
            exe = out / "bin" / f"{name}.sm_{sm}.low-and-high"
            exe.write_bytes(both.image.elf)
            row["gpu_low_and_high"] = run_one(runner, exe, args.steps, both, want)
            fine = passed(row["gpu_low_and_high"], row["cpu"])
            save()
            print(f"{name} with SHADER_LOCAL_MEMORY_LOW_SIZE = HIGH_SIZE = {g.local_per_thread}: "
                  f"{verdict(row['gpu_low_and_high'], fine)}", flush=True)
    result["passed"] = ok
    save()
    return 0 if ok else 1


def run_one(runner, exe: Path, steps: int, built, want: str) -> dict:
    exe.chmod(0o755)
    t0 = time.monotonic()
    rc, stdout, err = runner(exe, ["--steps", str(steps)], built)
    shown = stdout if len(stdout) <= 20000 else stdout[:20000] + f"... ({len(stdout)} characters)"
    return {"exit": rc, "seconds": round(time.monotonic() - t0, 2), "stdout": shown, "stdout_sha": digest(stdout),
            "refused": next((ln[9:] for ln in err.splitlines() if ln.startswith("refused: ")), None),
            "stderr": err[-1500:], "equals_interpreter": None if want is None else stdout == want}


def passed(gpu: dict, cpu: dict) -> bool:
    return (gpu["exit"] == cpu["exit"] == 0 and gpu["stdout_sha"] == cpu["stdout_sha"]
            and gpu["equals_interpreter"] is not False)


def verdict(gpu: dict, ok: bool) -> str:
    return "PASS" if ok else "FAIL (" + (f"refused: {gpu['refused']}" if gpu["refused"] else
                                         f"exit {gpu['exit']}" if gpu["exit"] else "bits differ") + ")"


def run_exe(exe: Path, args: list[str], built, timeout: float = 60) -> tuple[int, str, str]:
    import subprocess
    try:
        p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"local_check: killed after {timeout:g} s\n"
    return p.returncode, p.stdout, p.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the results directory")
    ap.add_argument("--widths", default=None,
                    help="comma-separated widths of w (default 128,512,2048; --measure: 64 .. 65536)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--minor", type=int, default=None)
    ap.add_argument("--sm", type=int, choices=(86, 90), default=None)
    ap.add_argument("--owner-timeout", type=float, default=60)
    ap.add_argument("--runner", help="FILE.py:FUNCTION that runs each executable (a test hook)")
    ap.add_argument("--learners", default="", help=f"more learners, comma-separated: {LEARNER_SPECS}")
    ap.add_argument("--measure", action="store_true", help="only ptxas time and cubin size per learner")
    ap.add_argument("--proc", default="/proc/driver/nvidia", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    import re
    try:
        args.widths = [int(w) for w in (args.widths or ("64,256,1024,4096,16384,65536" if args.measure
                                                        else "128,512,2048")).split(",")]
    except ValueError:
        ap.error("--widths takes whole numbers separated by commas")
    args.learners = [x for x in args.learners.split(",") if x]
    for spec in args.learners:
        if not re.fullmatch(r"(lsq|kept):[1-9]\d*|mlp:[1-9]\d*-[1-9]\d*-[1-9]\d*|digits", spec):
            ap.error(f"--learners: `{spec}` is not one of {LEARNER_SPECS}")
    if args.measure:            # by default: plain and kept least squares, 64 .. 65,536 wide
        specs = args.learners or [f"{k}:{w}" for k in ("lsq", "kept") for w in args.widths]
        return measure(specs, args.sm or 90, args.rows)
    if not args.out:
        ap.error("--out DIR is required (unless --measure)")
    import functools
    from qualify import load_runner
    return check(args, load_runner(args.runner, functools.partial(run_exe, timeout=args.owner_timeout)))


if __name__ == "__main__":
    sys.exit(main())
