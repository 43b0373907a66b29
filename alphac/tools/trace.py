"""`alphac trace RECORD -o trace.json`: a run's event streams as a Chrome / Perfetto trace.

What it does
    Reads the record (`runs/NAME-NNNN/record.json`) and each role's event stream, whose lines
    carry the role's monotonic clock (every role of a loopback run reads the same clock, so their
    spans line up), and writes the trace-event format (JSON; open it in ui.perfetto.dev or
    chrome://tracing): one process per role, named by a metadata event; a complete event ("X")
    per span between two events, named by the later one: `data` (start to `data checked`, an
    owner of loaded data, docs/data.md), `connect` (to `connected`),
    `step` (its number, `step`, and its time in frames, `frames_ms`, as arguments), `publish`
    (the root), `checkpoint` (a periodic one with its step), `resume`, `finish`: slices named
    by kind, so that Perfetto groups them.
    Each step is split, from the role's `split V send S combine B` event (role.rt), into the
    slices `compute` (the rest of the step), `send` (S), `wait` (its other time in frames:
    receiving and waiting) and `combine` (B), laid end to end in that order inside the step
    (the role's totals for the step, not the order its actions ran in; one of no time is left
    out), each with the step as its argument;
    an instant event for a refusal. The root's mean loss per step is a counter track, `mean
    loss`; a step whose mean is not finite (a diverged run: JSON has no number for inf or NaN)
    is an instant event `mean loss inf` (`-inf`, `nan`) instead, its args the mean as that word,
    its 16 hex digits (`bits`) and the step: the trace is always valid JSON. Times are microseconds from the run's first event.
Requires
    A record written by `alphac launch` (format 2); `alphac verify-record` says whether it is
    authentic: this only reads it.
Guarantees
    The same trace for the same record (roles in the record's order). A record or stream that
    cannot be read (record.read_record, alphac.files: a regular file within its limit, JSON
    without duplicate keys or deep nesting), and a stream line the trace reads that is not an
    event (a step whose `comm` is not a count), is `record-malformed`, naming the file and line.
"""
from __future__ import annotations

import math
from pathlib import Path

from alphac.refusals import Refusal
from alphac.tools.record import is_count, losses, read_record, stream_events, stream_lines
from alphac.encode import json_text


AT_STEP = {"checkpoint": "checkpoint", "resumed at step": "resume"}   # `WHAT V`: a kind, at step V


def span_name(what: str) -> str:
    head, _, v = what.rpartition(" ")
    if what.startswith("step ") or (head in AT_STEP and is_count(v)):
        return AT_STEP.get(head, "step")
    return {"connected": "connect", "checkpointed": "checkpoint", "published": "publish",
            "done": "finish", "data checked": "data"}.get(what.removesuffix(" authenticated"), what)


def loss_event(loss: dict, pid: int, ts: float) -> dict:
    """A step's mean loss (an entry of the record's `loss`): a sample of the `mean loss` counter
    when it is finite; a diverged step's inf, -inf or nan (which JSON has no number for) an
    instant event `mean loss inf` (`-inf`, `nan`) with the mean as that word and its 16 hex
    digits in `args`."""
    mean = float(loss["decimal"])
    if math.isfinite(mean):
        return {"ph": "C", "name": "mean loss", "pid": pid, "tid": 0, "ts": ts, "args": {"mean": mean}}
    word = "nan" if math.isnan(mean) else "inf" if mean > 0 else "-inf"
    return {"ph": "i", "name": f"mean loss {word}", "pid": pid, "tid": 0, "ts": ts, "s": "p",
            "args": {"mean": word, "bits": loss["mean"], "step": loss["step"]}}


def trace(record: str | Path) -> dict:
    path = Path(record)
    rec = read_record(path)
    streams = []
    for r in rec["roles"]:
        f = path.parent / r["stream"]["file"] if "stream" in r else None
        try:
            events = stream_events(stream_lines(f), rec["kind"] == "launch") if f and f.is_file() else []
        except OSError as e:
            raise Refusal("record-malformed", f"{f}: {e.strerror or e}")
        for n, (what, _) in enumerate(events, 1):
            if " comm " in what and not (is_count(what.partition(" comm ")[2]) and is_count(what.split(" ")[1])):
                raise Refusal("record-malformed", f"{f}: line {n} is not an event: {what[:80]!r}")
        streams.append((r["role"], [(w, t) for w, t in events if t is not None]))
    t0 = min((ev[0][1] for _, ev in streams if ev), default=0)
    us = lambda ns: round((ns - t0) / 1000, 3)
    out = []
    for pid, (role, events) in enumerate(streams):
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": role}})
        for e in losses([(w, t) for w, t in events if w.startswith("loss ")]):   # a counter track
            t = next(t for w, t in events if w.startswith(f"loss {e['step'] - 1} "))
            out.append(loss_event(e, pid, us(t)))
        splits = {w.split(" ")[1]: w.split(" ") for w, _ in events if w.startswith("split ")}
        events = [(w, t) for w, t in events if not w.startswith(("loss ", "peak_rss_kib ", "split "))]
        for (_, t_prev), (what, t) in zip(events, events[1:]):
            if what.startswith("refused: "):
                out.append({"ph": "i", "name": what, "pid": pid, "tid": 0, "ts": us(t), "s": "p"})
                continue
            ev = {"ph": "X", "name": span_name(what), "pid": pid, "tid": 0, "ts": us(t_prev),
                  "dur": us(t) - us(t_prev)}
            out.append(ev)
            head, _, v = what.rpartition(" ")
            if head in AT_STEP and is_count(v):
                ev["args"] = {"step": int(v)}
            if " comm " in what:
                step, comm = int(what.split(" ")[1]), int(what.partition(" comm ")[2])
                ev["args"] = {"step": step, "frames_ms": round(comm / 1e6, 3)}
                split = splits.get(str(step), [])
                if len(split) == 6 and is_count(split[3]) and is_count(split[5]):
                    send, combine = int(split[3]), int(split[5])
                    parts = (("compute", t - t_prev - comm - combine), ("send", send),
                             ("wait", comm - send), ("combine", combine))
                    at = t_prev
                    for name, ns in parts:          # in this order, each within the step
                        end = min(t, at + max(0, ns))
                        if end > at:
                            out.append({"ph": "X", "name": name, "pid": pid, "tid": 0, "ts": us(at),
                                        "dur": us(end) - us(at), "args": {"step": step}})
                        at = end
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"deployment": str(rec.get("deployment")), "passed": rec["passed"]}}


def write_trace(record: str | Path, out: str | Path) -> int:
    """Write the trace of `record` to `out`; returns the number of events."""
    from alphac.files import write_file
    t = trace(record)
    write_file(out, (json_text(t, indent=1) + "\n").encode(), 0o644)
    return len(t["traceEvents"])
