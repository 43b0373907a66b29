"""Run records with times (issue 21): every role's connect, steps and finish as spans, their time
in frames, and `alphac trace` in the Chrome / Perfetto trace-event format."""
import json
from pathlib import Path

from conftest import alphac
from backend import build_deployment
from conftest import example

PARTS = ["compute", "send", "wait", "combine"]


def test_a_launch_records_durations_and_traces_every_role(tmp_path):
    from alphac.tools.launch import launch
    from alphac.tools.record import verify_record
    from alphac.tools.trace import write_trace
    dep = build_deployment(example("lsq_adam"), "lsq_adam_star", tmp_path / "b")
    rec = launch(dep, steps=4, records=tmp_path / "runs")
    assert rec["passed"] and verify_record(rec["path"]) == []
    for r in rec["roles"]:
        t = r["timing"]
        assert t["steps"] == 4 and 0 <= t["frames_ms"] and 0 <= t["connect_ms"] <= t["total_ms"]
        assert t["steps_ms"] <= t["total_ms"]
    n = write_trace(rec["path"], tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert n == len(events)
    for e in events:                         # the trace-event format's fields, by phase
        assert e["ph"] in "XMCi" and isinstance(e["name"], str) and {"pid", "tid"} <= set(e)
        assert e["ph"] == "M" or isinstance(e["ts"], (int, float))
        assert e["ph"] != "X" or isinstance(e["dur"], (int, float)) and e["dur"] >= 0
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert sorted(names.values()) == ["coordinator", "owner.0", "owner.1", "owner.2", "owner.3"]
    for pid in names:
        spans = [e for e in events if e["pid"] == pid and e["ph"] == "X"]
        publish = ["publish"] if names[pid] == "coordinator" else []
        parts = [e for e in spans if e["name"] in PARTS]
        spans = [e for e in spans if e["name"] not in PARTS]
        assert [e["name"] for e in spans] == ["connect", "step", "step", "step", "step", *publish, "finish"]
        assert all(e["dur"] >= 0 for e in spans)
        assert [e["ts"] for e in spans] == sorted(e["ts"] for e in spans)
        steps = [e for e in spans if e["name"] == "step"]
        assert [e["args"]["step"] for e in steps] == [1, 2, 3, 4] and all("frames_ms" in e["args"] for e in steps)
        for s in steps:        # split into compute, send, wait, combine: in order, covering the step
            inside = [e for e in parts if e["args"] == {"step": s["args"]["step"]}]
            names_in = [e["name"] for e in inside]
            assert names_in == [n for n in PARTS if n in names_in] and "compute" in names_in
            assert "send" in names_in and "wait" in names_in     # every role sends and receives
            assert ("combine" in names_in) == (names[pid] == "coordinator")
            ends = [s["ts"]] + [e["ts"] + e["dur"] for e in inside]
            assert all(abs(e["ts"] - at) < 0.002 for e, at in zip(inside, ends))
            assert abs(ends[-1] - (s["ts"] + s["dur"])) < 0.002
        assert len(parts) == sum(1 for e in parts if any(e["args"]["step"] == s["args"]["step"] for s in steps))
        counters = [e["args"]["mean"] for e in events if e["pid"] == pid and e["ph"] == "C"]
        assert counters == ([float(x["decimal"]) for x in rec["loss"]] if publish else [])
    # a timing edited (and resealed) no longer follows from the stream
    from alphac.tools.record import record_key, seal, write_record
    data = json.loads(Path(rec["path"]).read_text())
    data["roles"][1]["timing"]["total_ms"] += 1
    data.pop("mac")
    write_record(Path(rec["path"]).parent, seal(data, Path(rec["path"]).parent, record_key(),
                                                data["auth"]["nonce"]))
    assert verify_record(rec["path"]) == [f"{data['roles'][1]['role']}: its timing is not what "
                                          f"its stream says"]


def test_periodic_checkpoints_and_resumes_are_slices_of_their_kind(tmp_path):
    from alphac.tools.launch import launch
    from alphac.tools.trace import trace
    dep = build_deployment(example("lsq_adam"), "lsq_adam_star", tmp_path / "b")
    launch(dep, steps=2, records=tmp_path / "runs", checkpoint=tmp_path / "ck")
    rec = launch(dep, steps=4, records=tmp_path / "runs", checkpoint=tmp_path / "ck2",
                 checkpoint_every=2, resume=tmp_path / "ck")
    spans = [e for e in trace(rec["path"])["traceEvents"] if e["ph"] == "X"]
    assert {e["name"] for e in spans} == {"resume", "connect", "step", *PARTS, "checkpoint", "publish", "finish"}
    assert sorted({e["args"]["step"] for e in spans if e["name"] == "checkpoint"}) == [4, 6]
    assert [e["args"]["step"] for e in spans if e["name"] == "step"][:4] == [3, 4, 5, 6]
