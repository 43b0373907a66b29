"""`alphac plot RECORD`: the loss curve of a run, from its record's `loss` list (docs/language.md,
"The loss as it trains").

On standard output: a chart of the mean loss per step in text (one column per step or per group
of steps, the last step's value in each), the first and last values, and the lowest; with
`-o OUT.svg`, the same curve as an SVG image (no dependency: the file is written here). The
values are the record's exact means (their bits), shown in decimal. A diverged run's means that
are not finite (`inf`, `-inf`, `nan`: a learning rate too large, say) are drawn on rows (bands in
the SVG) of their own, labelled with what they are, and counted under the chart; the scale is
the finite ones'. A record that cannot be read
is `record-malformed`; a record without losses (a learner without a loss, a record from before)
says so.
"""
from __future__ import annotations

import math
import struct
from pathlib import Path

from alphac.files import write_file
from alphac.refusals import Refusal
from alphac.tools.record import is_hex, read_record

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


def kind(v: float) -> str | None:
    """What a non-finite mean is, as it is drawn and named (`inf`, `-inf`, `nan`); None when
    finite."""
    return None if math.isfinite(v) else "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"


def scale(points: list[tuple[int, float]]) -> tuple[float, float]:
    """The finite means' range (lo, hi); (0, 1) when none is finite."""
    finite = [v for _, v in points if kind(v) is None]
    return (min(finite), max(finite)) if finite else (0.0, 1.0)


def height(v: float, lo: float, hi: float) -> float:
    """Where finite v lies between lo and hi, from 0 to 1, without overflow (their difference
    can exceed the largest double: each is halved first)."""
    span = hi / 2 - lo / 2
    return (v / 2 - lo / 2) / span if span > 0 else 0.5


def chart(points: list[tuple[int, float]]) -> str:
    """The curve in text: ROWS lines of at most COLS columns, the loss axis labelled; a step
    whose mean is not finite is drawn in a row of its own above (`inf`) or below (`-inf`, `nan`)
    the finite ones, labelled with what it is."""
    g = min(COLS, len(points))
    groups = [points[k * len(points) // g:(k + 1) * len(points) // g] for k in range(g)]
    values = [g[-1][1] for g in groups]
    lo, hi = scale(points)
    rows = [(name, [kind(v) == name for v in values]) for name in ("inf",)
            if any(kind(v) == name for v in values)]
    for row in range(ROWS - 1, -1, -1):
        label = f"{lo + (hi - lo) * row / (ROWS - 1) if math.isfinite(hi - lo) else (lo, hi)[row > 0]:.6g}" \
            if row in (0, ROWS - 1) else ""
        rows.append((label, [kind(v) is None and round(height(v, lo, hi) * (ROWS - 1)) == row
                             for v in values]))
    rows += [(name, [kind(v) == name for v in values]) for name in ("-inf", "nan")
             if any(kind(v) == name for v in values)]
    lines = [f"{label:>12} |" + "".join("*" if on else " " for on in marks).rstrip()
             for label, marks in rows]
    lines.append(" " * 13 + "+" + "-" * len(values))
    first, last = f"step {points[0][0]}", f"step {points[-1][0]}"
    lines.append(" " * 14 + first + " " + last.rjust(max(1, len(values) - len(first) - 1)))
    return "\n".join(lines)


def svg(points: list[tuple[int, float]]) -> str:
    """The curve as an SVG image: the finite means as a line (broken where a mean is not
    finite), each non-finite one as a labelled mark on a band of its own (inf at the top, -inf
    and nan at the bottom)."""
    w, h, pad = 640, 320, 40
    lo, hi = scale(points)
    steps = max(1, points[-1][0] - points[0][0])
    x = lambda s: f"{pad + (s - points[0][0]) / steps * (w - 2 * pad):.2f}"
    lines, marks, run = [], [], []
    for s, v in points + [(None, math.nan)]:
        if s is not None and kind(v) is None:
            run.append(f"{x(s)},{h - pad - height(v, lo, hi) * (h - 2 * pad):.2f}")
            continue
        if run:
            lines.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" '
                         f'points="{" ".join(run)}"/>\n')
        run = []
        if s is not None:
            marks.append((s, kind(v)))
    band = {"inf": pad / 2, "-inf": h - pad / 4, "nan": h - pad / 4}
    colour = {"inf": "#d62728", "-inf": "#9467bd", "nan": "#7f7f7f"}
    shown = sorted({k for _, k in marks})
    dots = "".join(f'<circle cx="{x(s)}" cy="{band[k]:.2f}" r="2" fill="{colour[k]}"><title>step '
                   f'{s}: {k}</title></circle>\n' for s, k in marks)
    legend = "".join(f'<text x="{w - pad - 150 + 50 * n}" y="{pad - 10}" font-size="12" '
                     f'fill="{colour[k]}">&#9679; {k}</text>\n' for n, k in enumerate(shown))
    finite = f"mean loss {hi:.6g} .. {lo:.6g}" if len(marks) < len(points) else "no finite mean loss"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}">\n<rect width="{w}" height="{h}" fill="white"/>\n'
            + "".join(lines) + dots + legend +
            f'<text x="{pad}" y="{pad - 10}" font-size="12">{finite}, '
            f'steps {points[0][0]}..{points[-1][0]}</text>\n</svg>\n')


def plot(record: str | Path, out: str | Path | None) -> str:
    """The text report; with `out`, the SVG written there."""
    points = curve(record)
    if not points:
        return "no losses in this record (a learner without a loss, or a record from before)\n"
    if out is not None:
        write_file(out, svg(points).encode(), 0o644)
    ordered = [p for p in points if kind(p[1]) != "nan"]       # nan is neither low nor high
    best = f"lowest {min(ordered, key=lambda p: p[1])[1]!r} (step {min(ordered, key=lambda p: p[1])[0]})" \
        if ordered else "no lowest (every mean is nan)"
    bad = {}
    for s, v in points:
        if kind(v) is not None:
            bad.setdefault(kind(v), []).append(s)
    diverged = "".join(f"{len(steps)} step{'s' * (len(steps) != 1)} with mean {k} (the first at step "
                       f"{steps[0]})\n" for k, steps in sorted(bad.items()))
    return (chart(points) + f"\nfirst {points[0][1]!r} (step {points[0][0]}), last "
            f"{points[-1][1]!r} (step {points[-1][0]}), {best}\n" + diverged)
