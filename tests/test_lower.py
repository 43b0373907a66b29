"""The shared lowering layer: parallel moves, the allocator's guarantees, the runtime language."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from alphac.lower import lir, rt
from alphac.lower.regalloc import REUSE_FIRST, RegFile, allocate, intervals, layout_positions, parallel_moves
from alphac.lower.rt_lower import lower_program


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_parallel_moves_are_a_correct_sequence(data):
    locs = [f"r{i}" for i in range(8)]
    n = data.draw(st.integers(0, 8))
    dsts = data.draw(st.permutations(locs))[:n]
    moves = [(d, data.draw(st.sampled_from(locs))) for d in dsts]
    seq = parallel_moves(moves, "tmp")
    regs = {r: f"v{r}" for r in locs}
    regs["tmp"] = "junk"
    for d, s in seq:
        regs[d] = regs[s]
    for d, s in moves:
        assert regs[d] == f"v{s}"
    for r in locs:
        if r not in dsts:
            assert regs[r] == f"v{r}"


PROGRAM = """
const SYS_exit_group = 231;
fn rt_refuse(a: i64, b: i64, c: i64) { }
fn g(x: i64) -> i64 { return x + 1; }
fn rt_start(sp: i64) -> i64 {
    let a = sp + 1; let b = sp + 2; let c = sp + 3; let d = sp + 4; let e = sp + 5;
    let f = sp + 6; let h = sp + 7; let i = sp + 8; let j = sp + 9; let k = sp + 10;
    let l = sp + 11; let m = sp + 12; let n = sp + 13; let o = sp + 14;
    let r = g(a);
    return a + b + c + d + e + f + h + i + j + k + l + m + n + o + r;
}
"""
SMALL = RegFile(("a", "b", "c", "s1", "s2"), ("f0", "f1"), frozenset({"s1", "s2"}))


def test_allocation_never_shares_a_live_location_and_respects_calls():
    prog = lower_program(rt.parse(PROGRAM, "t.rt"))
    fn = prog.function("rt_start")
    alloc = allocate(fn, SMALL)
    iv, calls = intervals(fn)
    defined_at = {p: i for p, i, _ in layout_positions(fn)[0] if i.dst is not None}

    def passes(x, y):            # y is defined by the instruction that reads x for the last time
        i = defined_at.get(iv[y][0])
        return iv[x][1] == iv[y][0] and i is not None and i.dst == y and i.op in REUSE_FIRST \
            and i.args[0] == x
    regs = sorted(iv, key=lambda v: v.id)
    reused = 0
    for x in regs:
        for y in regs:
            if x.id != y.id and alloc.of(x) == alloc.of(y):
                (a0, a1), (b0, b1) = iv[x], iv[y]
                reused += passes(x, y)
                assert a1 < b0 or b1 < a0 or passes(x, y) or passes(y, x), (x, y)
        if any(iv[x][0] < c < iv[x][1] for c in calls) and alloc.of(x)[0] == "reg":
            assert alloc.of(x)[1] in SMALL.callee_saved
    assert alloc.nslots > 0               # 15 values live at once do not fit in 5 registers
    assert reused > 0                     # a sum's register passes to the next sum, no copy


@pytest.mark.parametrize("bad, msg", [
    ("fn rt_start(sp: i64) -> i64 { return q; }", "unknown name"),
    ("fn rt_start(sp: i64) -> i64 { return 1.5; }", "returns f64"),
    ("fn rt_start(sp: i64) -> i64 { let x = 1.0; return sp + x; }", "of i64 and f64"),
    ("fn rt_start(sp: i64) -> i64 { break; }", "outside a loop"),
    ("fn rt_start(sp: i64) -> i64 { return h(1); }", "unknown function"),
    ("fn f() {} fn f() {} fn rt_start(sp: i64) -> i64 { return 0; }", "defined twice"),
    ("fn rt_start(sp: i64) -> i64 { return 1 $ 2; }", "unexpected character"),
    ('fn rt_start(sp: i64) -> i64 { refuse("usage\\q"); return 0; }', "unknown escape"),
    ("fn rt_start(sp: i64) -> i64 { return 'ab'; }", "one byte"),
    ("fn rt_start(sp: i64) -> i64 { let x: f64 = sp; return 0; }", "value of type i64"),
    ("fn rt_start(sp: i64) -> i64 { return umulh(sp, 1.0); }", "`umulh` wants i64, given f64"),
    ("fn rt_start(sp: i64) -> i64 { return umulh(sp); }", "`umulh` takes 2 argument"),
    ("fn rt_start(sp: i64) -> i64 { return fgt(1.0, sp); }", "`fgt` wants f64, given i64"),
    ("fn rt_start(sp: i64) -> f64 { return fgt(1.0, 2.0); }", "returns i64"),
    ("fn rt_start(sp: i64) -> i64 { return ror32(sp, sp); }", "rotates by a constant"),
    ("fn rt_start(sp: i64) -> i64 { return ror32(sp, 32); }", "rotates by a constant, 1..31"),
    ("fn rt_start(sp: i64) -> i64 { return bswap32(sp, 1); }", "`bswap32` takes 1 argument"),
])
def test_runtime_language_errors_are_named(bad, msg):
    with pytest.raises(rt.RtError, match=msg):
        lower_program(rt.parse(bad, "bad.rt"))


def test_lir_check_catches_bad_operands():
    fn = lir.Function("rt_start", [], "i")
    v = fn.new("f")
    fn.blocks.append(lir.Block("entry", [lir.Inst("add", fn.new("i"), (v, lir.Imm(1)))],
                               lir.Inst("ret", None, ())))
    with pytest.raises(ValueError, match="is not i"):
        lir.Program([fn]).check()


def test_character_literals_are_bytes():
    toks = rt.lex("let a = '/'; let b = '\\n'; let c = '\\x7f'; let d = '\\'';", "t.rt")
    assert [t.value for t in toks if t.kind == "int"] == [47, 10, 127, 39]


UNITS = {
    "a": "use b;\nextern fn gen(x: i64) -> i64;\nfn fa() -> i64 { return fb() + gen(1); }\n",
    "b": "fn fb() -> i64 { return 2; }\nfn hidden() -> i64 { return 3; }\n",
    "c": "use a;\nfn fc() -> i64 { return hidden(); }\n",
}


def units(files, generated="fn gen(x: i64) -> i64 { return x; }"):
    out = [(f"{f}.rt", rt.parse(UNITS[f], f"{f}.rt"), True) for f in files]
    return out + [("gen.rt", rt.parse(generated, "gen.rt"), False)]


def test_modules_see_only_what_they_use_and_declare():
    rt.check_modules(units(["b", "a"]))
    with pytest.raises(rt.RtError, match="`fc` reads `hidden`.*nor declared extern"):
        rt.check_modules(units(["b", "a", "c"]))        # c uses a, not b
    with pytest.raises(rt.RtError, match="extern fn `gen` is not defined"):
        rt.check_modules(units(["b", "a"], generated="fn other() {}"))
    with pytest.raises(rt.RtError, match="extern fn `gen` is declared"):
        rt.check_modules(units(["b", "a"], generated="fn gen(x: f64) -> i64 { return 1; }"))
    with pytest.raises(rt.RtError, match="uses `b`, which the program does not have"):
        rt.check_modules(units(["a"]))


def test_the_program_files_come_from_the_use_lines():
    from alphac.build import runtime_items
    assert rt.modules("single", runtime_items) == ["sha256", "core", "data", "ckpt", "single"]
    assert rt.modules("role", runtime_items) == ["sha256", "core", "data", "polyval", "net", "ckpt", "role"]
    assert rt.modules("gpu", runtime_items) == ["sha256", "core", "data", "nvdrv", "gpu"]
    loop = {"x": rt.parse("use y;", "x.rt"), "y": rt.parse("use x;", "y.rt")}
    with pytest.raises(rt.RtError, match="loop"):
        rt.modules("x", loop.__getitem__)


def test_every_use_line_is_needed():
    """Each file a runtime file uses gives it at least one name it reads."""
    from alphac.build import runtime_items
    from alphac.runtime import source
    from conftest import ROOT
    for path in sorted((ROOT / "alphac" / "runtime").glob("*.rt")):
        items = runtime_items(path.stem)
        reads: set[str] = set()
        for it in items:
            rt._names(list(it[2:]) if it[0] != "fn" else it[4], reads)
        for dep in rt.uses(items):
            assert reads & set(rt.defined(runtime_items(dep))), f"{path.name} uses {dep} for nothing"


def test_loads_fold_only_where_they_read_the_same_bytes():
    """alphac.lower.fold: a load read once as an operation's second operand moves into it, but
    never past a store, a call, or a change of its base or index."""
    from alphac.lower.fold import fold_loads
    src = """global buf: [f64; 4];
fn nop() {}
fn folds(p: f64, i: i64) -> f64 { let a = loadf(buf + 8); let c = loadf(buf + 8 * (i)); return (p * a) - c; }
fn stored(p: f64) -> f64 { let a = loadf(buf); storef(buf, p); return p * a; }
fn called(p: f64) -> f64 { let a = loadf(buf); nop(); return p * a; }
fn moved(p: f64, b: i64) -> f64 { let a = loadf(b); b = b + 8; return p * a; }
fn first(p: f64) -> f64 { let a = loadf(buf); return a * p; }
fn twice(p: f64) -> f64 { let a = loadf(buf); return (p * a) + a; }
fn rt_start(sp: i64) -> i64 {
    let t = folds(1.0, sp) + stored(1.0) + called(1.0) + moved(1.0, sp) + first(1.0) + twice(1.0);
    return f2bits(t);
}
"""
    prog = lower_program(rt.parse(src, "t.rt"))
    ops = {f.name: [i.op for b in fold_loads(f).blocks for i in b.insts] for f in prog.functions}
    assert "fmulm" in ops["folds"] and "fsubmx" in ops["folds"] and "fload" not in ops["folds"]
    for name in ("stored", "called", "moved", "first", "twice"):
        assert "fload" in ops[name] and not any(op.endswith(("m", "mx")) for op in ops[name]), name


def test_constants_pool_only_as_a_second_operand_read_in_their_block():
    """alphac.lower.fold.pool_constants: a binary64 constant read only in its own block, only as
    an arithmetic's or compare's second operand, becomes that operand's Imm (the pool's word);
    one read first, in another block (hoisted out of a loop), by another operation, or +0.0
    stays an fconst."""
    from alphac.lower.fold import pool_constants
    src = """fn pooled(p: f64) -> f64 { let q = (p * 3.0) + 0.5; if fgt(q, 2.5) == 1 { return q; } return q / 3.0; }
fn first(p: f64) -> f64 { return 3.0 - p; }
fn other(p: f64) -> f64 { let c = 1.5; storef(0, c); return p * c; }
fn zero(p: f64) -> f64 { return p + 0.0; }
fn looped(p: f64, n: i64) -> f64 { let c = 1.5; let s = p; let i = 0; while i < n { s = s * c; i = i + 1; } return s; }
fn rt_start(sp: i64) -> i64 { return f2bits(pooled(1.0) + first(1.0) + other(1.0) + zero(1.0) + looped(1.0, sp)); }
"""
    prog = lower_program(rt.parse(src, "t.rt"))
    got = {f.name: pool_constants(f) for f in prog.functions}
    insts = {n: [i for b in f.blocks for i in b.insts] for n, f in got.items()}
    pooled = [i for i in insts["pooled"] if any(isinstance(a, lir.Imm) for a in i.args[1:2])]
    assert not [i for i in insts["pooled"] if i.op == "fconst"]
    assert sorted(i.op for i in pooled) == ["fadd", "fdiv", "fgt", "fmul"]
    for name in ("first", "other", "zero", "looped"):
        assert [i for i in insts[name] if i.op == "fconst"], name
        assert not [i for i in insts[name] if i.op in ("fadd", "fsub", "fmul", "fdiv", "fgt") and isinstance(i.args[1], lir.Imm)], name
    prog.functions = list(got.values())
    prog.check()                                    # lir.OPS's `F`: the pooled operand's kind


def test_the_constant_pool_is_sorted_aligned_and_what_the_code_reads():
    """alphac.lower.assemble.constant_pool: every x86-64 level's executable has each pooled
    binary64 once, in increasing order of its bits, 8 bytes apart from a 16-byte boundary, and
    every RIP-relative operand of the code that names one (capstone's decoding) reads its bits."""
    import capstone
    from alphac.elf.reader import Elf
    from alphac.lower.assemble import POOL
    from alphac.tools.mathexe import build
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    cs.detail = True
    for isa in ("x86_64", "x86_64-v3", "x86_64-v4"):
        blob = build("exp", isa)
        assert blob == build("exp", isa)
        elf = Elf(blob)
        syms = [sym for sec in elf.sections if sec.name == ".symtab" for sym in elf.symbols(sec)]
        pool = sorted((s.value, s.name) for s in syms if s.name.startswith(POOL))
        assert pool and pool[0][0] % 16 == 0 and [n for _, n in pool] == sorted({n for _, n in pool})
        assert [a - pool[0][0] for a, _ in pool] == [8 * k for k in range(len(pool))]
        ro, text = elf.section(".rodata"), elf.section(".text")
        word = lambda a: int.from_bytes(elf.data(ro)[a - ro.addr:a - ro.addr + 8], "little")   # noqa: E731
        assert all(word(a) == int(n[len(POOL):], 16) for a, n in pool)
        at, reads = dict(pool), 0
        for ins in cs.disasm(elf.data(text), text.addr):
            for op in ins.operands:
                if op.type == capstone.x86.X86_OP_MEM and op.mem.base == capstone.x86.X86_REG_RIP:
                    target = ins.address + ins.size + op.mem.disp
                    if pool[0][0] <= target <= pool[-1][0]:
                        assert target in at, (isa, ins.mnemonic, ins.op_str)
                        reads += 1
        assert reads >= len(pool), isa


def test_relu_and_where_select_their_bits_without_a_branch(tmp_path):
    """A relu's value and a where's (relu's derivative, here) are chosen by a mask of the
    comparison's bits, not by a branch, which on relu's data goes each way about half the time
    (issue 43: a fifth of a 64-256-256-10 relu MLP's step); the bits are the contract's
    (tests/test_digits.py, test_learner_fuzz.py and bench/mlp.py check them against the
    interpreter)."""
    from alphac import api
    rng = np.random.default_rng(3)
    np.save(tmp_path / "x.npy", rng.standard_normal((16, 4)))
    src = tmp_path / "r.alpha"
    src.write_text('learner r\ndata x = load("x.npy")\nparam W: f64[3, 4] = 0.5\n'
                   'loss(i) { let h = relu(W @ x[i]) ; sum(h * h) }\nupdate { W = W - 0.1 * grad(W) }\n')
    compiled = api.compile(src)
    for target in ("x86_64", "aarch64"):
        text = api.emit(compiled, src, api.build(compiled, src, target), "rt")
        grad = text.split("fn learner_grad(")[1].split("\nfn ")[0]
        assert "fge(bits2f(0x0000000000000000)" in grad and "rt_math_relu" not in grad, target
        assert "if fgt(" not in grad and "0 - fgt(" in grad, target


def test_a_shared_function_is_lowered_again_where_what_it_reads_differs():
    """lower_function reuses a runtime function's LIR across programs (the same parsed item)
    only where every name it reads means the same and its strings keep their names."""
    shared = rt.parse('''
fn f(p: i64) -> i64 { if p == 0 { refuse("cpu-level"); } let r = h(p); return p + K; }
fn rt_refuse(a: i64, b: i64, c: i64) { }
fn rt_start(sp: i64) -> i64 { return f(sp); }
''', "shared.rt")

    def lowered(after: str, before: str = ""):
        prog = lower_program(rt.parse(before, "b.rt") + list(shared) + rt.parse(after, "a.rt"))
        code = prog.function("f").dump()
        sym = code.split("addr ")[1].split()[0].strip(",").lstrip("@")
        text = {g.name: g.init for g in prog.globals}[sym]
        return code.replace(sym, "STR"), text

    h_i = "fn h(x: i64) -> i64 { return x; }\n"
    one = lowered("const K = 3;\n" + h_i)
    assert one[1] == b"refused: cpu-level\n\0"
    assert lowered("const K = 3;\n" + h_i) == one                       # reused
    # another function, lowered before f, names its string first: f's string has another name
    moved = lowered("const K = 3;\n" + h_i, 'fn a0(x: i64) { refuse("data-hash"); }\n')
    assert moved == one                    # the same code, its Sym naming its own string
    four = lowered("const K = 4;\n" + h_i)                               # a constant's value
    assert four != one and four[0] == one[0].replace("$3", "$4")
    assert lowered("const K = 3;\nfn h(x: i64) -> f64 { return 1.0; }")[0] != one[0]   # a signature


def test_wide_values_sink_to_their_use_and_no_further():
    """alphac.lower.fold.sink_wide: a sum's terms (and their loads) move down to the add that
    takes them; never past a store (a load), a redefinition of an operand, or a wend; a value
    defined twice stays."""
    from alphac.lower.fold import sink_wide
    from alphac.lower.lir import Block, Function, Imm, Inst, VReg
    i = lambda n: VReg(n, "i")
    z = lambda n: VReg(n, "z")
    p, j = i(1), i(2)
    body = [Inst("zloadx", z(10), (p, j)), Inst("zloadx", z(11), (p, j)),
            Inst("zmul", z(12), (z(10), z(10))), Inst("zmul", z(13), (z(11), z(11))),
            Inst("zloadx", z(14), (p, j)),
            Inst("zadd", z(20), (z(14), z(12))), Inst("zadd", z(20), (z(20), z(13))),
            Inst("zload", z(30), (p, Imm(0))), Inst("zmul", z(31), (z(30), z(30))),
            Inst("zstorex", None, (p, j, z(20))),                  # z30's load stays above it
            Inst("zloadx", z(40), (p, j)), Inst("add", j, (j, Imm(8))),   # its index redefined
            Inst("zsqrt", z(41), (z(40),)), Inst("wend", None, ()),
            Inst("zstorex", None, (p, j, z(31))), Inst("zstorex", None, (p, j, z(41)))]
    fn = Function("f", [p, j], None, [Block("b", body, Inst("ret", None, ()))], 50)
    got = [(x.op, x.dst) for x in sink_wide(fn).blocks[0].insts]
    want = [("zloadx", z(10)), ("zmul", z(12)), ("zloadx", z(14)), ("zadd", z(20)),
            ("zloadx", z(11)), ("zmul", z(13)), ("zadd", z(20)),
            ("zload", z(30)), ("zmul", z(31)), ("zstorex", None),
            ("zloadx", z(40)), ("add", j), ("zsqrt", z(41)), ("wend", None),
            ("zstorex", None), ("zstorex", None)]
    assert got == want
