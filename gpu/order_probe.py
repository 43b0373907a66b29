"""The ordering probe of gpu/qualify.py: does the card order one push buffer as a GPU owner's step
needs it to (issue 42)?

A GPU owner's step is one push buffer (docs/nvdrv.md "What the executable does", "Results
through the copy engine"): launches separated by the compute class's WAIT_FOR_IDLE, then the
host's WFI, then the copy engine's LAUNCH_DMAs into `results` and its semaphore release. The
owners' kernels are short and might end before the copy starts by luck, so a wrong order would
show only when timing exposes it. Here kernel A spins `spins` iterations of a 64-bit LCG
(x <- x * LCG_A + LCG_C modulo 2^64 from x = slot + 1: `marker`, which no compiler can shorten)
before it writes x, its marker, into its own word of G; the host knows the marker beforehand.

    case             the chain (image.plan's, built by image.launch_pushbuf)    verdict
    compute-compute  A (G[0]), WAIT_FOR_IDLE, B copies G[0] to G[1];           passed: B copied
                     host WFI, copy of G, copy engine's release                  A's marker
    control-no-wfi   A (G[3]), copy of G, release: the same push buffer with    no-order: the copy
                     the host's WFI taken out (`without_wfi`)                    missed the marker;
                                                                                 saw-marker: timing
    compute-copy     A (G[2]), host WFI, copy of G into `results`, release      passed: the copy
                                                                                 saw the marker

(run in this order: the last, with its WFI, also waits for the control's kernel.) The probe is a
GPU executable of its own, built by `build` as an owner is (kernels through ptxas and read back,
`image.plan`, the conversation, gpu.rt's main with the owner's start-up), whose step K runs case
K: it clears G's place in `results`, submits the case's chain and waits (gpu_wait: refused
`gpu-timeout` after 4 s, never a hang), and prints `order K` and the four words the copy brought
back. The control never fails the qualification; a `no-order` there says the probe can see a
missing order at all. The QMD variant under test (image.QMD_OVERRIDES) applies to it too.

Requires: ptxas, a `GpuHost`. Guarantees: `verdicts` gives one line per case, whatever the
executable did (`no-verdict` with its exit and refusal when a case printed nothing).
"""
from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import replace

LCG_A, LCG_C, M64 = 6364136223846793005, 1442695040888963407, (1 << 64) - 1   # Knuth's MMIX LCG
# on a card: by estimate (about 16 cycles an iteration, a 64-bit multiply by a constant and an
# add; not yet timed: the verdicts give each case's milliseconds) 1 to 2 ms at the H200's boost
# clock, several at its idle 345 MHz. Under the mock keep it small: the PTX interpreter runs each.
SPINS = 200_000
WORDS = 4                # G: A's marker, B's copy of it, the compute-copy marker, the control's
# (name, kernels of its chain, the word its verdict reads, the slot whose marker it must hold)
CASES = (("compute-compute", ("order_spin0", "order_copy"), 1, 0),
         ("control-no-wfi", ("order_spin3",), 3, 3),
         ("compute-copy", ("order_spin2",), 2, 2))
CONTROL = "control-no-wfi"
SOURCE = "learner order_probe\n\nstate s: f64 = 0.0\n\nupdate {\n  s = s\n}\n"   # the host's learner: idle


def marker(slot: int, spins: int) -> int:
    """What A writes into G[slot] after `spins` iterations."""
    x = slot + 1
    for _ in range(spins):
        x = (x * LCG_A + LCG_C) & M64
    return x


def kernels(sm: int, spins: int) -> list:
    """A for each slot (the spin, then its marker into G[slot]) and B (G[0] into G[1]), as
    alphac.ptx.abi.Kernel: one thread each, G their one parameter."""
    from alphac.ptx.abi import Kernel, Param
    from alphac.ptx.render import Emitter
    out = []
    for slot in sorted({slot for *_, slot in CASES}):
        em = Emitter()
        g = em.op("global", em.op("ldp64", "G"))
        x, i = em.op("movi64", slot + 1), em.op("movi64", 0)
        top, end = em.fresh_label(), em.fresh_label()
        em.label(top)
        em.op("nounroll")
        em.op("braifnot", em.op("ltu64", i, spins), end)
        em.op("mullo64", x, LCG_A, d=x)
        em.op("add64", x, LCG_C, d=x)
        em.op("add64", i, 1, d=i)
        em.op("bra", top)
        em.label(end)
        em.op("stu64", g, 8 * slot, x)
        em.op("ret")
        name = f"order_spin{slot}"
        out.append(Kernel(name, sm, (Param("G", "u64", "G"),), em.module(name, [("G", "u64")], sm,
                          f"the ordering probe's A: {spins} LCG steps, then G[{slot}]"), threads=1, block=1))
    em = Emitter()
    g = em.op("global", em.op("ldp64", "G"))
    em.op("stu64", g, 8, em.op("ldu64", g, 0))
    em.op("ret")
    out.append(Kernel("order_copy", sm, (Param("G", "u64", "G"),),
                      em.module("order_copy", [("G", "u64")], sm, "the ordering probe's B: G[0] into G[1]"),
                      threads=1, block=1))
    return out


def without_wfi(img, chain: tuple[str, ...]):
    """`img` with `chain`'s push buffer as image.plan built it less the host's WFI
    (image.host_wfi): the copies start without waiting for the kernels. The image (the arena's
    bytes, its SHA-256) and the chain's GPFIFO entry follow."""
    from alphac.nvdrv import image
    c = img.chains[chain]
    w, pb = image.host_wfi(img.arch), list(c.pushbuf)
    at = next(i for i in range(len(pb)) if pb[i:i + len(w)] == w)
    pb = pb[:at] + pb[at + len(w):]
    arena, off = bytearray(img.image), c.pushbuf_va - image.ARENA_VA
    arena[off:off + 4 * len(c.pushbuf)] = struct.pack(f"<{len(pb)}I", *pb) + bytes(4 * len(w))
    chains = {**img.chains, chain: replace(c, pushbuf=tuple(pb),
                                           entry=image.gpfifo_entry(img.arch, c.pushbuf_va, len(pb)))}
    return replace(img, image=bytes(arena), sha256=hashlib.sha256(arena).digest(), chains=chains)


def step_source(img) -> str:
    """`gpu_step(step)`: case `step` (CASES' order) submitted and waited for, then `order K` and
    the four words of G the copy brought back, flushed at once (a later refusal keeps them)."""
    from alphac.lower.gpu import no_sampled_step
    res = img.results["G"]
    out = ["fn gpu_step(step: i64) {"]
    out += [f"    store64({res + 8 * i:#x}, 0);" for i in range(WORDS)]
    out += [f"    if step == {k} {{ gpu_submit({img.chain(c).entry:#x}); }}      // {name}"
            for k, (name, c, _, _) in enumerate(CASES, 1)]
    out += ['    rt_out_cstr("order ");', "    rt_out_dec(step);", "    let i = 0;", f"    while i < {WORDS} {{",
            "        rt_out_byte(' ');", f"        rt_out_hex16(load64({res:#x} + 8 * i));", "        i = i + 1;",
            "    }", "    rt_out_byte('\\n');", "    rt_flush();", "}", ""]
    return "\n".join(out) + no_sampled_step()     # gpu.rt's --shadow sampled: refused, as for a learner that cannot sample


def build(sm: int, host, spins: int, drop_wfi: tuple[str, ...] = (CONTROL,)):
    """The probe as an alphac.build.GpuBuild for `host` (its `image.elf` the executable, its
    `kernels` what a mock GPU runs); `drop_wfi`: the cases whose push buffer loses the host's WFI
    (the control; a test adds compute-copy, a broken order)."""
    from alphac import ptx
    from alphac.build import GpuBuild, Image, link_program, program_for, with_data
    from alphac.diag import CompileError, Sink, Source
    from alphac.driver import front_end
    from alphac.lower import gpu as gpu_lowering
    from alphac.lower.target import target
    from alphac.nvdrv import conversation, image
    from alphac.ptx.cubin import CubinError
    from alphac.ptx.ptxas import find_ptxas
    tool = find_ptxas()
    built = []
    for k in kernels(sm, spins):
        blob = ptx.assemble(k.ptx, sm, tool)
        im = ptx.read_cubin(blob)[k.name]
        if [p.size for p in im.params] != [8]:
            raise CubinError(f"{k.name}: ptxas's parameters differ from the kernel's")
        built.append(ptx.Built(k, blob, im))
    od = image.OwnerData("order_probe", (), (), WORDS, 0, (), chains=tuple(c for _, c, _, _ in CASES))
    img = image.plan(od, built, sm)
    for name, c, _, _ in CASES:
        if name in drop_wfi:
            img = without_wfi(img, c)
    sink = Sink()
    _, lr = front_end(Source("order_probe.alpha", SOURCE), sink, None)
    if lr is None:
        raise CompileError(sink.sorted())
    conv = conversation.conversation(host, img)
    lines, blobs = gpu_lowering.gpu_globals(lr, img, conv, "order-probe")
    text, blobs = with_data(lr, "\n".join(lines) + "\n" + step_source(img) + gpu_lowering.rows_source(lr, img, 0, 0),
                            blobs, 0, 0)
    tgt = target("x86_64")
    prog, gen = program_for(lr, tgt, main="gpu", extra=text, blobs=blobs)
    elf, code, addrs = link_program(prog, tgt)
    return GpuBuild(Image(tgt, elf, code, prog, gen + "\n" + text, addrs), built, img, conv, tool)


def case_times(events: str) -> dict[int, float]:
    """Each case's milliseconds, submission to the words back (the events `uploaded`, `step K`)."""
    at = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(uploaded|step \d+) @(\d+)", events, re.M)}
    order = ["uploaded"] + [f"step {k}" for k in range(1, len(CASES) + 1)]
    return {k: (at[order[k]] - at[order[k - 1]]) / 1e6 for k in range(1, len(CASES) + 1)
            if order[k] in at and order[k - 1] in at}


def verdicts(stdout: str, exit: int, stderr: str, spins: int, events: str = "") -> list[dict]:
    """One verdict per case, in CASES' order: its name, result (passed, failed, no-order,
    saw-marker, no-verdict) and what the words said."""
    words = {int(m.group(1)): [int(w, 16) for w in m.group(2).split()]
             for m in re.finditer(r"^order (\d+)((?: [0-9a-f]{16}){%d})$" % WORDS, stdout, re.M)}
    refused = next((ln for ln in stderr.splitlines() if ln.startswith("refused: ")), None)
    times = case_times(events)
    out = []
    for k, (name, _, word, slot) in enumerate(CASES, 1):
        want = marker(slot, spins)
        if k not in words:
            out.append({"case": name, "result": "no-verdict", "note": f"the probe printed nothing for it "
                        f"(exit {exit}{', ' + refused if refused else ''})"})
            continue
        got = words[k][word]
        took = f" in {times[k]:.3f} ms" if k in times else ""
        if name == CONTROL:
            result, why = ("saw-marker", "the kernel had ended before the copy, by timing alone: this run "
                           "could not show a missing order") if got == want else \
                ("no-order", "without the WFI the copy ran before the kernel's store: the probe sees a missing order")
        else:
            reader = "B" if word == 1 else "the copy"
            result, why = ("passed", f"{reader} saw A's marker") if got == want else \
                ("failed", f"{reader} missed A's marker: the order does not hold")
        out.append({"case": name, "result": result, "word": f"{got:016x}", "marker": f"{want:016x}",
                    "note": f"{why} (G[{word}] {got:016x}, marker {want:016x}, {spins} spins{took})"})
    return out
