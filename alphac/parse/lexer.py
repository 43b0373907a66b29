"""The Alpha lexer: source text -> tokens with spans.

Requires: a `Source`. Guarantees: never raises on any input; every bad character becomes an
E000x diagnostic and lexing continues. Newlines are tokens (statements end at a line end or
`;`), except inside ( ) and [ ], where they are ignored, as in Python; so array literals may span
lines. `#` starts a comment to the end of the line.

Numbers are kept as text and their binary64 value (Python's `float()`, the nearest double; hex
floats through `float.fromhex`); one whose value rounds to infinity is E0004. Integer-looking
literals also carry their integer value, since dimensions and indices are integers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from alphac.diag import Sink, Source, Span
from alphac.formats import NAME_MAX

KEYWORDS = {"learner", "data", "const", "param", "state", "loss", "predict", "update", "let",
            "deployment", "strategy", "f64", "batch", "order", "contract", "optimizer", "def"}
DIGITS = "0123456789"
PUNCT = {"+", "-", "*", "/", "^", "=", "(", ")", "[", "]", "{", "}", ",", ":", ";", ".",
         "..", "@", "<", ">"}
COMPARISONS = ("<=", ">=", "==", "!=")      # two-character punctuation (besides `..`)


@dataclass(frozen=True)
class Token:
    kind: str          # "name" | "kw" | "num" | "str" | "punct" | "nl" | "eof"
    text: str
    span: Span
    value: object = None   # float for numbers (and int in `ival`), str for strings
    ival: int | None = None

    def is_(self, kind: str, text: str | None = None) -> bool:
        return self.kind == kind and (text is None or self.text == text)


def _number(text: str) -> tuple[float, int | None] | None:
    """(binary64 value, integer value or None); the value is infinite when the literal overflows
    binary64, and None means the literal is malformed."""
    try:
        if text.lower().startswith("0x"):
            if "p" in text.lower() or "." in text:
                return float.fromhex(text), None
            v = int(text, 16)
            return float(v), v
        value = float(text)
    except OverflowError:
        return math.inf, None
    except ValueError:
        return None
    finite = text.isdigit() and math.isfinite(value)    # so at most 309 significant digits
    return value, int(text.lstrip("0") or "0") if finite else None


def _short(word: str) -> str:
    return word if len(word) <= 24 else f"{word[:10]}...{word[-10:]}"


def lex(source: Source, sink: Sink) -> list[Token]:
    text, n = source.text, len(source.text)
    out: list[Token] = []
    depth = 0
    i = 0

    def span(a: int, b: int) -> Span:
        return Span(source, a, b)

    while i < n:
        c = text[i]
        if c == "\n":
            if depth == 0:
                out.append(Token("nl", "\n", span(i, i + 1)))
            i += 1
        elif c in " \t\r":
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif (c.isascii() and c.isalpha()) or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_") and text[j].isascii():
                j += 1
            word = text[i:j]
            if len(word) > NAME_MAX:
                sink.error("E0005", span(i, j), f"a name of {len(word)} characters; names have at "
                           f"most {NAME_MAX}", hint="checkpoints and manifests record names whole")
            out.append(Token("kw" if word in KEYWORDS else "name", word, span(i, j)))
            i = j
        elif c in DIGITS or (c == "." and i + 1 < n and text[i + 1] in DIGITS):
            j = i
            if text.startswith(("0x", "0X"), i):
                j += 2
                while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "."
                                                       or (text[j] in "+-" and text[j - 1] in "pP")):
                    j += 1
            else:
                while j < n and (text[j] in DIGITS or text[j] == "."):
                    if text[j] == "." and j + 1 < n and text[j + 1] == ".":
                        break                      # `0..8` is a range, not `0.` `.8`
                    j += 1
                if j < n and text[j] in "eE":
                    k = j + 1
                    if k < n and text[k] in "+-":
                        k += 1
                    if k < n and text[k] in DIGITS:
                        j = k
                        while j < n and text[j] in DIGITS:
                            j += 1
                while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                    j += 1                        # swallow junk like `1.5x` into one bad token
            word = text[i:j]
            parsed = _number(word)
            if parsed is None or math.isinf(parsed[0]):
                if parsed is None:
                    sink.error("E0003", span(i, j), f"malformed number `{word}`")
                else:
                    sink.error("E0004", span(i, j), f"`{_short(word)}` overflows binary64",
                               hint="the largest finite binary64 is 1.7976931348623157e308")
                out.append(Token("num", word, span(i, j), 0.0, 0))
            else:
                out.append(Token("num", word, span(i, j), parsed[0], parsed[1]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 1
            if j >= n or text[j] != '"':
                sink.error("E0002", span(i, j), "unterminated string",
                           hint='close it with `"` on the same line')
                out.append(Token("str", text[i:j], span(i, j), text[i + 1:j]))
                i = j
            else:
                out.append(Token("str", text[i:j + 1], span(i, j + 1), text[i + 1:j]))
                i = j + 1
        else:
            two = text[i:i + 2]
            if two == ".." or two in COMPARISONS:
                out.append(Token("punct", two, span(i, i + 2)))
                i += 2
                continue
            if c in PUNCT:
                if c in "([":
                    depth += 1
                elif c in ")]":
                    depth = max(0, depth - 1)
                elif c in "{}":
                    depth = 0                    # a brace resets bracket nesting: recovery
                out.append(Token("punct", c, span(i, i + 1)))
                i += 1
            else:
                shown = c if c.isprintable() and c.isascii() else f"U+{ord(c):04X}"
                sink.error("E0001", span(i, i + 1), f"unexpected character `{shown}`")
                i += 1
    out.append(Token("nl", "\n", span(n, n)))
    out.append(Token("eof", "", span(n, n)))
    return out
