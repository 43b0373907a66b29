"""Generated documentation: the tables of codes become docs/diagnostics.md and docs/refusals.md,
and the binary formats' tables (alphac.formats) and the limits of the files the CLI reads
(alphac.files.LIMITS) the marked sections of docs/runtime.md and docs/checkpoints.md (between
`<!-- format:NAME -->` and `<!-- end format -->`).

`python -m alphac.tools.docs` rewrites them; tests check that the committed files equal what this
module generates, so a code or a field cannot change without its documentation.
"""
from __future__ import annotations

from pathlib import Path

from alphac import formats
from alphac.diag import CODES
from alphac.refusals import REFUSALS, TOOL_EXITS

FORMAT_DOCS = {"runtime.md": ("FRAME", "FRAME_KINDS", "READ_LIMITS"),
               "checkpoints.md": ("CKPT_HEADER", "CKPT_RECORD")}


def diagnostics_md() -> str:
    out = ["# Diagnostic codes", "",
           "Generated from `alphac/diag.py` by `python -m alphac.tools.docs`; `alphac explain CODE` "
           "prints the same text. Errors are `E`, warnings `W`. Each code has a golden test: "
           "`tests/diagnostics/CODE.alpha` and the exact message in `CODE.expected`.", ""]
    for code in sorted(CODES):
        title, text = CODES[code]
        out += [f"## {code}: {title}", "", text, ""]
    return "\n".join(out)


def refusals_md() -> str:
    out = ["# Refusals", "",
           "Generated from `alphac/refusals.py` by `python -m alphac.tools.docs`. A program that "
           "refuses prints one line `refused: NAME` on standard error and exits with the code "
           "below; it publishes nothing. The executables, the reference interpreter and the "
           "launcher use the same table; where the program knows more, it adds what was "
           "wrong, and what to do, in parentheses on the same line: `refused: NAME (DETAIL)` "
           "(an executable's `usage` names the argument, after its usage line; `nvidia-open` the "
           "device file). `alphac explain NAME` (or the exit code) prints a row.", "",
           "| name | exit code | when |", "| --- | --- | --- |"]
    for name, (code, when) in sorted(REFUSALS.items(), key=lambda kv: kv[1][0]):
        out.append(f"| `{name}` | {code} | {when} |")
    out += ["", "## The `alphac` command's own exit codes", "",
            "Below the refusals' (`alphac --help` prints the same table): a defect of alphac's has "
            "a code of its own, never one that an answer (a difference found, a refusal) has.", "",
            "| exit code | when |", "| --- | --- |"]
    out += [f"| {code} | {when} |" for code, when in sorted(TOOL_EXITS.values())]
    return "\n".join(out) + "\n"


def format_table(name: str) -> str:
    """The markdown table of one shared format (alphac.formats)."""
    if name == "READ_LIMITS":
        from alphac.files import LIMITS, MAX_DEPTH
        rows = [f"| {what} | `{kind}` | {limit:,} ({limit >> 20} MiB) |" if limit >= 1 << 20 else
                f"| {what} | `{kind}` | {limit:,} |" for kind, (limit, what) in LIMITS.items()]
        return "\n".join(["| file | kind | most bytes read |", "| --- | --- | --- |"] + rows
                         + ["", f"JSON nests at most {MAX_DEPTH} objects or arrays deep."])
    if name == "FRAME_KINDS":
        rows = [f"| {code} | `{kind}` |" for kind, code in formats.FRAME_KINDS.items()]
        return "\n".join(["| kind | message |", "| --- | --- |"] + rows)
    lay = getattr(formats, name)
    head = [f"| offset | type | {lay.title} ({lay.size} bytes) |", "| --- | --- | --- |"]
    return "\n".join(head + lay.doc_rows())


def with_formats(text: str) -> str:
    """`text` with every marked format section regenerated."""
    out, skipping = [], False
    for line in text.split("\n"):
        if skipping and line != "<!-- end format -->":
            continue
        skipping = False
        out.append(line)
        if line.startswith("<!-- format:") and line.endswith(" -->"):
            out.append(format_table(line[len("<!-- format:"):-len(" -->")]))
            skipping = True
    return "\n".join(out)


def main() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "diagnostics.md").write_text(diagnostics_md())
    (docs / "refusals.md").write_text(refusals_md())
    for name in FORMAT_DOCS:
        (docs / name).write_text(with_formats((docs / name).read_text()))


if __name__ == "__main__":
    main()
