"""Building executables: the back half of the pipeline, as the list of passes it is.

    learner IR --alphac.lower.learner--> runtime-language source (+ the runtime, + the target's
    prelude) --rt.parse, rt_lower--> LIR --regalloc, target.select--> machine instructions
    --assemble--> .text --elf.link--> a static executable

Requires: a checked, differentiated learner (alphac.driver) and a target name. Guarantees: the
bytes depend only on the learner, the target and the compiler's own source (no time, no path,
no hash seed: every table is iterated in a fixed order). `Image` keeps what listings need.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from alphac import __version__, compiler_digest
from alphac.diag import BuildError
from alphac.elf.writer import Reloc, Section, Symbol, layout, link
from alphac.ir.learner import Learner
from alphac.ir.score import EvalError, held_out, labels_for
from alphac.lower.learner import learner_source
from alphac.lower import rt
from alphac.lower.assemble import Text, assemble, constant_pool
from alphac.lower.memo import IdMemo
from alphac.lower.lir import Program
from alphac.math import MARKER as MATH_MARKER
from alphac.lower.fold import fold_loads, pool_constants, sink_wide
from alphac.lower.regalloc import allocate
from alphac.lower.rt_lower import lower_program
from alphac.lower.target import Target, UnknownTarget, target as target_record
from alphac.targets import gpu_targets
from alphac.runtime import source


def target(name: str) -> Target:
    """The target record of ISA `name` (the registry: alphac.lower.target); BuildError else."""
    try:
        return target_record(name)
    except UnknownTarget as e:
        raise BuildError(str(e)) from None


@dataclass
class Image:
    """A built executable and what was made on the way, for listings and tests."""
    target: Target
    elf: bytes
    text: Text
    program: Program
    rt_source: str
    addresses: dict[str, int]


@lru_cache(maxsize=64)
def _parsed(text: str, name: str) -> tuple:
    """The runtime's sources, and a learner's generated code, are parsed once per process (their
    trees are never modified)."""
    return tuple(rt.parse(text, name))


def runtime_items(name: str) -> tuple:
    return _parsed(source(name), f"{name}.rt")


def runtime_closure(name: str) -> list:
    """The items of runtime file `name` and of every file it uses, each after its uses."""
    return [it for m in rt.modules(name, runtime_items) for it in runtime_items(m)]


def program_for(lr: Learner, tgt: Target, main: str = "single", extra: str = "",
                blobs: dict[str, bytes] | None = None, evaluation=None,
                uses: tuple[str, ...] = ()) -> tuple[Program, str]:
    """LIR for an executable: the prelude, the runtime files its main file (`single.rt`,
    `role.rt`, `gpu.rt`) uses, the generated learner code and `extra` (the role's or the GPU
    owner's generated code), checked as modules (alphac.lower.rt.check_modules)."""
    gen, gen_blobs = learner_source(lr, evaluation, tgt.lanes, dict(tgt.constants).get("CPU_NEON") == 1)
    units = [("prelude.rt", list(_parsed(tgt.prelude(), "prelude.rt")), False)]
    mods = rt.modules(main, runtime_items)
    for extra_mod in (("xsum",) if lr.exact_sums or lr.exact_reduced else ()) + uses:    # exact_sum's accumulators,
        mods += [m for m in rt.modules(extra_mod, runtime_items) if m not in mods]   # a GPU role's driver
    units += [(f"{m}.rt", list(runtime_items(m)), True) for m in mods]
    own, marker, math = gen.partition(MATH_MARKER)
    items = list(_parsed(own, f"{lr.name}.rt"))    # every role of a learner has the same text
    if marker:                      # the alphac.math functions: the same text for many programs
        items += list(_parsed(marker + math, "math.rt"))
    units.append((f"{lr.name}.rt", items, False))
    version = version_text(lr, tgt).encode()
    extra += (f"\ndata rt_version_text: [u8; {len(version)}] = extern;\n"
              f"const RT_VERSION_BYTES = {len(version)};\n")
    units.append(("extra.rt", rt.parse(extra, "extra.rt"), False))
    rt.check_modules(units)
    all_blobs = dict(gen_blobs, rt_version_text=version)
    all_blobs.update(blobs or {})
    generated = frozenset(id(it) for _, items, module in units if not module for it in items)
    return lower_program([it for _, items, _ in units for it in items], all_blobs,
                         generated=generated), gen


@lru_cache(maxsize=1)
def _compiler() -> str:
    return compiler_digest()


def version_text(lr: Learner, tgt: Target) -> str:
    """What an executable's `--version` prints before its build ID (core.rt's rt_version): the
    learner's name and identity, the target, and this compiler (its version and digest, as the
    build manifest names it)."""
    return (f"learner {lr.name} {lr.identity}\ntarget {tgt.name}\n"
            f"compiler alphac {__version__} sha256 {_compiler()}\n")


_SELECTED: dict[tuple[str, str], list] = {}
_KEYS = IdMemo(20000)                       # a Function -> its text, _SELECTED's key


def selected(fn, tgt: Target) -> list:
    """fn's machine instructions: register allocation and instruction selection, once per
    process for each distinct LIR function (the runtime's functions, and a learner's, are the
    same in every role of a deployment: a build of many roles selects them once). The key is
    the function's whole text, source lines included; the result is only read afterwards."""
    text = _KEYS.get(fn) or _KEYS.put(fn, f"{fn.name}({fn.params!r}) {fn.ret} {fn.nvregs}\n" + "\n".join(
        f"{b.label}:" + ";".join(f"{i!r}#{i.origin}" for i in b.insts + [b.term]) for b in fn.blocks))
    key = (tgt.name, text)                  # (a lowered Function is shared and never changed)
    hit = _SELECTED.get(key)
    if hit is None:
        if len(_SELECTED) > 20000:
            _SELECTED.clear()
        if tgt.fold_loads:
            fn = pool_constants(fold_loads(fn))
        if tgt.wide:
            fn = sink_wide(fn)
        hit = _SELECTED[key] = tgt.select(fn, allocate(fn, tgt.regfile))
    return hit


def link_program(prog: Program, tgt: Target) -> tuple[bytes, Text, dict[str, int]]:
    functions = [("_start", tgt.entry_stub())]
    for fn in prog.functions:
        functions.append((fn.name, selected(fn, tgt)))
    text = assemble(functions, tgt.encode, pad=tgt.text_pad)
    sections = [Section(".text", text.code)]
    symbols = [Symbol(name, ".text", off, size, "func", "global" if name == "_start" else "local")
               for name, off, size in text.funcs]
    for sec in (".rodata", ".data", ".bss"):
        blob = bytearray()
        for g in prog.globals:
            if g.section != sec:
                continue
            while len(blob) % g.align:
                blob.append(0)
            symbols.append(Symbol(g.name, sec, len(blob), g.size, "object"))
            blob += g.init if sec != ".bss" else bytes(g.size)
        pool, pooled = constant_pool(text.relocs) if sec == ".rodata" else ([], b"")
        if pool:                            # the binary64 constants the code reads (assemble)
            while len(blob) % 16:
                blob.append(0)
            symbols += [Symbol(name, sec, len(blob) + off, 8, "object") for name, off in pool]
            blob += pooled
        if blob:
            data = bytes(blob) if sec != ".bss" else b""
            sections.append(Section(sec, data, size=len(blob),
                                    align=max([16 if pool else 1] + [g.align for g in prog.globals if g.section == sec])))
    relocs = [Reloc(".text", off, kind, sym, addend) for off, kind, sym, addend in text.relocs]
    elf = link(tgt, sections, symbols, relocs, "_start", tgt.apply_reloc)
    return elf, text, layout(tgt, sections)


def with_data(lr: Learner, extra: str, blobs: dict, lo: int, hi: int) -> tuple[str, dict]:
    """`extra` and its blobs with `learner_data_open()` for samples lo..hi-1 (data_source)."""
    from alphac.lower.learner import data_source
    text, more = data_source(lr, lo, hi)
    return extra + "\n" + text, {**blobs, **more}


def build_learner(lr: Learner, target_name: str, evaluation=None) -> Image:
    """The single-process executable; `evaluation` ((the learner on held-out data, its labels'
    name or None)) gives it `--evaluate`."""
    from alphac.lower.ckpt import single_source
    tgt = target(target_name)
    extra, blobs = single_source(lr)
    extra, blobs = with_data(lr, extra, blobs, 0, lr.nsamples or 0)
    prog, gen = program_for(lr, tgt, extra=extra, blobs=blobs, evaluation=evaluation)
    elf, text, addrs = link_program(prog, tgt)
    return Image(tgt, elf, text, prog, gen, addrs)


def evaluation_for(lr: Learner, arrays: list[tuple[str, str]], labels: str | None, file: str):
    """What `alphac build --eval-data` compiles in: (the learner on the held-out arrays, the
    labels' name or None), or None without arrays; BuildError for what cannot be scored."""
    if not arrays:
        if labels is not None:
            raise BuildError("--labels needs --eval-data")
        return None
    try:
        test = held_out(lr, arrays)
        name = labels_for(test, labels, file)
    except EvalError as e:
        raise BuildError(str(e).replace("--data", "--eval-data"))
    if test.loss is None:
        raise BuildError(f"--eval-data: {file} has no loss to score")
    return test, name


def build_role(plan, role, target_name: str | None = None, host=None,
               ptxas_path: str | None = None) -> Image:
    """One role of a deployment: its projected program over the role runtime. A GPU owner
    (target ISA+sm_NN) is built for `host` (default: the deployment's `gpu` item for it)."""
    from alphac.lower.role import role_source
    name = target_name or plan.dep.target_of(role)
    isa, sm = split_target(name)
    tgt = target(isa)
    lo, hi = plan.dep.samples.range(role.index) if plan.is_owner(role) and plan.has_loss else (0, 0)
    gpu = conv = None
    if sm is not None:
        hosts = deployment_gpu_hosts(plan)
        host = host or hosts[role]
        gpu, conv, _ = gpu_role_image(plan, role, name, host, ptxas_path)
        admit_cards(plan, {**hosts, role: host}, ptxas_path, {role: name}, {role: gpu})
    text, blobs = role_source(plan, role, gpu)
    if gpu is not None:
        from alphac.lower import gpu as gpu_lowering
        lines, more = gpu_lowering.gpu_globals(plan.lr, gpu, conv, f"gpu-role {role}")
        text, blobs = "\n".join(lines) + "\n" + text, {**blobs, **more}
    text, blobs = with_data(plan.lr, text, blobs, lo, hi)
    prog, gen = program_for(plan.lr, tgt, main="role", extra=text, blobs=blobs,
                            uses=("nvdrv",) if gpu is not None else ())
    elf, code, addrs = link_program(prog, tgt)
    return Image(tgt, elf, code, prog, gen + "\n" + text, addrs)


def build_node(plan, node, target_name: str | None = None) -> Image:
    """One index node of a deployment (alphac.lower.fleet): one executable for all its members,
    each chosen at run time by `--rank`. A node of one role is that role's build."""
    from alphac.lower.fleet import node_source, node_target
    if node.size == 1:
        return build_role(plan, node.role(node.lo), target_name)
    text, blobs = node_source(plan, node)        # refuses what is not built this way
    tgt = target(target_name or node_target(plan, node))
    prog, gen = program_for(plan.lr, tgt, main="role", extra=text, blobs=blobs)
    elf, code, addrs = link_program(prog, tgt)
    return Image(tgt, elf, code, prog, gen + "\n" + text, addrs)


def deployment_gpu_hosts(plan) -> dict:
    """Each GPU owner's host, from the deployment's `gpu` item (files relative to the source);
    CompileError E0123 at the item for a file that is not a valid description."""
    from pathlib import Path
    from alphac.nvdrv import host as gpu_host
    out = {}
    for r in plan.roles():
        given = plan.dep.gpu_of(r)
        if given is None:
            continue
        text, span = given
        path = Path(span.source.name).parent / text
        try:
            out[r] = gpu_host.load(path, {})
        except gpu_host.HostError as e:
            raise _gpu_error("E0123", f"bad GPU host description for `{r.ref()}`: {e}",
                             "see docs/nvdrv.md for the keys", span)
    return out


_KERNELS: dict = {}


def gpu_kernels(lr: Learner, sm: int, ptxas_path: str | None = None):
    """(kernels, ptxas) of a learner for sm_NN, assembled once per process; CompileError E0121
    without ptxas."""
    from alphac import ptx
    from alphac.ptx.ptxas import PtxasMissing, find_ptxas
    try:
        tool = find_ptxas(ptxas_path)
    except PtxasMissing as e:
        raise _gpu_error("E0121", f"no PTX assembler: {e}",
                         "install CUDA's ptxas, set ALPHAC_PTXAS, or pass --ptxas PATH")
    key = (id(lr), sm, tool.sha256)
    if key not in _KERNELS or _KERNELS[key][0] is not lr:
        if len(_KERNELS) > 16:
            _KERNELS.clear()
        _KERNELS[key] = (lr, ptx.build(lr, sm, tool), tool)
    return _KERNELS[key][1], _KERNELS[key][2]


def gpu_role_image(plan, role, target_name: str, host, ptxas_path: str | None = None):
    """A GPU owner role's launch image (its share: samples, update ranges, rows written at
    start-up), its conversation with `host`, and its kernels."""
    from alphac.nvdrv import conversation, image
    isa, sm = split_target(target_name)
    if target_name not in gpu_targets():
        raise _gpu_error("E0124", f"unsupported GPU target `{target_name}`",
                         "GPU targets: " + " or ".join(gpu_targets()))
    built, _ = gpu_kernels(plan.lr, sm, ptxas_path)
    lo, hi = plan.dep.samples.range(role.index) if plan.has_loss else (0, 0)
    ranges = plan.updates(role.index)
    share = image.Share(lo, hi, plan.lr.nsamples or 0,
                        tuple(ranges.get(g.index, (0, 0)) for g in plan.lr.groups), plan.lr.batch or 0)
    # a role runs the full shadow: none of the sampled step's digest (its buffers, its chains)
    od = owner_data(plan.lr)
    od = replace(od, digest=(), chains=tuple(c for c in od.chains if not any(k.startswith("digest_") for k in c)))
    built = [b for b in built if not b.kernel.name.startswith("digest_")]
    gpu = image.plan(od, built, sm, share, host.topology, host_arena=True, choices=host.choices)
    return gpu, conversation.conversation(host, gpu), built


def owner_data(lr: Learner):
    """What the driver layer's memory plan needs of a learner (alphac.nvdrv.image.OwnerData),
    given to it as data: the states' initial values, the data arrays' row widths, the parameter
    count, the samples, the groups' sizes, the batch, the gs row's and the batch buffers' widths,
    the kernel chains the step submits, the digest's sizes, `sc`'s initial words."""
    from alphac.lower.gpu import chains, digest_sizes
    from alphac.nvdrv.image import OwnerData
    from alphac.ptx.abi import batch_widths, card_scalars, param_count, row_layout
    return OwnerData(lr.name, tuple((s.name, tuple(s.init)) for s in lr.states),
                     tuple((d.name, d.cols) for d in lr.data), param_count(lr), lr.nsamples or 0,
                     tuple(g.size for g in lr.groups), lr.batch or 0, row_layout(lr).width,
                     tuple(batch_widths(lr)), chains(lr), digest_sizes(lr),
                     tuple(lr.state(s).init[0] for s in card_scalars(lr) for _ in range(2)))


def admit_cards(plan, hosts: dict, ptxas_path: str | None = None, targets: dict | None = None,
                images: dict | None = None) -> None:
    """Per-card memory admission: the GPU owners on one card (by UUID) together demand at most
    its declared memory; another card's memory never counts. CompileError E0120 naming them.
    `images`: launch images already planned (the others are planned here)."""
    cards: dict[bytes, list] = {}
    for r, h in sorted(hosts.items(), key=lambda kv: (kv[0].index or 0)):
        t = (targets or {}).get(r) or plan.dep.target_of(r)
        if "+" not in t:
            continue
        gpu = (images or {}).get(r) or gpu_role_image(plan, r, t, h, ptxas_path)[0]
        cards.setdefault(h.uuid, []).append((r, h, gpu.demand))
    for uuid, users in sorted(cards.items()):
        demand = sum(d for _, _, d in users)
        supply = min(h.memory for _, h, _ in users)
        if demand > supply:
            who = ", ".join(f"{r.ref()} {d}" for r, _, d in users)
            raise _gpu_error("E0120", f"card {users[0][1].uuid_text} is asked for {demand} bytes "
                             f"({who}); its host declares {supply}", "each card's GPU owners "
                             "together must fit in its memory; give a role another card or a "
                             "smaller share", (plan.dep.gpu_of(users[-1][0]) or (0, None))[1])


# -- GPU owners ----------------------------------------------------------------------------------


@dataclass
class GpuBuild:
    """A GPU owner and what it was made from: the kernels, the launch image, the conversation."""
    image: Image
    kernels: list                         # alphac.ptx.Built, one per kernel
    gpu: object                           # alphac.nvdrv.image.GpuImage
    conversation: object                  # alphac.nvdrv.conversation.Conversation
    ptxas: object                         # alphac.ptx.ptxas.Ptxas


def split_target(name: str) -> tuple[str, int | None]:
    """"x86_64" -> ("x86_64", None); "x86_64+sm_90" -> ("x86_64", 90); else BuildError."""
    isa, plus, gpu = name.partition("+")
    if not plus:
        return isa, None
    if not gpu.startswith("sm_") or not gpu[3:].isdigit():
        raise BuildError(f"`{gpu}` is not a GPU target such as sm_90")
    return isa, int(gpu[3:])


def _gpu_error(code: str, message: str, hint: str | None = None, span=None):
    from alphac.diag import CompileError, Diagnostic
    return CompileError([Diagnostic(code, span, message, hint)])


def load_gpu_host(path: str | None, overrides: dict):
    """The host a GPU owner is built for, from a description file and/or options; CompileError
    E0122 when nothing was given, E0123 when what was given is not a valid description."""
    from alphac.nvdrv import host as gpu_host
    if path is None and not any(v is not None for v in overrides.values()):
        return None
    try:
        return gpu_host.load(path, overrides)
    except gpu_host.HostError as e:
        raise _gpu_error("E0123", f"bad GPU host description: {e}",
                         "see docs/nvdrv.md for the keys: uuid, product, memory, driver, minor")


def build_gpu_owner(lr: Learner, target_name: str, host, ptxas_path: str | None = None) -> GpuBuild:
    """A GPU owner for `host`: the kernels assembled by ptxas, the memory plan admitted against
    the host's declared memory, the conversation, the runtime. CompileError E0120-E0124."""
    from alphac.lower import gpu as gpu_lowering
    from alphac.nvdrv import conversation, image
    if target_name not in gpu_targets():
        raise _gpu_error("E0124", f"unsupported GPU target `{target_name}`",
                         "a GPU owner is an x86-64 executable (at the baseline or a level) for "
                         "sm_86 (Ampere) or sm_90 (Hopper): " + ", ".join(gpu_targets()))
    isa, sm = split_target(target_name)
    if host is None:
        raise _gpu_error("E0122", f"target `{target_name}` needs the GPU host it is built for",
                         "give --gpu-host FILE, or --gpu-uuid, --gpu-product, --gpu-memory and "
                         "--driver (docs/nvdrv.md)")
    built, tool = gpu_kernels(lr, sm, ptxas_path)
    gpu = image.plan(owner_data(lr), built, sm, topology=host.topology, choices=host.choices)
    if gpu.demand > host.memory:
        def part(m):                    # "vidmem 4194304 = gpfifo 2097152 + arena 2097152"
            inner = [f"{a.name} {a.size}" for a in gpu.allocations if a.within == m.name]
            return f"{m.name} {m.size}" + (" = " + " + ".join(inner) if inner else "")
        parts = "; ".join(part(m) for m in gpu.memories if m.where in ("vidmem", "vidmem-gpu"))
        raise _gpu_error("E0120", f"the GPU owner needs {gpu.demand} bytes of the card's memory "
                         f"({parts}); the host declares {host.memory}",
                         "the demand is what the plan allocates on the card; a card that "
                         "declares less is refused, one byte is enough")
    conv = conversation.conversation(host, gpu)
    tgt = target(isa)
    text, blobs = gpu_lowering.gpu_owner_source(lr, gpu, conv)
    text, blobs = with_data(lr, text, blobs, 0, lr.nsamples or 0)    # the host shadow's rows
    prog, gen = program_for(lr, tgt, main="gpu", extra=text, blobs=blobs)
    elf, code, addrs = link_program(prog, tgt)
    return GpuBuild(Image(tgt, elf, code, prog, gen + "\n" + text, addrs), built, gpu, conv, tool)
