"""The front end never crashes: token soup, mutated examples, truncations and random bytes
always give diagnostics (or a clean learner), never a Python exception.

Crashers found by these properties are kept below as regression cases (`CRASHERS`)."""
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from alphac.diag import Sink, Source
from alphac.driver import front_end
from conftest import EXAMPLES, alphac

EXAMPLE_TEXTS = sorted(p.read_text() for p in EXAMPLES.glob("*.alpha"))
TOKENS = ["learner", "data", "const", "param", "state", "loss", "update", "let", "deployment",
          "f64", "x", "w", "i", "grad", "dot", "sum", "sqrt", "load", "exp", "(", ")", "[", "]",
          "{", "}", ",", ":", "=", "+", "-", "*", "/", "^", ";", "\n", "0", "1", "2.5", "1e-8",
          "0x1p3", '"x.npy"', "#c", "..", "@", " ", "1e999", "\t", "é", "\x00"]
FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def front(text: str):
    sink = Sink()
    _, learner = front_end(Source("fuzz.alpha", text), sink, Path("/nonexistent"))
    rendered = [d.render() for d in sink.sorted()]      # rendering never raises either
    assert (learner is not None) == sink.ok
    assert all(r for r in rendered)
    return learner, sink


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_token_soup(tokens):
    front(" ".join(tokens))


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text):
    learner, sink = front(text)
    if not text.lstrip().startswith("learner"):
        assert not sink.ok


@FUZZ
@given(st.sampled_from(EXAMPLE_TEXTS), st.data())
def test_truncations(text, data):
    cut = data.draw(st.integers(0, len(text)))
    front(text[:cut])


@FUZZ
@given(st.sampled_from(EXAMPLE_TEXTS), st.data())
def test_mutations(text, data):
    chars = list(text)
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(chars)))
        kind = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        tok = data.draw(st.sampled_from(TOKENS))
        if kind == "insert":
            chars[pos:pos] = tok
        elif kind == "delete":
            del chars[pos:pos + data.draw(st.integers(1, 8))]
        else:
            chars[pos:pos + len(tok)] = tok
    front("".join(chars))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_through_the_cli(tmp_path_factory, raw):
    p = tmp_path_factory.mktemp("fuzz") / "bytes.alpha"
    p.write_bytes(raw)
    code, out, err = alphac("check", p)
    assert code == 1 and "error[" in err and "Traceback" not in err


# Inputs that once crashed the front end; each must now give diagnostics.
CRASHERS = [
    "learner t\nstate s: f64[2, 2, 2] = 0\nupdate {\n s = s\n}\n",
    "learner t\nconst a = [[1], [2]]\nconst b = a[0][0]\nstate s: f64 = b\nupdate {\n s = s\n}\n",
    "learner t\ndata x = [1.0]\nparam w: f64 = 0\nloss(i) = w * x[i, 0]\nupdate {\n w = w\n}\n",
    "learner t\nstate s: f64 = 1\nupdate {\n s = s\n}\nupdate {\n}\nloss(i) = 1\nloss(j) = 2\n",
    "learner t\nconst c = 1 / 0\n",
    "learner t\nconst c = sqrt(-1)\n",
    "learner t\n" + "const c = " + "(" * 400 + "1" + ")" * 400 + "\n",
    "learner t\nconst c = " + "-" * 2000 + "1\n",
]


@pytest.mark.parametrize("text", CRASHERS)
def test_crashers(text):
    front(text)
