"""Differential testing of one learner: every way alphac can run it must print the same bits.

`check_text(source, work)` compiles a learner file with its deployments and runs it

    interp        the reference interpreter, 5 steps (and 3)
    plan:D        deployment D's plan in the plan executor (alphac.dist.execute)
    ptx           the GPU owner's kernels (alphac.ptx) in the tests' PTX interpreter, 5 steps
    x86_64        the single-process executable: 5 steps; 3 + --checkpoint, then 2 + --resume
    x86_64-v3     the same at the AVX2 level (natively, or under qemu-x86_64 -cpu max where the
                  host lacks AVX2), and resumed from the x86-64 checkpoint
    x86_64-v4     the same at the AVX-512 level, natively; on a CPU without AVX-512 (which qemu
                  does not emulate) every run must refuse `cpu-level` instead
    aarch64       the same under qemu-aarch64, and resumed from the x86-64 checkpoint
    roles:D       deployment D's role executables on loopback (its own targets, mixed ISAs
                  included): 5 steps; 3 + checkpoint, then 2 resumed
    moved:D       the x86-64 executable's 3-step checkpoint resumed by D's roles for 2 steps,
                  and each other star deployment's 3-step checkpoint resumed by D's roles
    gpu           a copy of the first deployment with GPU owners under the mock driver (their
                  kernels in the PTX interpreter, local memory set up for a kernel that keeps
                  vectors there); a learner over PTX_BUDGET (wide ones) instead has its GPU
                  owners built through ptxas, their stacks checked against the local-memory
                  area (the engine `gpu-built`: `gpu-built: sm_NN`); and the learner's single
                  GPU owner on the sm_90 card, run under the mock as drawn below (`gpu: ...`)

The gpu engine's choices are drawn per learner from its name (`fuzzSEED`, so a failing seed, and
the reducer's edits of it, replay them: `gpu_draw`): the single owner's `--shadow full` or
`--shadow sampled` (where `alphac.ptx.abi.can_sample` takes the learner; a sampled owner of one
it does not take must be refused `usage`, and the full one then gives the bits), `--shadow-rate`
1, 2 or 8 under sampled with getrandom's answers drawn too, and under sampled now and then
`alphac verify-record EVENTS --replay 5 --learner FILE` on its events (exit 0); and each card's
`map` (alphac.nvdrv.host CHOICES: uvm or rm), written into its host file, which the GPU roles,
the single owner and `gpu-built` read. Every label of a gpu engine's run names the draw.

and compares each with what the contract says, computed here from the interpreter's primitive
operations (an owner's (G, n), a combine, the update) by a driver written in this file: for the
single-process engines the interpreter's own run; for a deployment, its owners' sample ranges
and its combine tree (`expected`); under `contract exact_sum` one exact sum over every sample
of the step (`exact_contribution`, Fractions), whatever the deployment. Outcomes are the
printed state, or `refused: NAME`; any compiler exception is a `crash:` outcome, and so a
disagreement.

`check_program(prog, work)` first drops the deployments the compiler refuses (each refusal is
a named diagnostic, never a traceback), then checks what is left. A `Report` says whether the
program was refused (with the diagnostic code), agreed, or disagreed (with each problem).

Data loaded from .npy files (`data x = load("x.npy")`): the files go beside the learner file
(`check_text(..., files=)`, written by `check_program` from the generator's `npy_files`, read
beside a regression file by `check_file`), and the contract's model reads their values itself
with numpy (`model`), not the compiler's: a compiler that read other values is a `data:` problem
and disagrees in every engine.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from conftest import require_tool

ALL = ("interp", "plan", "ptx", "x86_64", "x86_64-v3", "x86_64-v4", "aarch64", "roles", "moved", "gpu",
       "gpu-built", "fleet")
# "gpu": a copy of a program's first deployment with owner[0] an sm_90 (its host part at the
# level the deployment drew, if any) and its last owner an sm_86 GPU owner, each under its own mock driver (tests/mockgpu/wrap.py), launched, resumed,
# and resumed from the CPU deployment's checkpoint
GPU_CARDS = {"a.gpuhost": ("GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a", "NVIDIA H200", 90, 0),
             "c.gpuhost": ("GPU-11111111-2222-3333-4444-555555555555", "NVIDIA GeForce RTX 3090", 86, 1)}
FAST = ("interp", "plan")
STEPS, FIRST = 5, 3
PTX_BUDGET = 55_000     # kernel lines x samples x (the widest param or row / 64): larger
                        # learners are too slow for the PTX interpreter (the ptx engine skips
                        # them; the gpu engine builds their owners through ptxas only:
                        # gpu_built; `make fuzz` says how many). 55,000 since tanh's PTX text
                        # grew by its lean path (EXACT_REDUCED's three tanh: 49,657 -> 51,445)


@dataclass(frozen=True)
class GpuDraw:
    """How the gpu engine drives its cards for one learner (module docstring): the single
    owner's shadow policy and rate, getrandom's answers to it, each card's host choices (every
    row of alphac/nvdrv/host.py CHOICES, `key value` pairs, in GPU_CARDS' order), and whether its
    chain is replayed."""
    shadow: str = "full"
    rate: int = 0                       # --shadow-rate under sampled
    draws: bytes = b""
    cards: tuple[tuple[tuple[str, str], ...], ...] = ((), ())     # () : every choice its default
    replay: bool = False

    def cards_text(self) -> str:                # what the GPU roles run with
        return ", ".join(f"{name} {choices_text(c)}" for name, c in zip(GPU_CARDS, self.cards))

    def owner_text(self) -> str:                # what the single owner runs with
        return (f"{next(iter(GPU_CARDS))} {choices_text(self.cards[0])}, --shadow {self.shadow}"
                + (f" --shadow-rate {self.rate}" if self.rate else ""))


def choices_text(choices) -> str:
    return " ".join(f"{k} {v}" for k, v in choices) or "defaults"


def gpu_draw(name: str) -> GpuDraw:
    """The gpu engine's draw for the learner `name`, from streams of its own: each card's `map`
    either way, each other host choice (from a second stream) at a value other than its default
    one time in three."""
    from alphac.nvdrv.host import CHOICES
    r, more = random.Random(f"gpu {name}"), random.Random(f"gpu choices {name}")
    maps = [r.choice(CHOICES["map"][0]) for _ in GPU_CARDS]
    cards = tuple(tuple((k, m if k == "map" else more.choice(vs[1:]) if more.random() < 1 / 3 else vs[0])
                        for k, (vs, _) in CHOICES.items()) for m in maps)
    if r.random() < 0.5:
        return GpuDraw(cards=cards)
    return GpuDraw("sampled", r.choice((1, 2, 8)), r.randbytes(8 * STEPS), cards, r.random() < 0.5)


@dataclass
class Report:
    source: str
    status: str = "agreed"                    # refused | agreed | disagreed
    code: str = ""                            # the diagnostic code of a refused program
    outcomes: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    refused_deployments: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)          # engines not run, and why
    files: dict[str, bytes] = field(default_factory=dict)   # the .npy files beside the source

    def problem(self, text: str) -> None:
        self.problems.append(text)
        self.status = "disagreed"

    def summary(self) -> str:
        return "\n".join(self.problems)


# -- what the contract says -------------------------------------------------------------------
def expected(lr, history) -> str:
    """The state after `history`, a list of (steps, deployment or None for one process), for
    the learner `lr` (check_text passes `model`'s: loaded data as numpy reads the files)."""
    from alphac.dist.execute import evaluate_tree
    from alphac.ir import interp
    from alphac.refusals import Refusal
    from alphac.ir.order import step_samples
    if sum(steps for steps, _ in history) and labels_out_of_range(lr):
        return "refused: data-label"
    state = interp.initial_state(lr)
    t = 0                                        # the step: minibatches follow it across resumes
    for steps, dep in history:
        for _ in range(steps):
            grads = {}
            held = lambda lo, hi, t=t: step_samples(range(lo, hi), lr.nsamples, lr.batch,
                                                    lr.shuffle, t)
            t += 1
            if lr.loss is not None and lr.exact:      # no split or tree matters
                combined = exact_contribution(lr, state, held(0, lr.nsamples))
                grads = interp.mean_gradient(combined)
            elif lr.loss is not None:
                if dep is None:
                    combined = interp.owner_contribution(lr, state, held(0, lr.nsamples))
                else:
                    contribs = [interp.owner_contribution(lr, state, held(*dep.samples.range(k)))
                                for k in range(dep.owners)]
                    combined = evaluate_tree(dep.combine_tree(), contribs)
                grads = interp.mean_gradient(combined)
            state = interp.apply_update(lr, state, grads, t - 1)   # step t - 1's clock
    try:
        return interp.format_state(lr, state)
    except Refusal as r:
        return f"refused: {r.name}"


def labels_out_of_range(lr) -> bool:
    """Whether a label that `onehot(NAME[i], K)` reads, or an index `E[NAME[i]]` of an E of K rows
    (a data row, or an element of one), is not a whole number from 0 to K-1: the contract refuses
    the run (`data-label`) before a step."""
    from alphac.ir.learner import DataRow, Gather, OneHot, Pick, postorder
    data = {d.name: d for d in lr.data}
    for n in postorder([x for x in (lr.loss, lr.predict) if x is not None]):
        lab = n.k if isinstance(n, Gather) else getattr(n, "a", None)
        a, col = (lab.a, lab.k) if isinstance(n, (OneHot, Gather)) and isinstance(lab, Pick) else (lab, 0)
        if isinstance(n, (OneHot, Gather)) and isinstance(a, DataRow):
            d, k = data[a.name], (n.a.shape[0] if isinstance(n, Gather) else n.shape[0])
            width = len(d.values) // d.shape[0]
            if any(not (-1 < v < k and v == round(v)) for v in list(d.values)[col::width]):
                return True
    return False


def exact_contribution(lr, state, samples):
    """exact_sum's (G, n) over `samples`: each sample's gradient (alphac.ir.batch, the bits of
    one operation at a time: tests/test_interp_fast.py), each coordinate's terms summed by
    `oracle.exact_sum` (Fractions, rounded once)."""
    from alphac.ir.batch import gradient_rows
    from oracle import exact_sum
    rows = [r for chunk in gradient_rows(lr, state, samples) for r in chunk.tolist()]
    if not rows:
        return None
    out, base = {}, 0
    for p in lr.params:
        out[p.name] = tuple(exact_sum([r[base + j] for r in rows]) for j in range(p.size))
        base += p.size
    return out, len(rows)


LOAD = re.compile(r'^data\s+(\w+)\s*(?::[^=]*)?=\s*load\("([^"]*)"\)', re.M)


def loads(text: str) -> dict[str, str]:
    """The data a learner file loads: {data name: .npy path, relative to the file}."""
    return dict(LOAD.findall(text))


def model(lr, text: str, base: Path):
    """The learner the contract's model runs: `lr` with each loaded data array's values as numpy
    reads them from its file (binary64, C order), independently of the compiler's reader."""
    import dataclasses
    import numpy as np
    files = loads(text)
    data = []
    for d in lr.data:
        if d.name in files:
            arr = np.load(base / files[d.name], allow_pickle=False)
            d = dataclasses.replace(d, shape=tuple(int(k) for k in arr.shape), file=None,
                                    literal=tuple(float(v) for v in arr.astype("<f8").reshape(-1)))
        data.append(d)
    return dataclasses.replace(lr, data=data)


def data_problems(rep: Report, lr, contract) -> None:
    """A loaded array the compiler read otherwise than numpy reads its file."""
    import struct
    for d, m in zip(lr.data, contract.data):
        bits = lambda v: struct.pack(f"<{len(v)}d", *v)
        if d.shape != m.shape or bits(d.values) != bits(m.values):
            rep.problem(f"data: `{d.name}`: the compiler read shape {d.shape}, the file holds "
                        f"{m.shape}, or other values")


def finite(outcome: str) -> bool:
    return not outcome.startswith(("refused:", "crash:", "failed:"))


# -- running things ----------------------------------------------------------------------------
def guarded(fn) -> str:
    """An engine's outcome; a Python exception from the compiler is a crash."""
    from alphac.refusals import Refusal
    try:
        return fn()
    except Refusal as r:
        return f"refused: {r.name}"
    except Exception:
        return "crash: " + traceback.format_exc(limit=6).strip().splitlines()[-1]


def exe_outcome(proc) -> str:
    if proc.returncode == 0:
        return proc.stdout
    refused = [l for l in proc.stderr.splitlines() if l.startswith("refused: ")]
    if refused and proc.returncode > 0:
        return refused[0].split(" (")[0]          # the name; its detail is the engines' own
    return f"crash: exit {proc.returncode} {proc.stderr[-200:]!r}"


def runner(target: str) -> list[str]:
    """The command prefix an executable of `target` runs under here: qemu-aarch64 for AArch64,
    qemu-x86_64 -cpu max for x86_64-v3 where this CPU lacks AVX2, else nothing."""
    if target == "aarch64":
        return [require_tool("qemu-aarch64")]
    from alphac.targets import host_runs
    if target == "x86_64-v3" and not host_runs(target):
        return [require_tool("qemu-x86_64"), "-cpu", "max"]
    return []


def run_exe(path: Path, target: str, *args) -> str:
    cmd = runner(target) + [str(path), *map(str, args)]
    return exe_outcome(subprocess.run(cmd, capture_output=True, text=True, timeout=120))


def launch_outcome(record: dict) -> str:
    if record["passed"]:
        return record["published"]
    bad = [r for r in record["roles"] if r["exit"] != 0          # not those the launcher ended
           and not (r.get("detail") or "").startswith("ended when")]
    names = sorted({r["refused"] for r in bad if r["refused"]})
    if len(names) == 1 and all(r["refused"] for r in bad):
        return f"refused: {names[0]}"
    return "failed: " + ", ".join(f"{r['role']} exit {r['exit']} {r['refused'] or ''}".strip()
                                  for r in bad)


def compare(rep: Report, label: str, got: str, want: str) -> None:
    rep.outcomes[label] = got
    if got != want:
        rep.problem(f"{label} differs from the contract:\n  want {first_difference(want, got)[0]}\n"
                    f"  got  {first_difference(want, got)[1]}")


def first_difference(a: str, b: str) -> tuple[str, str]:
    la, lb = a.splitlines(), b.splitlines()
    for x, y in zip(la, lb):
        if x != y:
            return x, y
    return (la[len(lb)] if len(la) > len(lb) else "<end>",
            lb[len(la)] if len(lb) > len(la) else "<end>")


# -- one learner file ----------------------------------------------------------------------------
def check_text(text: str, work: Path, engines=ALL, files: dict[str, bytes] | None = None,
               gpu: GpuDraw | None = None) -> Report:
    """Every engine in `engines` against the contract, for the learner file `text`, with `files`
    ({relative path: bytes}, the .npy files it loads) beside it; with `gpu`, a GPU deployment's
    labels name that draw and its single owner runs so (else only its roles run)."""
    from alphac.diag import CompileError
    from alphac.driver import compile_deployments
    rep = Report(text, files=dict(files or {}))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "learner.alpha"
    for name, raw in rep.files.items():
        (work / name).write_bytes(raw)
    src.write_text(text)
    try:
        compiled, plans = compile_deployments(src)
    except CompileError as e:
        errors = [d for d in e.diagnostics if d.severity == "error"]
        rep.status, rep.code = "refused", errors[0].code if errors else "?"
        return rep
    except Exception:
        rep.problem("crash: the compiler raised " + traceback.format_exc(limit=8))
        return rep
    lr = compiled.learner
    try:
        contract = model(lr, text, work)             # the loaded data as numpy reads them
        data_problems(rep, lr, contract)
    except Exception as e:
        rep.problem(f"data: the compiler loaded a file numpy does not read: {e}")
        contract = lr
    want5 = expected(contract, [(STEPS, None)])
    want3 = expected(contract, [(FIRST, None)])
    if "interp" in engines:
        from alphac.ir import interp
        compare(rep, "interp", guarded(lambda: interp.format_state(lr, interp.run(lr, STEPS))), want5)
    deps = {name: plan.dep for name, plan in sorted(plans.items())}
    if "plan" in engines:
        from alphac.dist.execute import run_plan
        from alphac.ir.interp import format_state
        for name, plan in sorted(plans.items()):
            compare(rep, f"plan:{name}", guarded(lambda: format_state(lr, run_plan(lr, plan, STEPS))),
                    expected(contract, [(STEPS, deps[name])]))
    if "ptx" in engines and not gpu_refuses(rep, lr) and not too_large(rep, lr):
        compare(rep, "ptx", guarded(lambda: run_ptx(lr)), want5)
    single = {}
    from alphac.targets import host_runs
    for target in ("x86_64", "x86_64-v3", "x86_64-v4", "aarch64"):
        if target not in engines:
            continue
        w3, w5 = ("refused: cpu-level",) * 2 if target == "x86_64-v4" and not host_runs(target) \
            else (want3, want5)                                   # (no AVX-512 here: refused)
        got = guarded(lambda: build_single(lr, target, work))
        if got.startswith(("crash:", "refused:")):
            rep.problem(f"{target}: the build failed: {got}")
            continue
        exe = Path(got)
        single[target] = exe
        compare(rep, f"{target}", run_exe(exe, target, "--steps", STEPS), w5)
        ck = work / f"ck-{target}"
        shutil.rmtree(ck, ignore_errors=True)
        compare(rep, f"{target} 3 steps, checkpoint", run_exe(exe, target, "--steps", FIRST,
                                                               "--checkpoint", ck), w3)
        if finite(w3):
            compare(rep, f"{target} resumed 2 steps", run_exe(exe, target, "--steps", STEPS - FIRST,
                                                              "--resume", ck), w5)
        if target != "x86_64" and finite(w3) and (work / "ck-x86_64" / "MANIFEST").exists():
            compare(rep, f"{target} resumed from x86_64's checkpoint",
                    run_exe(exe, target, "--steps", STEPS - FIRST, "--resume", work / "ck-x86_64"), w5)
    if {"roles", "moved", "fleet", "gpu"} & set(engines):
        for name, plan in sorted(plans.items()):
            check_roles(rep, src, name, plan, contract, work, engines, single.get("x86_64"), deps, gpu)
    return rep


def check_file(path: Path, work: Path, engines=ALL) -> Report:
    """`check_text` for a learner file on disk (a regression file), with the .npy files it
    loads read from beside it."""
    text = Path(path).read_text()
    files = {rel: (Path(path).parent / rel).read_bytes() for rel in loads(text).values()}
    return check_text(text, work, engines, files)


def gpu_refuses(rep: Report, lr) -> bool:
    """Whether the GPU owner kernels refuse this learner (BuildError): now a problem for any
    learner the checker takes (alphac.ptx.kernels has every operation)."""
    from alphac.diag import BuildError
    from alphac.ptx.kernels import kernels
    try:
        kernels(lr)
        return False
    except BuildError as e:
        rep.problem(f"ptx: the GPU kernels refused a learner the checker takes: {e}")
        return True
    except Exception:
        return False                            # run_ptx reports it as a crash


def too_large(rep: Report, lr) -> bool:
    """Whether lr's kernels are over PTX_BUDGET for the PTX interpreter (noted in the report):
    their lines, times the samples, times the widest param or data row over 64 (the kernels'
    loops run over the widths, so their length does not grow with them)."""
    from alphac.ptx.kernels import SUM_LOADERS, SUM_STAGE, kernels
    widest = max([p.size for p in lr.params] + [d.cols for d in lr.data] + [1])
    lines = {k.name: k.ptx.count("\n") for k in kernels(lr)}      # owner_sum's text: a stage's
    lines["owner_sum"] = -(-lines.get("owner_sum", 0) * (1 + SUM_LOADERS) // SUM_STAGE)  # terms, by its warps
    once = sum(lines.pop(k, 0) for k in ("reduce", "reduce_add", "reduce_round", "scalars"))   # not per sample
    cost = (sum(lines.values()) * max(1, lr.nsamples or 0) + once) * max(1, widest // 64)
    if cost > PTX_BUDGET:
        rep.skipped.append(f"ptx, gpu: {cost} kernel lines x samples, over {PTX_BUDGET}")
    return cost > PTX_BUDGET


def run_ptx(lr) -> str:
    """The GPU owner's step (gpu/ptx_host.py) with its kernels run by the PTX interpreter, after
    the labels and indices are checked as the owner's executable checks its rows (data-label)."""
    from alphac.ir.interp import check_labels, format_state
    from ptx_host import Owner
    from alphac.ptx.kernels import kernels
    from ptx_interp import InterpDevice
    check_labels(lr)
    owner = Owner(InterpDevice(), lr, kernels(lr))
    for t in range(STEPS):
        owner.step(t)
    return format_state(lr, owner.read_state())


def build_single(lr, target: str, work: Path) -> str:
    from alphac.build import build_learner
    path = work / f"single.{target}"
    path.write_bytes(build_learner(lr, target).elf)
    os.chmod(path, 0o755)
    return str(path)


def gpu_host_text(name: str, choices=()) -> str:
    """A card's host description, with the mock card's topology (a kernel that keeps vectors
    in local memory has its area sized from it) and its host choices (`key value` pairs)."""
    from mockgpu.driver import TOPOLOGY
    uuid, product, sm, minor = GPU_CARDS[name]
    return (f"uuid {uuid}\nproduct {product}\nmemory 24 GiB\ndriver 580.159.04\nminor {minor}\n"
            f"topology {' '.join(map(str, TOPOLOGY[sm]))}\n" + "".join(f"{k} {v}\n" for k, v in choices))


def gpu_here() -> bool:
    import shutil as _sh
    import mockgpu
    return not ((_sh.which("ptxas") is None and not os.environ.get("ALPHAC_PTXAS")) or mockgpu.available())


def gpu_built(rep: Report, lr, cards=((), ())) -> None:
    """A learner over PTX_BUDGET on GPU owners without the PTX interpreter: the owner built for
    each card (ptxas, the memory plan admitted, the conversation, the executable with its host
    shadow), and each kernel that keeps vectors in local memory checked against the area its
    setup push buffer sets up, by the mock GPU's own rule (`Gpu.local_frames`, over the setup's
    methods and the kernel's QMD). An outcome per card: its stacks, or what failed; a learner
    whose owner needs more than the card's memory is refused E0120 by name (its local memory is
    sized for every thread the card can hold), noted and not a disagreement."""
    from alphac.build import build_gpu_owner
    from alphac.diag import CompileError
    from alphac.nvdrv import abi, host as host_mod
    from alphac.nvdrv.image import STACK_TOP
    from mockgpu.gpu import Channel, Gpu, GpuMemory
    from nvdrv_decode import unpack_qmd
    for (name, (_, _, sm, _)), choices in sorted(zip(GPU_CARDS.items(), cards)):
        def check() -> str:
            host = host_mod.make(dict(line.split(" ", 1) for line in gpu_host_text(name, choices).splitlines()))
            try:
                built = build_gpu_owner(lr, f"x86_64+sm_{sm}", host)
            except CompileError as e:
                if e.diagnostics[0].code != "E0120":
                    raise
                return f"refused: E0120: {e.diagnostics[0].message}"
            img, errors, mem = built.gpu, [], GpuMemory()
            for a in img.memories:
                mem.map(a.va, a.size, type("Pages", (), {"mm": bytearray(a.size if a.where.startswith("sysmem")
                                                                         else 0)})())
            gpu = Gpu(img.arch, [], mem, errors, host.topology.values)
            ch = Channel(0, 0, 0, 0, None, 0, None)
            ch.compute = abi.CLASSES[img.arch.compute]    # the compute and copy objects the setup binds
            ch.copy = abi.CLASSES[img.arch.dma_copy]
            gpu.pushbuf(ch, img.setup_pushbuf)
            stacks = []
            for b, la in zip(built.kernels, img.launches):
                if b.image.local:
                    q = unpack_qmd(abi.QMD_LAYOUTS[img.arch.qmd], la.qmd)
                    if gpu.local_frames(ch, la.kernel, b.image.local, q, STACK_TOP) is None:
                        break
                    stacks.append(f"{la.kernel} {b.image.local} B")
            return "; ".join(errors) if errors else f"built, local memory: {', '.join(stacks) or 'none'}"
        rep.outcomes[f"gpu-built: sm_{sm}"] = got = guarded(check)
        if got.startswith("refused: E0120"):
            rep.skipped.append(f"gpu-built: sm_{sm}: {got}")
        elif not got.startswith("built"):
            rep.problem(f"gpu-built: sm_{sm} ({choices_text(choices)}): {got}")


def gpu_variant(prog, lr, kept: list, src: Path):
    """The first deployment with GPU owners (owner[0] on sm_90, its host part at the level the
    deployment gives its CPU owners, if any; the last owner on sm_86), when
    the GPU kernels take the learner, it is within PTX_BUDGET, and ptxas and the mock driver
    are here; else None."""
    import learngen
    from alphac.diag import BuildError
    if not gpu_here():
        return None
    try:
        if too_large(Report(""), lr):
            return None
    except BuildError:
        return None
    from alphac.targets import host_runs
    d = kept[0]
    owners = next(int(m.group(1)) for m in [re.search(r"owner\[(\d+)\]", d.items[0])])
    items = [it for it in d.items if not it.startswith("target ")]
    last = owners - 1
    # owner[0]'s host part at the level learngen drew for the deployment's CPU owners, if any
    # (x86_64-v3+sm_90: its shadow in AVX2's lanes), where this CPU runs it natively
    level = next((it.rpartition(" = ")[2] for it in d.items if it.startswith("target ") and
                  it.endswith(("x86_64-v3", "x86_64-v4"))), "x86_64")
    level = level if host_runs(level) else "x86_64"
    if last:
        items += [f"target owner[0] = {level}+sm_90, owner[{last}] = x86_64+sm_86",
                  f'gpu owner[0] = "a.gpuhost", owner[{last}] = "c.gpuhost"']
    else:
        items += [f"target owner[0] = {level}+sm_90", 'gpu owner[0] = "a.gpuhost"']
    return learngen.Deployment(d.name + "_gpu", items)


def gpu_wrapper(lr, work: Path) -> list[str]:
    """The mock driver's wrapper and its configuration: the two cards, both SMs' kernels."""
    import pickle
    import sys
    from alphac.build import gpu_kernels
    from mockgpu import Card
    from mockgpu.wrap import config
    from alphac.nvdrv import host as host_mod
    cards = []
    for k, name in enumerate(GPU_CARDS):
        h = host_mod.make(dict(line.split(" ", 1) for line in gpu_host_text(name).splitlines()))
        cards.append(Card(uuid=h.uuid, name=h.product, driver=h.driver, sm=GPU_CARDS[name][2],
                          minor=h.minor, memory=h.memory, gpu_id=0x1800 + 0x100 * k, device_instance=k))
    (work / "kernels.pickle").write_bytes(pickle.dumps([gpu_kernels(lr, sm)[0] for sm in (86, 90)]))
    (work / "gpu-logs").mkdir(exist_ok=True)
    import json
    (work / "cards.json").write_text(json.dumps(config(cards, str(work / "kernels.pickle"), str(work / "gpu-logs"))))
    return [sys.executable, str(Path(__file__).parent / "mockgpu" / "wrap.py"), str(work / "cards.json")]


def check_roles(rep: Report, src: Path, name: str, plan, contract, work: Path, engines, single,
                deps: dict, gpu: GpuDraw | None = None) -> None:
    from alphac.dist.structure import Star
    from alphac.tools.launch import launch
    from backend import build_deployment
    dep = plan.dep
    extra, drawn = {}, ""
    if dep.gpus:                       # the GPU copy: its owners under the mock
        if "gpu" not in engines:
            return
        extra["gpu_wrapper"] = gpu_wrapper(plan.lr, work)
        drawn = f" ({gpu.cards_text()})" if gpu else ""
        if gpu:
            check_gpu_owner(rep, plan.lr, src, work, expected(contract, [(STEPS, None)]), gpu)
    elif not {"roles", "moved", "fleet"} & set(engines):
        return                         # nothing would run its roles: not built
    out = work / "roles"
    try:
        dep_dir = build_deployment(src, name, out, plan=plan)
    except Exception:
        rep.problem(f"roles:{name}: the build failed: " + traceback.format_exc(limit=6))
        return
    runs = work / "runs"
    want5 = expected(contract, [(STEPS, dep)])
    want3 = expected(contract, [(FIRST, dep)])

    def go(steps, **kw) -> str:
        return guarded(lambda: launch_outcome(launch(dep_dir, steps=steps, records=runs, **extra, **kw)))
    if "roles" in engines or extra:
        compare(rep, f"roles:{name}{drawn}", go(STEPS), want5)
        ck = work / f"ck-{name}"
        shutil.rmtree(ck, ignore_errors=True)
        compare(rep, f"roles:{name} 3 steps, checkpoint{drawn}", go(FIRST, checkpoint=ck), want3)
        if finite(want3):
            compare(rep, f"roles:{name} resumed 2 steps{drawn}", go(STEPS - FIRST, resume=ck), want5)
    if ("moved" in engines or extra) and isinstance(dep.topology, Star):
        ck = work / "ck-x86_64"
        if single is not None and (ck / "MANIFEST").exists() and finite(expected(contract, [(FIRST, None)])):
            compare(rep, f"moved:{name} (single's checkpoint, 2 steps){drawn}", go(STEPS - FIRST, resume=ck),
                    expected(contract, [(FIRST, None), (STEPS - FIRST, dep)]))
        for other, odep in sorted(deps.items()):             # checkpoints of the stars before
            ck = work / f"ck-{other}"
            if other < name and isinstance(odep.topology, Star) and (ck / "MANIFEST").exists() \
                    and finite(expected(contract, [(FIRST, odep)])):
                compare(rep, f"moved:{name} ({other}'s checkpoint, 2 steps){drawn}",
                        go(STEPS - FIRST, resume=ck), expected(contract, [(FIRST, odep), (STEPS - FIRST, dep)]))
    if "fleet" in engines and not dep.gpus:
        check_fleet(rep, src, name, plan, work, want5, want3, go)
    shutil.rmtree(runs, ignore_errors=True)


def check_gpu_owner(rep: Report, lr, src: Path, work: Path, want5: str, gpu: GpuDraw) -> None:
    """The learner's single GPU owner on the sm_90 card (a.gpuhost, its drawn host choices) under the
    mock, 5 steps with the drawn shadow policy: the contract's bits; under sampled, a learner
    can_sample refuses is refused `usage` (and runs full), and a replayed chain exits 0."""
    from alphac.build import build_gpu_owner
    from alphac.nvdrv import host as host_mod
    from alphac.ptx.abi import can_sample
    from conftest import alphac
    import mockgpu
    name = next(iter(GPU_CARDS))
    label = f"gpu: the single owner on sm_90 ({gpu.owner_text()})"
    host = host_mod.make(dict(line.split(" ", 1) for line in gpu_host_text(name, gpu.cards[0]).splitlines()))
    built = guarded(lambda: build_gpu_owner(lr, "x86_64+sm_90", host))
    if isinstance(built, str):
        rep.problem(f"{label}: the build failed: {built}")
        return
    exe = work / "single.gpu"
    exe.write_bytes(built.image.elf)
    os.chmod(exe, 0o755)
    card = mockgpu.Card(uuid=host.uuid, name=host.product, driver=host.driver, sm=90,
                        minor=host.minor, memory=host.memory)

    def run(*shadow) -> tuple[str, str]:
        r = mockgpu.run(exe, ["--steps", STEPS, *shadow], card=card, kernels=built.kernels,
                        draws=gpu.draws or None)
        return (exe_outcome(r) if not r.errors else f"failed: the mock: {r.errors[0]}"), r.events
    sampled = gpu.shadow == "sampled"
    if sampled and not can_sample(lr):
        compare(rep, f"{label}, refused", run("--shadow", "sampled", "--shadow-rate", gpu.rate)[0],
                "refused: usage")
        sampled = False
    got, events = run(*(("--shadow", "sampled", "--shadow-rate", gpu.rate) if sampled else ()))
    compare(rep, label, got, want5)
    if sampled and gpu.replay and finite(want5):
        (work / "single.gpu.events").write_text(events)
        code, out, err = alphac("verify-record", work / "single.gpu.events", "--replay", STEPS,
                                "--learner", src)
        compare(rep, f"{label}, its chain replayed", f"exit {code}" + (f": {err.strip()}" if code else ""),
                "exit 0")


def check_fleet(rep: Report, src: Path, name: str, plan, work: Path, want5: str, want3: str, go) -> None:
    """The deployment built one executable per index node (alphac.lower.fleet): 5 steps, and
    2 steps resumed from the per-role build's checkpoint; what it does not build is skipped."""
    from alphac.diag import BuildError
    from alphac.tools.launch import launch
    from backend import build_deployment
    try:
        fdir = build_deployment(src, name, work / "fleet", fleet=True, plan=plan)
    except BuildError as e:
        rep.skipped.append(f"fleet:{name}: {e}")
        return
    except Exception:
        rep.problem(f"fleet:{name}: the build failed: " + traceback.format_exc(limit=6))
        return

    def fgo(steps, **kw) -> str:
        return guarded(lambda: launch_outcome(launch(fdir, steps=steps, records=work / "runs", **kw)))
    compare(rep, f"fleet:{name}", fgo(STEPS), want5)
    ck = work / f"ck-{name}"
    if finite(want3) and (ck / "MANIFEST").exists():
        compare(rep, f"fleet:{name} resumed 2 steps from the roles' checkpoint",
                fgo(STEPS - FIRST, resume=ck), want5)


def check_program(prog, work: Path, engines=ALL, seed: int | None = None) -> Report:
    """A generated program: its learner, then each deployment the compiler accepts. A program
    whose `expect` is (code, text), with text still in it, must be refused with that code
    (`checker:` if it is accepted, `checker-code:` if refused otherwise, two kinds of problem
    for the reducer)."""
    import learngen
    from alphac.diag import CompileError
    from alphac.driver import compile_deployments, compile_file
    work.mkdir(parents=True, exist_ok=True)
    src = work / "learner.alpha"
    files = learngen.npy_files(prog)                # the .npy files it loads, beside it
    deps = list(prog.deployments)
    prog.deployments = []
    learngen.write(prog, src)
    code, text = prog.expect if prog.expect and prog.expect[1] in learngen.render(prog) else ("", "")
    try:
        lr = compile_file(src).learner
    except CompileError as e:
        rep = check_text(learngen.render(prog), work, engines, files)     # refused, with its code
        codes = sorted({d.code for d in e.diagnostics if d.severity == "error"})
        if code and code not in codes:
            rep.problem(f"checker-code: `{text}` must be refused {code}, refused {', '.join(codes)}")
        return rep
    except Exception:
        rep = Report(learngen.render(prog), files=files)
        rep.problem("crash: the compiler raised " + traceback.format_exc(limit=8))
        return rep
    if seed is not None and not deps:
        learngen.add_deployments(prog, lr, seed)
        deps = list(prog.deployments)
    kept, refused = [], []
    for d in deps:
        prog.deployments = [d]
        learngen.write(prog, src)
        try:
            compile_deployments(src)
            kept.append(d)
        except CompileError as e:
            refused.append(e.diagnostics[0].code)
        except Exception:
            rep = Report(learngen.render(prog), files=files)
            rep.problem(f"crash: the compiler raised on deployment {d.name}: " + traceback.format_exc(limit=8))
            return rep
    gpu = gpu_variant(prog, lr, kept, src) if "gpu" in engines and kept else None
    draw = gpu_draw(prog.name)
    if gpu is not None:
        kept.append(gpu)
        files.update({name: gpu_host_text(name, c).encode() for name, c in zip(GPU_CARDS, draw.cards)})
    prog.deployments = kept
    rep = check_text(learngen.render(prog), work, engines, files, draw)
    rep.refused_deployments = refused
    if "gpu-built" in engines and kept and gpu_here() and not gpu_refuses(Report(""), lr) \
            and too_large(Report(""), lr):
        gpu_built(rep, lr, draw.cards)          # over PTX_BUDGET: through ptxas only
    if code:
        rep.problem(f"checker: `{text}` must be refused {code}, and was accepted")
    return rep
