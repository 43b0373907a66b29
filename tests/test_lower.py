"""The shared lowering layer: parallel moves, the allocator's guarantees, the runtime language."""
import pytest
from hypothesis import given, settings, strategies as st

from alphac.lower import lir, rt
from alphac.lower.regalloc import RegFile, allocate, intervals, parallel_moves
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
    regs = sorted(iv, key=lambda v: v.id)
    for x in regs:
        for y in regs:
            if x.id < y.id and alloc.of(x) == alloc.of(y):
                (a0, a1), (b0, b1) = iv[x], iv[y]
                assert a1 < b0 or b1 < a0, (x, y)
        if any(iv[x][0] < c < iv[x][1] for c in calls) and alloc.of(x)[0] == "reg":
            assert alloc.of(x)[1] in SMALL.callee_saved
    assert alloc.nslots > 0               # 15 values live at once do not fit in 5 registers


@pytest.mark.parametrize("bad, msg", [
    ("fn rt_start(sp: i64) -> i64 { return q; }", "unknown name"),
    ("fn rt_start(sp: i64) -> i64 { return 1.5; }", "returns f64"),
    ("fn rt_start(sp: i64) -> i64 { let x = 1.0; return sp + x; }", "of i64 and f64"),
    ("fn rt_start(sp: i64) -> i64 { break; }", "outside a loop"),
    ("fn rt_start(sp: i64) -> i64 { return h(1); }", "unknown function"),
    ("fn f() {} fn f() {} fn rt_start(sp: i64) -> i64 { return 0; }", "defined twice"),
    ("fn rt_start(sp: i64) -> i64 { return 1 $ 2; }", "unexpected character"),
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
