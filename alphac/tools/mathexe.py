"""A filter executable for one of the contract's functions: binary64 arguments in, results out.

`build(name, isa)` links an executable from the target's prelude, the core runtime, the
function's generated code (alphac.math.rt_source, exactly what a learner's executable gets)
and the main below. It reads little-endian binary64 arguments from stdin (FUNCTIONS[name] per
call) and writes each result's 8 bytes to stdout; `exe R` evaluates each chunk of inputs R
times (the benchmark's repeat count), and exits 0, or 1 on an I/O error, 2 on a bad argument.

Used by tests/test_math.py (the oracle comparison on both ISAs), tests/math_soak.py
(`make math-soak`) and bench/functions.py. Requires the compiler; guarantees nothing beyond the
function's own contract.
"""
from __future__ import annotations

CHUNK = 65536                             # bytes of arguments read at a time

MAIN = """
global math_in: [u8; {chunk}];
global math_out: [u8; {chunk}];

fn read_full(p: i64 writes n, n: i64) -> i64 {{
    let got = 0;
    while got < n {{
        let k = syscall(SYS_read, 0, p + got, n - got);
        if k < 0 {{ return -1; }}
        if k == 0 {{ return got; }}
        got = got + k;
    }}
    return got;
}}

fn main(argc: i64, argv: i64) -> i64 {{
    let repeat = 1;
    if argc > 1 {{
        repeat = rt_parse_dec(load64(argv + 8));
        if repeat < 1 {{ return 2; }}
    }}
    while 1 {{
        let n = read_full(math_in, {chunk});
        if n < 0 {{ return 1; }}
        let calls = udiv(n, {width});
        let r = 0;
        while r < repeat {{
            let k = 0;{lanes}
            while k < calls {{
                let p = math_in + {width} * k;
                storef(math_out + 8 * k, {call});
                k = k + 1;
            }}
            r = r + 1;
        }}
        if rt_write_all(1, math_out, 8 * calls) < 0 {{ return 1; }}
        if n < {chunk} {{ return 0; }}
    }}
    return 0;
}}
"""


LANES = """
            while k + {w} <= calls {{
                {store}(math_out + 8 * k, {load}(math_in + 8 * k));
                {fn}(math_out + 8 * k);
                k = k + {w};
            }}"""


def source(name: str, lanes: int = 0) -> str:
    """The filter's program; with `lanes` (4, 8) the inputs go through the vector function
    alphac.math.lanes writes, `lanes` at a time (the last few, if any, through the scalar one)."""
    from alphac.math import FUNCTIONS, rt_name, rt_source
    from alphac.math.lanes import VOCAB, lane_name, lane_source
    arity = FUNCTIONS[name]
    args = ", ".join(f"loadf(p + {8 * i})" for i in range(arity))
    vec = LANES.format(w=lanes, load=VOCAB[lanes][0], store=VOCAB[lanes][1],
                       fn=lane_name(name, lanes)) if lanes else ""
    return rt_source([name]) + (lane_source([name], lanes) if lanes else "") + MAIN.format(
        chunk=CHUNK, width=8 * arity, call=f"{rt_name(name)}({args})", lanes=vec)


def build(name: str, isa: str, lanes: int = 0) -> bytes:
    from alphac.build import link_program, runtime_closure, target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    tgt = target(isa)
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core")
    own = rt.parse(source(name, lanes), f"math_{name}.rt")       # generated: its loops size its buffers
    return link_program(lower_program(items + own, {}, generated=frozenset(map(id, own))), tgt)[0]
