"""`alphac plot RECORD`: the loss curve of a run, from its record's `loss` list (docs/language.md,
"The loss as it trains").

On standard output: a chart of the mean loss per step in text (one column per step or per group
of steps, the last step's value in each), the first and last values, and the lowest; with
`-o OUT.svg`, the same curve as an SVG image (no dependency: the file is written here). The
values are the record's exact means (their bits), shown in decimal. A record that cannot be read
is `record-malformed`; a record without losses (a learner without a loss, a record from before)
says so.
"""
from __future__ import annotations

import struct
from pathlib import Path

from alphac.files import write_file
from alphac.refusals import Refusal
from alphac.tools.launch import is_hex, read_record

ROWS, COLS = 12, 64


def curve(record: str | Path) -> list[tuple[int, float]]:
    """[(step, mean loss)] of the record, in step order."""
    path = Path(record)
    rec = read_record(path)          # bounded: records of millions of steps (alphac.files.LIMITS)
    loss = rec.get("loss", [])
    if not isinstance(loss, list) or not all(
            isinstance(e, dict) and isinstance(e.get("step"), int) and is_hex(e.get("mean"), 16)
            for e in loss):
        raise Refusal("record-malformed", f"{path}: `loss` is not a list of steps and means")
    return sorted((e["step"], struct.unpack(">d", bytes.fromhex(e["mean"]))[0]) for e in loss)


def chart(points: list[tuple[int, float]]) -> str:
    """The curve in text: ROWS lines of at most COLS columns, the loss axis labelled."""
    g = min(COLS, len(points))
    groups = [points[k * len(points) // g:(k + 1) * len(points) // g] for k in range(g)]
    values = [g[-1][1] for g in groups]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    level = [round((v - lo) / span * (ROWS - 1)) for v in values]
    lines = []
    for row in range(ROWS - 1, -1, -1):
        label = f"{lo + span * row / (ROWS - 1):>12.6g} |" if row in (0, ROWS - 1) else " " * 13 + "|"
        lines.append(label + "".join("*" if h == row else " " for h in level).rstrip())
    lines.append(" " * 13 + "+" + "-" * len(values))
    first, last = f"step {points[0][0]}", f"step {points[-1][0]}"
    lines.append(" " * 14 + first + " " + last.rjust(max(1, len(values) - len(first) - 1)))
    return "\n".join(lines)


def svg(points: list[tuple[int, float]]) -> str:
    w, h, pad = 640, 320, 40
    lo, hi = min(v for _, v in points), max(v for _, v in points)
    span, steps = (hi - lo) or 1.0, max(1, points[-1][0] - points[0][0])
    xy = " ".join(f"{pad + (s - points[0][0]) / steps * (w - 2 * pad):.2f},"
                  f"{h - pad - (v - lo) / span * (h - 2 * pad):.2f}" for s, v in points)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}">\n<rect width="{w}" height="{h}" fill="white"/>\n'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{xy}"/>\n'
            f'<text x="{pad}" y="{pad - 10}" font-size="12">mean loss {hi:.6g} .. {lo:.6g}, '
            f'steps {points[0][0]}..{points[-1][0]}</text>\n</svg>\n')


def plot(record: str | Path, out: str | Path | None) -> str:
    """The text report; with `out`, the SVG written there."""
    points = curve(record)
    if not points:
        return "no losses in this record (a learner without a loss, or a record from before)\n"
    if out is not None:
        write_file(out, svg(points).encode(), 0o644)
    best = min(points, key=lambda p: p[1])
    return (chart(points) + f"\nfirst {points[0][1]!r} (step {points[0][0]}), last "
            f"{points[-1][1]!r} (step {points[-1][0]}), lowest {best[1]!r} (step {best[0]})\n")
