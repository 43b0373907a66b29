"""`alphac plot` (issue 46): the text chart's axis is labelled with the highest and lowest mean
exactly as the summary prints them, and the curve reaches both; a run and its resumption are one
curve, another run a second one, with a legend; the SVG, rendered by headless Chromium, is a
figure (a frame with ticks, the lines in their colours), not a blank page."""
import contextlib
import math
import shutil
import struct
import subprocess
import zlib

import pytest

from conftest import EXAMPLES, alphac, require_tool


def decaying(n: int) -> list[tuple[int, float]]:
    """A loss as the digits MLP's goes: steep first, then slow (the issue's 300 steps)."""
    return [(s, 2.2934778 * math.exp(-s / 40) + 0.015 + 0.002 * math.sin(s)) for s in range(1, n + 1)]


def rows(text: str) -> list[tuple[str, str]]:
    return [(line.split("|")[0].strip(), line.split("|")[1]) for line in text.splitlines() if "|" in line]


@pytest.mark.parametrize("n", [5, 64, 300, 1001])
def test_the_axis_labels_bracket_the_data_as_printed(n):
    """The top label is the highest mean and the bottom one the lowest, written as `first` and
    `lowest` write them; the top row has the first step's mark, the bottom row a mark too (each
    column draws all of its steps, not its last one)."""
    from alphac.tools.plot import chart, summary
    points = decaying(n)
    text = chart([("", points)]) + "\n" + summary(points)
    top, bottom = rows(text)[0], rows(text)[-1]
    hi, lo = max(v for _, v in points), min(v for _, v in points)
    assert f"first {top[0]} (step 1)" in text and top[0] == repr(hi), text
    assert f"lowest {bottom[0]} (step" in text and bottom[0] == repr(lo), text
    assert top[1].startswith("*") and "*" in bottom[1], text


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """lsq_adam_star's records: 3 steps checkpointed (0001), 2 more resumed from it (0002), and
    5 from the start (0003)."""
    d = tmp_path_factory.mktemp("plot")
    shutil.copy(EXAMPLES / "lsq_adam.alpha", d)
    with contextlib.chdir(d):
        for args in (("build", "lsq_adam.alpha", "--deployment", "lsq_adam_star", "-o", "dep"),
                     ("launch", "dep", "--steps", 3, "--checkpoint", "ck"),
                     ("launch", "dep", "--steps", 2, "--resume", "ck"),
                     ("launch", "dep", "--steps", 5)):
            rc, _, err = alphac(*args)
            assert rc == 0, err
    return [d / "runs" / f"lsq_adam_star-000{k}" / "record.json" for k in (1, 2, 3)]


def test_a_resumption_continues_its_run_and_another_run_is_a_curve_of_its_own(records, tmp_path):
    from alphac.tools.plot import runs
    curves = runs([records[2], records[1], records[0]])        # chained in any order, the
    assert [label for label, _, _ in curves] == ["lsq_adam_star-0003",       # curves as given
                                                 "lsq_adam_star-0001 + lsq_adam_star-0002"]
    curves = runs(records)
    assert [label for label, _, _ in curves] == ["lsq_adam_star-0001 + lsq_adam_star-0002",
                                                 "lsq_adam_star-0003"]
    assert curves[0][1] == curves[1][1] and [s for s, _ in curves[0][1]] == [1, 2, 3, 4, 5]
    assert len(runs([records[0], records[2]])) == 2            # 0003 starts at step 1: no resumption
    assert len(runs([records[1]])) == 1
    rc, out, err = alphac("plot", *records, "-o", tmp_path / "l.svg")
    assert rc == 0, err
    assert "* lsq_adam_star-0001 + lsq_adam_star-0002   + lsq_adam_star-0003" in out
    assert out.count("first 1.284375 (step 1), last ") == 2
    text = (tmp_path / "l.svg").read_text()
    assert text.count("<polyline") == 2 and ">lsq_adam_star-0003</text>" in text
    assert ">lsq_adam: mean loss per step</text>" in text and ">step</text>" in text


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG (filters undone)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, head = 8, b"", None
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", data[at + 8:at + 21])
        elif kind == b"IDAT":
            idat += data[at + 8:at + 8 + n]
        at += 12 + n
    w, h, depth, colour, _, _, interlace = head
    assert depth == 8 and colour in (2, 6) and interlace == 0, head
    bpp, raw, out, prev = 3 if colour == 2 else 4, zlib.decompress(idat), [], None
    for y in range(h):
        f, line = raw[y * (w * bpp + 1)], bytearray(raw[y * (w * bpp + 1) + 1:(y + 1) * (w * bpp + 1)])
        prev = prev or bytes(len(line))
        for i in range(len(line)):
            a, b, c = line[i - bpp] if i >= bpp else 0, prev[i], prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pred = (0, a, b, (a + b) // 2,
                    a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c)[f]
            line[i] = (line[i] + pred) & 255
        out.append(bytes(line))
        prev = out[-1]
    return w, h, out


def test_the_svg_rendered_by_chromium_is_a_figure(tmp_path):
    """Headless Chromium renders a figure of two curves to PNG: its size is the SVG's, the
    frame's left edge is a dark line from top to bottom, and both lines' colours are there."""
    from alphac.tools.plot import COLOURS, svg
    chromium = require_tool("chromium")
    two = [("digits_star-0001", decaying(300)), ("digits_tree-0001", [(s, v / 2) for s, v in decaying(200)])]
    (tmp_path / "loss.svg").write_text(svg(two, log=True, title="digits_mlp: mean loss per step"))
    png = tmp_path / "loss.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=720,440", f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={png}", (tmp_path / "loss.svg").as_uri()],
                   capture_output=True, timeout=120, check=True)
    w, h, px = png_pixels(png.read_bytes())
    assert (w, h) == (720, 440)
    bpp = len(px[0]) // w
    rgb = lambda x, y: tuple(px[y][x * bpp:x * bpp + 3])
    near = lambda c, hexa: all(abs(a - int(hexa[1 + 2 * i:3 + 2 * i], 16)) <= 24 for i, a in enumerate(c))
    counts = {hexa: sum(near(rgb(x, y), hexa) for y in range(h) for x in range(w)) for hexa in COLOURS[:2]}
    assert all(n > 100 for n in counts.values()), counts
    frame = sum(min(max(rgb(x, y)) for x in (83, 84)) < 80 for y in range(44, 381))   # its left edge
    assert frame > 300, frame
    assert sum(rgb(x, y) != (255, 255, 255) for y in range(h) for x in range(w)) < w * h // 4
