"""Small is a feature: a line budget per package (non-blank lines of .py and .rt, generated data
files left out, as tinygrad leaves out its autogen), checked here as tinygrad checks its own.
Raising a budget is a decision to make in review, not by accident.

A generated file is recognised by its first line, which says `generated; do not edit` (today
alphac/nvdrv/generated/abi_580.py, written by tests/nvdrv_layout_probe/autogen.py): the file
says what it is, so no list of paths can drift from the tree; and it sits in a `generated/`
folder of its own, which holds nothing hand-written (its __init__.py aside). Generated lines are counted apart and have no
budget: they follow the headers they are generated from, and the generator is what is reviewed.

`make size` (python tests/test_size.py) prints the report: per package the hand-written and
the generated lines, the budget and what is left of it.
"""

import pytest

from conftest import ROOT

# tightened to what the code needs (issue 14: each a few percent over its size then); issue 15
# added alphac/math and raised ir, ptx (the functions' PTX backend) and tools (mathexe); issue 22
# raised runtime (bounds on what comes from outside, per-frame deadlines, authenticated events)
# and tools (the launcher checks its inputs, owns its roles' process group, and authenticates its
# run records), types (the values bound, a chain walked); issue 21 raised elf (the reader that
# replaces pyelftools at run time: cubins and the --emit asm listing read through it), the top
# level (cli.py: --emit writes to -o, the CLI's conventions), tools (listing's named
# CapstoneMissing; checkpoints exported; traces; ckpt show's checks) and runtime (events carry
# their times); issue 22 the top level again (alphac/files.py: outputs only over regular files,
# reads bounded and never blocking); issue 16 raised parse, types, ir and lower (matrix products,
# max(v), onehot, logsumexp and their gradients; per-sample buffers; minibatches and their
# order, alphac/ir/order.py; evaluation, alphac/ir/score.py and predict), tools
# (alphac/tools/evaluate.py, plot.py), runtime (the loss beside G, --loss-every) and the top level
# (--epochs, `eval`, --eval-data, `plot`, one selection per distinct function); the contract's
# functions on numpy arrays (alphac/math/vec.py) raised math, and the batched reference
# interpreter (alphac/ir/batch.py) ir; the fast SHA-256 raised runtime (the CPU's SHA-256
# instructions found at start, eight rounds unrolled), x86_64 and aarch64 (ror32, bswap32, the
# SHA-NI and SHA2 sequences and their encodings); data at run time (alphac/npy.py, runtime/
# data.rt, the owners' data tables in lower/learner.py) raised the top level, runtime, lower,
# ir and types; issue 20: Slurm (alphac/tools/slurm.py, +242; cli.py +85), Kubernetes
# (alphac/tools/k8s.py, +291; cli.py +59), the runtime's ranks and address templates, and fleet
# builds (alphac/lower/fleet.py: one program per index node) raised tools, the top level, the
# runtime and lower by what they added; issue 18 (the generated code's shapes: samples in
# blocks, f64x2 pairs, indexed access, load folding, alphac/lower/fold.py, and f64x2 in LIR, the
# runtime language, both selectors and both encoding tables) raised lower, x86_64 and aarch64
# (and lower again for W @ b and u @ W in blocks of independent f64x2 chains), then meshes (the
# owners' reduce-scatter and all-gather: the plan, its executor and the unbuffered check in
# dist, the exchanges in lower/role.py, the links in runtime/role.rt, the launcher's and the
# Kubernetes writer's --mesh in tools, E0118 in diag.py) raised dist, lower, runtime, tools and
# the top level by what they added; the x86_64-v3 level (YMM registers and VEX rows in the
# x86-64 table and encoder, class w in LIR, its rules, spills and folds, the 4-lane kernels in
# lower/learner.py) raised x86_64 and lower, and the top level (cli.py: the level in --help);
# frame format 2 (sum64 in four chains, runtime/net.rt) and the roles' copies and combines in
# f64x2 (core.rt) raised the runtime by their lines, and sum64's rotate (ror64: the rows and
# operand kinds of both tables) aarch64; the compile caches (each runtime function lowered,
# its free names found and each instruction encoded once per process: rt_lower's fingerprints,
# rt's _free_names, assemble's MI.encoded and laid-out functions) raised lower; the x86_64-v4
# level (ZMM registers, EVEX rows and disp8*N in the x86-64 table and encoder; class z in LIR,
# rt_lower's f64x8, target.py's LEVELS and host_runs, the 8-wide kernels in lower/learner.py,
# fold.py's sink_wide; cli.py's help, build.py's call of it; k8s.py's CPU labels for a level's
# pods) raised x86_64, lower, tools and the top level by what they added. Issue 48 (structure
# only) moved lines between packages and set the budgets of those it grew to their new size plus
# at most 1 %, so that the next feature raises its package's budget by what it adds, in review:
# ir/binary64.py went to math (with the op table, dsl.OPS), the held-out data from
# tools/evaluate.py to ir/score.py and alphac/build.py (ir, the top level); the runtime's
# package docstring names every .rt file (runtime). Issue 45's encoders (encode.py: bash, YAML,
# JSON) and one bounded JSON reader (files.py: limits, depth, duplicate keys), the writers' and
# readers' refusals by name, its hostile runs (plot and trace drawing and naming non-finite
# losses, export refusing by name, the launcher reserving its record's space and refusing
# record-write, the CLI's exit-code table and its one count bound, a CNAME chain's and an address
# text's bounds in the runtime) raised tools, the top level and runtime by theirs; issue 41's
# local memory (image.py's area, its sizes and setup methods, host.py's topology,
# conversation.py's GR_GET_INFO and its checks, the GPU-only allocation) raised nvdrv by its; issue
# 45's memory rule (lower/rt_bounds.py, the bounded appends in rt_lower.py, 'writes' in rt.py),
# the checkpoint format 2 and names of 128 characters (formats.py, diag.py's E0005) raised lower,
# runtime and the top level by theirs, and the three branches of issue 45 and 48 merged. Issue
# 48's second part raised no budget in total: it moved 30 lines of lower's to where its code went
# (the targets' names, levels and GPU architectures from lower/target.py to alphac/targets.py,
# below dist: 22 to the top level, which also holds the Python API now, alphac/api.py, and the
# CLI's table, alphac/commands.py; 8 to tools, split by job: record, table, supervise, launch).
# Issue 41's loops (ptx/kernels.py's _Loops: grad_samples as loops over coordinates and rows,
# kept vectors in registers or .local arrays) and issue 48's split of the kernel ABI into
# ptx/abi.py (its docstring and the dataclasses as a module of their own) raised ptx by theirs.
# The driver layer given a learner as data (nvdrv/image.py's OwnerData, build.py's owner_data:
# its last two upward imports gone) raised nvdrv and the top level by theirs. The session of
# issues 41-47 raised each budget to what its merged features needed: ptx (+440: tiled.py's
# fused weight gradient and batched products, xsum.py's exact sums on the card, the local
# budget), nvdrv (+31: the products' buffers, the accumulators, PERF_BOOST, start-up's events),
# runtime (+470: run keys, challenge-response HELLOs and frame MACs in net.rt; periodic
# checkpoints and their pruning in ckpt.rt; the usage line, --help, --version and refusal
# details in core.rt; data-label; the spinning wait; the sampled shadow's chain), tools (+906:
# recovery and fault injection in launch/supervise/shrink/slurm/k8s, the plot's figure and
# several runs, init, metrics and TensorBoard files, the split trace, replay, the k8s and
# slurm-record defects), lower (+126: the sampled step, the first block's G and the fused mean,
# label checks, refusal details), ir (+54: step losses, label checks), x86_64 (+36: registers
# 16-31, VEX/EVEX three-operand rows), types (+5) and the top level (+284: the generated help
# lines, explain's refusal table, the CLI's new commands and options, formats' MAC fields);
# then the batched products in phases (ptx +109: the plan in abi.py, vectors<j>, vecmat), one
# submission a step (nvdrv +21: chains and WAIT_FOR_IDLE; lower +21: the chain helpers) and
# Kubernetes recovery (runtime +66: --resume-latest's newest checkpoint and the steps left;
# tools +12, the top level +6). The session of issue 47's language raised them by what each
# construct needed through every engine: parse (+259: optimizer uses and definitions in
# parse/optim.py, comparisons, slices, comprehensions, def), types (+543: the optimizer
# expansion types/optim.py, slices and functions types/slices.py, where, the clock, gathers,
# reductions in the update), ir (+191: Clock, Where's comparisons, Gather/Scatter, the pick's
# row-by-row adjoint, reduced scalars' terms and folds), math (+183: sin and cos with their
# error bounds, the 2/pi and sin(j pi/64) tables), lower (+215: learner_clock, learner_reduce/
# terms/fold, gather and scatter with their +0 pass, label checks in the fleet, fge, the
# POLYVAL intrinsic), dist (+58: the reduce gather in the plan), ptx (+40: clock and reduced
# parameters, setp.ge/neu, cvt.rzi, gathers, stacks of rows), runtime (+114: polyval.rt for the
# frames' MACs), x86_64 (+52) and aarch64 (+56: PCLMULQDQ/PMULL rows and the intrinsic, fge),
# tools (+1) and the top level (+53: the new codes E0070-E0075, E0119, formats' POLYVAL
# fields, the CPU-only examples). The next session's: types (+55: hyperparameters of the
# update and grad_scale in types/optim.py), ir (+29: exact reductions in the update under
# exact_sum), lower (+18: their accumulator), dist (+4), ptx (+1: the GPU host's), tools (+14: an interrupt held while
# the roles start), the top level (+3: E0071's and E0063's texts); then integer data (types
# +45: i64 declarations, where they may be read, f64(); the top level +23: E0125, npy's integer
# checks; ir +3; parse +1), pow (math +168: the double-double fast path, the 192-bit accurate
# path and its fine log sum, the exact and midpoint snap, C99's cases; ir +5: its adjoint; types
# +1) and grad_samples' loops for the CNN and attention (ptx +23: nounroll, a function of a kept
# vector written once, the register budget) and windowed learners' build (lower +37: a large
# per-sample body lowered one sample at a time, structural twins computed once), then vector
# exp and tanh (math +147: math/lanes.py, the staging language rendered over 4 and 8 lanes;
# lower +18: the lane calls in the wide levels' loops; tools +11: mathexe's vector filter) and
# exact_sum's blocked terms (runtime +94: xsum.rt's xc_add_lanes and xc_round_window; lower +9).
# The session of issues 42-44's speed raised them by what each merged branch needed: the copy
# engine (nvdrv +102: the copy object, the results and staging allocations, the copy and upload
# push buffers; lower +5; runtime +4); owner_sum's loads ahead and the card's reduced scalars
# (ptx +132: the batched fold, `reduce`, card_reductions; lower +25; nvdrv +3: rd); the prefetch
# of run-time rows (lower +32, aarch64 +8, x86_64 +5); v4's embedded broadcast and branchless
# relu/where (lower +18, x86_64 +17); vector integers, gathers and the log, log1p, expm1 lanes
# (math +102, x86_64 +87, lower +44, the top level +1: 64-byte aligned globals); exact_sum's
# expansions and compact frames (runtime +224: xsum.rt's 2Sum lanes, their flush and the
# frames' pack, unpack and merge; lower +53; the top level +14: frame format 5, its refusal;
# dist +2); a 2-D gradient's rows in pairs (lower +22); MAX_VALUES and NPY_HEADER moved to
# formats.py (the top level +5, types -2). The next session's, by merged branch: exp's lean fast
# path and the outlined slow paths (math +82), log's (math +61), the constant pool (lower +41,
# x86_64 +7, the top level +6, math -10: LOG_K gone), the AArch64 lanes (aarch64 +45: NEON
# integer rows and ld1 of a lane; lower +28; math -7), exact_sum in the learner's own loops
# (lower +88: fused_expansion; runtime +51: xe_add_listed, xe_sum_pairs), frames in place
# (runtime +149: frame parts, the split sum64, one-pass digest; lower +80: role.py's parts and
# in-place combine; the top level +4: format 6), the tiled gradient beyond L2 (lower +86),
# owner_sum staged in shared memory (ptx +71), log's own lean fast path for log, its lanes and
# log1p (math +37). This session's: the carve-out from each kernel's shared size (nvdrv +22,
# ptx +1), the owner's two allocations with only the card's states copied back (nvdrv +48,
# lower +6, the top level +3), start-up events around each candidate call (nvdrv +16), the
# RM-only mapping `--gpu-map rm` (nvdrv +57, runtime +2: a 64-bit equality check, the top
# level +4), exact_sum's f64x2 check by OR (x86_64 +23: SSE2 and VEX/EVEX xmm integer
# rows), log's and tanh's shorter chains and `_tanh_small` (math +48), the sampled shadow under exact_sum (ptx +127: xsum_round and
# the exact `reduce`; lower +17; nvdrv +4), the sampled shadow's tree digest on the card (ptx +228:
# digest.py, its u32 rows and can_sample; lower +58: the sampled step and the host's tree; nvdrv
# +17; runtime +6; tools +1; the top level +4). Then scalar states on the card where a scalar
# statement reads the card's reduction (ptx +78: the `scalars` kernel, card_scalars, `sc` in the
# kernels' leaves and the digest's gather, the ABI's text; lower +13: the host's sc, the proven
# step's scalars; nvdrv +7: the sc buffer; the top level +1: owner_data's sc words), and the
# update's exact reductions in parallel (ptx +58: reduce_add, reduce_round, exact_positions and
# their ABI text; lower +2), and exact_sum's G in video memory under sampled (lower +11:
# gpu_sampled_start; nvdrv +7: Gv and each launch's gslots; runtime +2: its call), and the full
# step's submission before the host's gradient where the card needs none of it (lower +9).
BUDGETS = {"parse": 1160, "types": 1420, "ir": 1615, "dist": 1604, "lower": 5616, "runtime": 4269,
           "x86_64": 1219, "aarch64": 1073, "elf": 480, "ptx": 2492, "nvdrv": 1679, "tools": 3066,
           "math": 2181, "": 3360}


def generated(f) -> bool:
    """A file written by a generator: its first line says `generated; do not edit`."""
    return "generated; do not edit" in f.read_text().split("\n", 1)[0]


def counts(pkg: str) -> tuple[int, int]:
    """(hand-written, generated) non-blank lines of the package's .py and .rt files."""
    base = ROOT / "alphac" / pkg if pkg else ROOT / "alphac"
    files = base.rglob("*") if pkg else base.glob("*")
    out = [0, 0]
    for f in files:
        if f.suffix in (".py", ".rt") and f.is_file():
            out[generated(f)] += sum(1 for line in f.read_text().splitlines() if line.strip())
    return out[0], out[1]


def lines(pkg: str) -> int:
    return counts(pkg)[0]


def report() -> str:
    rows = ["| package | hand-written | generated | budget | left |", "|---|---:|---:|---:|---:|"]
    total = [0, 0, 0]
    for pkg in sorted(BUDGETS, key=lambda p: (p == "", p)):
        hand, gen = counts(pkg)
        total = [total[0] + hand, total[1] + gen, total[2] + BUDGETS[pkg]]
        rows.append(f"| alphac/{pkg} | {hand} | {gen} | {BUDGETS[pkg]} | {BUDGETS[pkg] - hand} |"
                    if pkg else f"| alphac/*.py | {hand} | {gen} | {BUDGETS[pkg]} | {BUDGETS[pkg] - hand} |")
    rows.append(f"| all | {total[0]} | {total[1]} | {total[2]} | {total[2] - total[0]} |")
    return "\n".join(rows)


@pytest.mark.parametrize("pkg", sorted(BUDGETS))
def test_package_within_its_line_budget(pkg):
    n = lines(pkg)
    assert n <= BUDGETS[pkg], f"alphac/{pkg}: {n} lines, budget {BUDGETS[pkg]}"


def test_every_package_has_a_budget():
    pkgs = {p.name for p in (ROOT / "alphac").iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert pkgs <= set(BUDGETS), pkgs - set(BUDGETS)


def test_the_abi_is_recognised_as_generated():
    hand, gen = counts("nvdrv")
    assert gen > 1000 and generated(ROOT / "alphac" / "nvdrv" / "generated" / "abi_580.py")


def test_generated_code_sits_in_its_own_folder():
    """A generated file lives in a `generated/` folder, and that folder holds only generated
    files (and its __init__.py, which says what each is): the two kinds never mix."""
    for f in sorted((ROOT / "alphac").rglob("*")):
        if f.suffix in (".py", ".rt") and f.is_file():
            inside = f.parent.name == "generated"
            if f.name == "__init__.py" and inside:
                assert not generated(f), f
                continue
            assert generated(f) == inside, (f"{f.relative_to(ROOT)}: " +
                                            ("generated, outside a generated/ folder" if not inside
                                             else "hand-written, in a generated/ folder"))


if __name__ == "__main__":                 # make size
    print(report())
