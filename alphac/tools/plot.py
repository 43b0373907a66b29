"""`alphac plot RECORD... [-o OUT.svg] [--log]`: the loss curves of runs, from their records'
`loss` lists (docs/runtime.md, "The launcher and its run records").

A record continues another when it trains the same learner (its `identity.learner` digest) and
its first step is the other's last step plus one: a run resumed from the other's checkpoint
(the runtime counts steps from the checkpoint's, so a resumption's steps carry on). Such
records are one curve, labelled with their directories' names joined by `+`; every other
record is a curve of its own, labelled with its directory's name.

On standard output: a chart in text (one column per step or per span of steps, each curve's
values in that span drawn from its lowest row to its highest, a mark per curve), the loss axis
labelled at the top and the bottom with the highest and the lowest finite mean written as the
summary writes them (the shortest decimal that reads back to the bits), then each curve's first,
last and lowest mean. With `-o OUT.svg`, a figure as matplotlib draws one: a frame with ticks and
values, the step on x, the mean loss on y (linear, or `--log`), a title, a line per curve in
matplotlib's colour cycle and a legend (no dependency: the file is written here). Means that
are not finite (`inf`, `-inf`, `nan`: a learning rate too large, say) and, with `--log`, those
not above zero (`<=0`) are drawn on rows (bands in the SVG) of their own, labelled with what
they are, and counted under the chart; the scale is the others'. A record that cannot be read
is `record-malformed`; a record without losses says so.
"""
from __future__ import annotations

import math
import struct
from html import escape
from pathlib import Path

from alphac.files import write_file
from alphac.refusals import Refusal
from alphac.tools.record import is_hex, read_record

ROWS, COLS = 12, 64
MARKS = "*+ox#%@&"                                  # the text chart's mark of curve k (mod 8)
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")         # matplotlib's default cycle (tab10)
ABOVE, BELOW = ("inf",), ("<=0", "-inf", "nan")    # the off-scale rows, above and below


def read_run(record: str | Path) -> tuple[str, str | None, list[tuple[int, float]], str]:
    """(its directory's name, its learner's digest, [(step, mean loss)] in step order, its
    learner's name)."""
    path = Path(record)
    rec = read_record(path)          # bounded: records of millions of steps (alphac.files.LIMITS)
    loss = rec.get("loss", [])
    if not isinstance(loss, list) or not all(
            isinstance(e, dict) and isinstance(e.get("step"), int) and is_hex(e.get("mean"), 16)
            for e in loss):
        raise Refusal("record-malformed", f"{path}: `loss` is not a list of steps and means")
    ident = rec.get("identity")
    learner = ident.get("learner") if isinstance(ident, dict) else None
    points = sorted((e["step"], struct.unpack(">d", bytes.fromhex(e["mean"]))[0]) for e in loss)
    return (path.resolve().parent.name, learner if isinstance(learner, str) else None, points,
            str(rec.get("learner", "")))


def runs(records: list) -> list[tuple[str, list[tuple[int, float]], str]]:
    """[(label, points, learner's name)]: one curve per record, or per chain of records that
    continue one another (the module's docstring), in the order the records are given."""
    read = sorted(((k, *read_run(r)) for k, r in enumerate(records)),
                  key=lambda r: (r[3][0][0] if r[3] else 0, r[0]))     # chained in step order
    chains: list[list] = []
    for r in read:
        after = next((c for c in chains if r[3] and c[-1][3] and r[2] is not None
                      and c[-1][2] == r[2] and c[-1][3][-1][0] + 1 == r[3][0][0]), None)
        if after is None:
            chains.append([r])
        else:
            after.append(r)
    return [(" + ".join(r[1] for r in c), [p for r in c for p in r[3]], c[0][4])
            for c in sorted(chains, key=lambda c: min(r[0] for r in c))]


def kind(v: float, log: bool = False) -> str | None:
    """What an off-scale mean is, as it is drawn and named (`inf`, `-inf`, `nan`, and under
    `log` `<=0`); None when it is on the scale."""
    if math.isfinite(v):
        return "<=0" if log and v <= 0 else None
    return "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"


def scale(points: list[tuple[int, float]], log: bool = False) -> tuple[float, float]:
    """The range (lo, hi) of the means on the scale; (0, 1), or (1, 10) under `log`, when none is."""
    finite = [v for _, v in points if kind(v, log) is None]
    return (min(finite), max(finite)) if finite else (1.0, 10.0) if log else (0.0, 1.0)


def height(v: float, lo: float, hi: float, log: bool = False) -> float:
    """Where v on the scale lies between lo and hi, from 0 to 1, without overflow (their
    difference can exceed the largest double: each is halved first); in logarithms under `log`."""
    if log:
        return (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) if hi > lo else 0.5
    span = hi / 2 - lo / 2
    return (v / 2 - lo / 2) / span if span > 0 else 0.5


def chart(curves: list, log: bool = False) -> str:
    """The curves ([(label, points)]) in text: ROWS lines of at most
    COLS columns, the top and bottom rows labelled with the highest and lowest mean on the
    scale; a step whose mean is off the scale is drawn in a row of its own above (`inf`) or
    below (`<=0`, `-inf`, `nan`) the others, labelled with what it is."""
    every = [p for _, pts in curves for p in pts]
    lo, hi = scale(every, log)
    s0, s1 = min(s for s, _ in every), max(s for s, _ in every)
    ncol = min(COLS, s1 - s0 + 1)
    col = lambda s: (s - s0) * ncol // (s1 - s0 + 1)
    row = lambda v: round(height(v, lo, hi, log) * (ROWS - 1))
    grid: dict[str | int, list[str]] = {r: [" "] * ncol for r in (*ABOVE, *range(ROWS), *BELOW)}
    for k, (_, pts) in enumerate(curves):
        spans: dict[int, list[int]] = {}
        for s, v in pts:
            if kind(v, log) is None:
                spans.setdefault(col(s), []).append(row(v))
            else:
                grid[kind(v, log)][col(s)] = MARKS[k % len(MARKS)]
        for c, rs in spans.items():
            for r in range(min(rs), max(rs) + 1):
                grid[r][c] = MARKS[k % len(MARKS)]
    top, bottom = (repr(hi), repr(lo)) if any(kind(v, log) is None for _, v in every) else ("", "")
    labels = {ROWS - 1: top, 0: bottom, **{name: name for name in ABOVE + BELOW}}
    order = [*ABOVE, *range(ROWS - 1, -1, -1), *BELOW]
    shown = [r for r in order if isinstance(r, int) or set(grid[r]) != {" "}]
    w = max(12, *(len(labels.get(r, "")) for r in shown))
    lines = [f"{labels.get(r, ''):>{w}} |" + "".join(grid[r]).rstrip() for r in shown]
    lines.append(" " * (w + 1) + "+" + "-" * ncol)
    first, last = f"step {s0}", f"step {s1}"
    lines.append(" " * (w + 2) + first + " " + last.rjust(max(1, ncol - len(first) - 1)))
    if len(curves) > 1:
        lines.append(" " * (w + 2) + "   ".join(f"{MARKS[k % len(MARKS)]} {label}"
                                                for k, (label, _) in enumerate(curves)))
    return "\n".join(lines)


def nice(x: float) -> float:
    """The 1, 2 or 5 times a power of ten nearest above x > 0 (a tick spacing)."""
    e = math.floor(math.log10(x))
    return next((m * 10.0 ** e for m in (1, 2, 5) if m * 10.0 ** e >= x), 10.0 ** (e + 1))


def ticks(lo: float, hi: float, log: bool) -> list[float]:
    """Tick values within [lo, hi]: 1-2-5 multiples (linear), powers of ten (log: also 2 and
    5 of each decade when there are fewer than three)."""
    if log:                          # float("me+d"): inf past the largest double, not an error
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        ms = (1,) if b - a > 3 else (1, 2, 5)
        return [t for d in range(a, b + 1, -(-(b - a + 1) // 8)) for m in ms
                if lo <= (t := float(f"{m}e{d}")) <= hi]
    step = nice((hi / 2 - lo / 2) / 3) if hi / 2 - lo / 2 > 0 else 1.0      # about 6 spaces
    return [k * step for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def svg(curves: list, log: bool = False, title: str = "mean loss per step") -> str:
    """The curves ([(label, points)]) as a figure: a frame with ticks,
    values and grid lines, the step on x and the mean loss on y, a line per curve (broken where
    a mean is off the scale), each off-scale mean a mark on a labelled band of its own (`inf`
    at the top; `<=0`, `-inf` and `nan` at the bottom), a legend and a title."""
    W, H, L, R, T, B, band = 720, 440, 84, 700, 44, 380, 18
    every = [p for _, pts in curves for p in pts]
    above = [k for k in ABOVE if any(kind(v, log) == k for _, v in every)]
    below = [k for k in BELOW if any(kind(v, log) == k for _, v in every)]
    top, bottom = T + band * len(above), B - band * len(below)        # the scale's area
    lo, hi = scale(every, log)
    if log:                                      # 5 % of the range in logarithms each side
        f = math.exp((math.log(hi) - math.log(lo)) / 20) if hi > lo else 2.0
        lo, hi = max(lo / f, 5e-324), min(hi * f, 1.7976931348623157e308)
    else:
        m = (hi / 2 - lo / 2) / 10 if hi > lo else abs(lo) / 10 or 0.5
        lo, hi = max(lo - m, -1.7976931348623157e308), min(hi + m, 1.7976931348623157e308)
    s0, s1 = min(s for s, _ in every), max(s for s, _ in every)
    x0, x1 = (s0 - (s1 - s0) / 40, s1 + (s1 - s0) / 40) if s1 > s0 else (s0 - 1, s1 + 1)
    x = lambda s: L + (s - x0) / (x1 - x0) * (R - L)
    y = lambda v: bottom - height(v, lo, hi, log) * (bottom - top)
    bands = {k: T + band * (n + 0.5) for n, k in enumerate(above)}
    bands |= {k: B - band * (len(below) - n - 0.5) for n, k in enumerate(below)}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="11">\n<g shape-rendering="crispEdges">',
           f'<rect width="{W}" height="{H}" fill="white"/>\n',
           f'<text x="{(L + R) / 2}" y="{T - 16}" font-size="14" text-anchor="middle">{escape(title)}</text>\n']
    for t in ticks(lo, hi, log):
        out.append(f'<line x1="{L}" x2="{R}" y1="{y(t):.2f}" y2="{y(t):.2f}" stroke="#e5e5e5"/>'
                   f'<line x1="{L - 5}" x2="{L}" y1="{y(t):.2f}" y2="{y(t):.2f}" stroke="black"/>'
                   f'<text x="{L - 8}" y="{y(t) + 4:.2f}" text-anchor="end">{t:.6g}</text>\n')
    xt = ticks(x0, x1, False) if s1 > s0 else [float(s0)]
    for t in (t for t in xt if t == int(t)):
        out.append(f'<line x1="{x(t):.2f}" x2="{x(t):.2f}" y1="{T}" y2="{B}" stroke="#e5e5e5"/>'
                   f'<line x1="{x(t):.2f}" x2="{x(t):.2f}" y1="{B}" y2="{B + 5}" stroke="black"/>'
                   f'<text x="{x(t):.2f}" y="{B + 18}" text-anchor="middle">{int(t)}</text>\n')
    out.append("</g>\n")
    for k, at in bands.items():
        out.append(f'<line x1="{L}" x2="{R}" y1="{at:.2f}" y2="{at:.2f}" stroke="#cccccc" '
                   f'stroke-dasharray="4 3"/><text x="{L - 8}" y="{at + 4:.2f}" text-anchor="end" '
                   f'font-style="italic">{k}</text>\n')
    out.append(f'<rect x="{L}" y="{T}" width="{R - L}" height="{B - T}" fill="none" stroke="black" '
               f'shape-rendering="crispEdges"/>\n'
               f'<text x="{(L + R) / 2}" y="{H - 14}" font-size="12" text-anchor="middle">step</text>\n'
               f'<text transform="translate(22 {(T + B) / 2}) rotate(-90)" font-size="12" '
               f'text-anchor="middle">mean loss{" (log scale)" if log else ""}</text>\n')
    for k, (label, pts) in enumerate(curves):
        colour, run = COLOURS[k % len(COLOURS)], []
        for s, v in pts + [(None, math.nan)]:
            if s is not None and kind(v, log) is None:
                run.append((x(s), y(v)))
                continue
            if len(run) > 1:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.75" '
                           f'points="{" ".join(f"{a:.2f},{b:.2f}" for a, b in run)}"/>\n')
            elif run:
                out.append(f'<circle cx="{run[0][0]:.2f}" cy="{run[0][1]:.2f}" r="2.5" fill="{colour}"/>\n')
            run = []
            if s is not None:
                who = f"{escape(label)}, " if len(curves) > 1 else ""
                out.append(f'<circle cx="{x(s):.2f}" cy="{bands[kind(v, log)]:.2f}" r="2.5" '
                           f'fill="{colour}"><title>{who}step {s}: {kind(v, log)}</title></circle>\n')
    lw = 48 + 7 * max(len(label) for label, _ in curves)       # the legend, at the top right
    out.append(f'<rect x="{R - 8 - lw}" y="{top + 8}" width="{lw}" height="{8 + 18 * len(curves)}" '
               f'fill="white" fill-opacity="0.85" stroke="#cccccc" rx="3"/>\n')
    for k, (label, _) in enumerate(curves):
        ly = top + 20 + 18 * k
        out.append(f'<line x1="{R - lw}" x2="{R - lw + 24}" y1="{ly}" y2="{ly}" stroke='
                   f'"{COLOURS[k % len(COLOURS)]}" stroke-width="2"/><text x="{R - lw + 30}" '
                   f'y="{ly + 4}">{escape(label)}</text>\n')
    return "".join(out) + "</svg>\n"


def summary(points: list[tuple[int, float]], log: bool = False) -> str:
    """First, last and lowest mean, then a line per kind of off-scale mean."""
    ordered = [p for p in points if kind(p[1]) != "nan"]       # nan is neither low nor high
    low = min(ordered, key=lambda p: p[1]) if ordered else None
    best = f"lowest {low[1]!r} (step {low[0]})" if low else "no lowest (every mean is nan)"
    bad: dict[str, list[int]] = {}
    for s, v in points:
        if kind(v, log) is not None:
            bad.setdefault(kind(v, log), []).append(s)
    return (f"first {points[0][1]!r} (step {points[0][0]}), last {points[-1][1]!r} "
            f"(step {points[-1][0]}), {best}\n" + "".join(
                f"{len(steps)} step{'s' * (len(steps) != 1)} with mean {k} (the first at step "
                f"{steps[0]})\n" for k, steps in sorted(bad.items())))


def plot(records, out: str | Path | None = None, log: bool = False) -> str:
    """The text report of one record or a list of them; with `out`, the SVG written there."""
    read = [c for c in runs(records if isinstance(records, list) else [records]) if c[1]]
    if not read:
        return "no losses in this record (a learner without a loss, or a record from before)\n"
    curves = [(label, pts) for label, pts, _ in read]
    if out is not None:
        title = f"{', '.join(sorted({n for _, _, n in read if n}))}: mean loss per step".lstrip(": ")
        write_file(out, svg(curves, log, title).encode(), 0o644)
    if len(curves) == 1:
        return chart(curves, log) + "\n" + summary(curves[0][1], log)
    return chart(curves, log) + "\n" + "".join(f"{label}: {summary(pts, log)}" for label, pts in curves)
