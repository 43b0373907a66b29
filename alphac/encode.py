"""The encoders of every string alphac writes into a script, a YAML document or a JSON document.

What it does
    One encoder per output language, used by every writer (alphac slurm's batch script, alphac
    k8s's manifests, the run records, build manifests, roles.json, slurm.json):
    - `shell_word(s)`: a bash word that reads back as exactly `s`: `s` itself when it is made of
      characters bash never treats specially, else `'...'`, or `$'...'` (ANSI-C quoting) with
      every character outside printable ASCII as its UTF-8 bytes (`\\xHH`, the same in every
      locale), and `'` and `\\`, escaped. The word is one line of printable ASCII, so it is
      also safe in a comment or a here-document line.
    - `yaml_scalar(s)`: a YAML double-quoted scalar that any YAML 1.1 or 1.2 parser reads back
      as exactly `s`: printable ASCII as itself (`"` and `\\` escaped), everything else as
      `\\xXX`, `\\uXXXX` or `\\UXXXXXXXX` (so no line break, NEL, U+2028, U+2029, BOM or control
      reaches the document raw). `yaml_comment(text)` makes comment lines of any text the same way.
    - `json_text(value, indent)`: JSON with sorted keys, ASCII only (ensure_ascii: a NUL, a
      U+2028 or a lone surrogate becomes an escape, so the text is valid UTF-8 and one line per
      value) and no NaN or infinity (refused: they are not JSON).
Requires
    Strings (Python `str`).
Guarantees
    Each encoder refuses, with `Unencodable` (a ValueError saying which character and why), a
    string its language cannot carry: a NUL in a shell word (bash strings end at NUL), a lone
    surrogate in a shell word or a YAML scalar (not a character: no UTF-8 holds it). Anything
    else reads back exactly: tests/test_encode.py parses the output with bash and PyYAML.
"""
from __future__ import annotations

import json
import re


class Unencodable(ValueError):
    """A string the output language cannot carry; the message names the character."""


SHELL_PLAIN = re.compile(r"[A-Za-z0-9_./:=@%+,-]+\Z")       # never special to bash


def _surrogate(s: str, what: str) -> None:
    bad = next((c for c in s if 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:
        raise Unencodable(f"{what} {s!r} holds U+{ord(bad):04X}, a lone surrogate (bytes that "
                          "are not UTF-8), which no script or YAML document can carry")


def _escape(c: str, short: dict[str, str]) -> str:
    o = ord(c)
    if c in short:
        return short[c]
    if 0x20 <= o < 0x7F:
        return c
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


SHELL_SHORT = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def shell_word(s: str, what: str = "the string") -> str:
    """`s` as one bash word of printable ASCII (see the module's docstring)."""
    if "\0" in s:
        raise Unencodable(f"{what} {s!r} holds a NUL, which bash cannot carry")
    _surrogate(s, what)
    if SHELL_PLAIN.match(s) and not s.startswith(("=", "%")):
        return s
    if all(0x20 <= ord(c) < 0x7F for c in s):
        return "'" + s.replace("'", "'\\''") + "'"
    # each character outside printable ASCII as its UTF-8 bytes, \xHH each (always 2 digits,
    # which is all bash's \x takes): bytes, so the same in every locale (bash's \u is not)
    return "$'" + "".join(SHELL_SHORT.get(c) or (c if 0x20 <= ord(c) < 0x7F else "".join(
        f"\\x{b:02x}" for b in c.encode())) for c in s) + "'"


YAML_SHORT = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0",
              "\x85": "\\N", "\u2028": "\\L", "\u2029": "\\P"}


def yaml_scalar(s: str, what: str = "the string") -> str:
    """`s` as a YAML double-quoted scalar of printable ASCII (see the module's docstring)."""
    _surrogate(s, what)
    return '"' + "".join(_escape(c, YAML_SHORT) for c in s) + '"'


def yaml_comment(text: str) -> str:
    """`text` as YAML comment lines, one per line of `text` ("\\n"), each of printable ASCII:
    any other character is shown escaped as in a double-quoted scalar (never a line break)."""
    return "".join("#" + (" " + yaml_scalar(line)[1:-1].replace('\\"', '"') if line else "") + "\n"
                   for line in text.split("\n"))


def json_text(value, indent: int | None = None, compact: bool = False) -> str:
    """`value` as JSON text: sorted keys, ASCII only, no NaN or infinity (Unencodable);
    `compact`: no spaces after the separators (a safetensors header)."""
    try:
        return json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=True, allow_nan=False,
                          separators=(",", ":") if compact else None)
    except ValueError as e:
        raise Unencodable(f"not JSON: {e}") from None
