"""Integer data (issue 47): `data tok: i64[N, T] = load("tok.npy")` holds ids.

- declared i64 (from an `<i8` file, a `|u1` file, or written as whole numbers) and used as an
  index and a label, a learner gives the bits of its f64-declared form on the interpreter (and
  from the `<i8` file on an x86-64 and an AArch64 executable: the ids are the same binary64
  values on every engine; the executables' `|u1` reader is tests/test_data.py's);
- converted, `f64(tok[i, 0])`, `f64(tok[i])`, the ids are the numbers of the f64 form; an
  element of i64 data read as a number unconverted (arithmetic, a function, a whole row, a
  slice) is E0125 at its position, `f64(...)` of anything else E0042; a float file for an i64 declaration, or one with an integer beyond 2^53,
  is E0060 naming the file and its dtype; `i64` on a param and a fractional literal are E0036;
  a held-out float file for i64 data is refused by `alphac eval` alike;
- a bad id in an i64 file is refused by name as an f64 one is (`data-label`, exit 133, naming the
  row), by the interpreter and by the executable, before the first step.
The random learner generator declares its ids i64 now and then (tests/learngen.py's `integers`;
tests/test_learner_fuzz.py runs them on every engine).
"""
import io
import subprocess

import numpy as np
import pytest

from test_gather import EMBED, run

TOKS = [[0, 2, 2], [1, 1, 3], [2, 0, 1], [0, 0, 0], [3, 2, 1], [1, 3, 3], [2, 2, 2],
        [0, 1, 2], [3, 3, 0], [1, 0, 2], [2, 3, 1], [0, 2, 3], [1, 1, 1]]
LITERAL = "\n".join(EMBED.split("\n")[1:3])          # `data tok = [[0, 2, 2], ...]`, two lines
BODY = EMBED.split("deployment")[0]
LABELLED = BODY.replace("0.5 * r^2", "0.5 * r^2 + v[0] * dot(onehot(tok[i, 1], 4), [0.5, -0.25, 0.125, 1.0])")


def npy(path, arr) -> None:
    buf = io.BytesIO()
    np.save(buf, arr)
    path.write_bytes(buf.getvalue())


def declared(text: str, decl: str) -> str:
    return text.replace(LITERAL, decl)


def test_same_bits_as_f64(tmp_path):
    """The f64 literal form's bits, from i64 declarations of three sources, on three engines."""
    want = {t: run(LABELLED, tmp_path, "f64", t) for t in (None, "x86_64", "aarch64")}
    assert want[None] == want["x86_64"] == want["aarch64"] and want[None].count("\n") == 28
    npy(tmp_path / "tok8.npy", np.asarray(TOKS, dtype="<i8"))
    npy(tmp_path / "tok1.npy", np.asarray(TOKS, dtype="|u1"))
    for k, decl in enumerate(('data tok: i64[13, 3] = load("tok8.npy")', 'data tok: i64[13, 3] = load("tok1.npy")',
                              LITERAL.replace("data tok", "data tok: i64[13, 3]"))):
        text = declared(LABELLED, decl)
        for target in (None, "x86_64", "aarch64") if k == 0 else (None,):   # executables: the <i8 file
            assert run(text, tmp_path, f"i{k}", target) == want[target], (decl, target)


def test_conversion_gives_the_numbers(tmp_path):
    """`f64(tok[i, 0])`, `f64(tok[i])`: the ids as numbers, the bits of the f64 form's `tok[i, 0]`."""
    use = " + 0.125 * v[1] * {}[i, 0] * sum({}[i])"
    f64 = LABELLED.replace("0.5 * r^2", "0.5 * r^2" + use.format("tok", "tok"))
    i64 = declared(LABELLED.replace("0.5 * r^2", "0.5 * r^2" + use.format("f64(tok", "f64(tok")
                                    .replace("[i, 0]", "[i, 0])").replace("[i])", "[i]))")),
                   LITERAL.replace("data tok", "data tok: i64[13, 3]"))
    assert "f64(tok[i, 0]) * sum(f64(tok[i]))" in i64
    for target in (None, "x86_64"):
        assert run(i64, tmp_path, "conv", target) == run(f64, tmp_path, "f64", target), target


def errors(tmp_path, text: str) -> list[tuple[str, str, str]]:
    """(code, message, the source text it points at) of each error compiling `text`."""
    from alphac.diag import CompileError
    from alphac.driver import compile_file
    src = tmp_path / "c.alpha"
    src.write_text(text)
    with pytest.raises(CompileError) as e:
        compile_file(src)
    return [(d.code, d.message, text[d.span.start:d.span.end]) for d in e.value.diagnostics]


def test_integer_data_used_as_a_number_is_E0125(tmp_path):
    i64 = declared(BODY, LITERAL.replace("data tok", "data tok: i64[13, 3]"))
    for use in ("tok[i, 0] * 0.5", "tanh(tok[i, 1])", "sum(tok[i])", "sum(tok[i, 0:2])",
                "where(tok[i, 0] > 1, 1.0, 0.0)", "dot(onehot(tok[i, 0] + 1, 5), w)"):
        got = errors(tmp_path, i64.replace("0.5 * r^2", f"0.5 * r^2 + {use}"))
        assert [c for c, _, _ in got] == ["E0125"] and got[0][1] == "`tok` is i64 data, read here as a number" \
            and got[0][2].startswith("tok[i"), (use, got)
    for use in ("f64(y[i])", "f64(0.5)", "f64(tok[i, 0], 1)"):        # f64(...) converts i64 data
        assert [c for c, _, _ in errors(tmp_path, i64.replace("0.5 * r^2", f"0.5 * r^2 + {use}"))] == ["E0042"], use
    assert errors(tmp_path, i64.replace("0.5 * r^2", "0.5 * r^2 + tok[i, 0] * 0.5"))[0][2] == "tok[i, 0]"


def test_integer_declarations_refused(tmp_path):
    npy(tmp_path / "tokf.npy", np.asarray(TOKS, dtype="<f8"))
    npy(tmp_path / "big.npy", np.asarray(TOKS, dtype="<i8") * 4 + (1 << 54))
    for decl, code, text in (
            ('data tok: i64[13, 3] = load("tokf.npy")', "E0060", "`tokf.npy` holds <f8 values, not integers"),
            ('data tok: i64[13, 3] = load("big.npy")', "E0060", "`big.npy` holds an integer beyond 2^53"),
            (LITERAL.replace("data tok", "data tok: i64[13, 3]").replace("[1, 1, 1]", "[1, 1.5, 1]"), "E0036",
             "`tok` is declared i64 but holds 1.5"),
            (LITERAL + "\nconst c: i64 = 2", "E0036", "`c` is declared i64, a type of data only")):
        got = errors(tmp_path, declared(BODY, decl))
        assert [c for c, _, _ in got] == [code] and got[0][1].startswith(text), (decl, got)


def test_bad_id_refused_by_name(tmp_path):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    from alphac.refusals import Refusal
    npy(tmp_path / "tok.npy", np.where(np.asarray(TOKS) == 3, 5, TOKS).astype("<i8"))
    text = declared(BODY, 'data tok: i64[13, 3] = load("tok.npy")')
    why = "tok[4, 0]: not a row of E, a whole number from 0 to 4"
    with pytest.raises(Refusal, match=why.replace("[", r"\[")) as e:
        run(text, tmp_path, "bad")
    assert e.value.name == "data-label"
    exe = tmp_path / "bad.exe"
    exe.write_bytes(build_learner(compile_file(tmp_path / "bad.alpha").learner, "x86_64").elf)
    exe.chmod(0o755)
    p = subprocess.run([str(exe), "--steps", "1"], capture_output=True, text=True, cwd=tmp_path)
    assert (p.returncode, p.stdout, p.stderr) == (133, "", f"refused: data-label ({why})\n")


def test_held_out_float_file_refused(tmp_path):
    from alphac.driver import compile_file
    from alphac.ir.score import EvalError, held_out
    npy(tmp_path / "tok.npy", np.asarray(TOKS, dtype="<i8"))
    npy(tmp_path / "test.npy", np.asarray(TOKS[:4], dtype="<f8"))
    (tmp_path / "l.alpha").write_text(declared(BODY, 'data tok: i64[13, 3] = load("tok.npy")'))
    lr = compile_file(tmp_path / "l.alpha").learner
    with pytest.raises(EvalError, match="--data tok: .*test.npy` holds <f8 values, not integers"):
        held_out(lr, [("tok", str(tmp_path / "test.npy"))])
    npy(tmp_path / "test.npy", np.asarray(TOKS[:4], dtype="<i8"))
    npy(tmp_path / "y.npy", np.zeros(4))
    assert held_out(lr, [("tok", str(tmp_path / "test.npy")), ("y", str(tmp_path / "y.npy"))]).nsamples == 4
