"""Generated documentation: the tables of codes become docs/diagnostics.md and docs/refusals.md.

`python -m alphac.docs` rewrites both; tests check that the committed files equal what this
module generates, so a code cannot be added without its documentation.
"""
from __future__ import annotations

from pathlib import Path

from alphac.diag import CODES
from alphac.refusals import REFUSALS


def diagnostics_md() -> str:
    out = ["# Diagnostic codes", "",
           "Generated from `alphac/diag.py` by `python -m alphac.docs`; `alphac explain CODE` "
           "prints the same text. Errors are `E`, warnings `W`. Each code has a golden test: "
           "`tests/diagnostics/CODE.alpha` and the exact message in `CODE.expected`.", ""]
    for code in sorted(CODES):
        title, text = CODES[code]
        out += [f"## {code}: {title}", "", text, ""]
    return "\n".join(out)


def refusals_md() -> str:
    out = ["# Refusals", "",
           "Generated from `alphac/refusals.py` by `python -m alphac.docs`. A program that "
           "refuses prints one line `refused: NAME` on standard error and exits with the code "
           "below; it publishes nothing. The executables, the reference interpreter and the "
           "launcher use the same table.", "",
           "| name | exit code | when |", "| --- | --- | --- |"]
    for name, (code, when) in sorted(REFUSALS.items(), key=lambda kv: kv[1][0]):
        out.append(f"| `{name}` | {code} | {when} |")
    return "\n".join(out) + "\n"


def main() -> None:
    docs = Path(__file__).resolve().parent.parent / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "diagnostics.md").write_text(diagnostics_md())
    (docs / "refusals.md").write_text(refusals_md())


if __name__ == "__main__":
    main()
