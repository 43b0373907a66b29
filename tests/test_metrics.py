"""Live metrics and TensorBoard (issue 46): each step's loss as a JSON line while a run goes
(`alphac run --metrics`, `alphac launch --metrics`), and `alphac export-metrics RECORD
--tensorboard DIR`, read back by a reader written here from the format's description (TFRecord
framing, CRC-32C bit by bit, protobuf's wire format) and by TensorBoard's own when installed."""
import json
import os
import struct

import pytest

from backend import build_deployment
from conftest import alphac, example


def test_run_writes_each_steps_loss_with_its_exact_bits(tmp_path):
    from alphac.driver import compile_file
    from alphac.ir.interp import initial_state, step, step_samples
    from alphac.ir.score import mean_loss
    code, out, err = alphac("run", example("lsq_adam"), "--steps", "4", "--metrics", tmp_path / "m.jsonl")
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    lr = compile_file(example("lsq_adam")).learner
    state = initial_state(lr)
    for t, line in enumerate(lines):
        want = mean_loss(lr, state, step_samples(lr, range(lr.nsamples), t))    # the scalar definition
        assert line == {"step": t + 1, "loss": want, "bits": struct.pack(">d", want).hex(), "n": lr.nsamples}
        state = step(lr, state, t)
    assert len(lines) == 4
    code, out2, _ = alphac("run", example("lsq_adam"), "--steps", "4", "--metrics", "-")
    assert out2 == (tmp_path / "m.jsonl").read_text() + out           # `-`: before the state
    code, _, err = alphac("run", example("lsq_adam"), "--deployment", "lsq_adam_star", "--metrics", "-")
    assert code == 2 and "alphac launch DIR --metrics" in err
    code, _, err = alphac("run", example("independent_state"), "--metrics", "-")
    assert code == 2 and "has no loss" in err


def test_the_launcher_follows_the_roots_losses_as_they_are_written(tmp_path):
    import io
    from alphac.tools.supervise import Progress
    events, out = tmp_path / "root.log", io.StringIO()
    follow = Progress(events, 0, 3, None, out)
    one = "3ff0000000000000"
    events.write_bytes(f"loss 0 {one} 2 @5 MAC\nstep 1 comm 0 @6 MAC\nloss 1 {one} 4 @7 M".encode())
    follow.done()                                     # the second loss line is not whole yet
    assert [json.loads(l) for l in out.getvalue().splitlines()] == [
        {"step": 1, "loss": 0.5, "bits": "3fe0000000000000", "n": 2}]
    events.write_bytes(events.read_bytes() + b"AC\n")
    follow.done()
    assert [json.loads(l)["loss"] for l in out.getvalue().splitlines()] == [0.5, 0.25]


def test_launch_metrics_and_tensorboard_files(tmp_path):
    dep = build_deployment(example("lsq_adam"), "lsq_adam_star", tmp_path / "b")
    code, _, err = alphac("launch", dep, "--steps", "5", "--records", tmp_path / "runs",
                          "--metrics", tmp_path / "m.jsonl")
    assert code == 0, err
    record = next((tmp_path / "runs").glob("*/record.json"))
    rec = json.loads(record.read_text())
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [(l["step"], l["bits"], l["n"], repr(l["loss"])) for l in lines] == \
        [(e["step"], e["mean"], e["n"], e["decimal"]) for e in rec["loss"]] and len(lines) == 5
    code, _, err = alphac("export-metrics", record, "--tensorboard", tmp_path / "tb")
    assert code == 0, err
    files = list((tmp_path / "tb").iterdir())
    assert [f.name for f in files] == ["events.out.tfevents.0.alphac"]
    events = [decode(r) for r in tf_records(files[0].read_bytes())]
    assert events[0] == {1: [0.0], 3: [b"brain.Event:2"]}
    got = []
    for e in events[1:]:
        value = decode(decode(e[5][0])[1][0])
        tensor, metadata = decode(value[8][0]), decode(value[9][0])
        assert value[1] == [b"loss"] and decode(metadata[1][0])[1] == [b"scalars"]
        assert tensor[1] == [2] and tensor[2] == [b""]               # DT_DOUBLE, a scalar
        got.append((e[2][0], tensor[6][0].hex()))
    assert got == [(x["step"], struct.pack("<d", float(x["decimal"])).hex()) for x in rec["loss"]]
    accumulator = tensorboard_reader()
    if accumulator is not None:
        from tensorboard.util import tensor_util
        acc = accumulator(str(tmp_path / "tb"))
        acc.Reload()
        read = [(t.step, tensor_util.make_ndarray(t.tensor_proto).item()) for t in acc.Tensors("loss")]
        assert read == [(x["step"], float(x["decimal"])) for x in rec["loss"]]
    # a record that is not one is refused by name
    (tmp_path / "bad.json").write_text("{}")
    code, _, err = alphac("export-metrics", tmp_path / "bad.json", "--tensorboard", tmp_path / "tb2")
    assert code != 0 and "record-malformed" in err


def tensorboard_reader():
    """TensorBoard's EventAccumulator; None where it is not installed (in CI, CI=1: a failure)."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("tensorboard is required in CI but is not installed")
        return None
    return EventAccumulator


def crc32c(data: bytes) -> int:
    """CRC-32C bit by bit (Castagnoli, reflected polynomial 0x82f63b78)."""
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF


def tf_records(data: bytes) -> list[bytes]:
    """TFRecord: u64 length, masked CRC of it, the data, masked CRC of the data."""
    assert crc32c(b"123456789") == 0xE3069283
    mask = lambda c: (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    out, at = [], 0
    while at < len(data):
        (n,), (c1,) = struct.unpack_from("<Q", data, at), struct.unpack_from("<I", data, at + 8)
        assert c1 == mask(crc32c(data[at:at + 8]))
        body = data[at + 12:at + 12 + n]
        assert struct.unpack_from("<I", data, at + 12 + n)[0] == mask(crc32c(body))
        out.append(body)
        at += 16 + n
    return out


def decode(msg: bytes) -> dict:
    """Protobuf's wire format: {field: [values]}, varints as ints, 64-bit as doubles (a packed
    double list, field 6 of a TensorProto, stays bytes)."""
    out, at = {}, 0
    def varint():
        nonlocal at
        n = shift = 0
        while True:
            b = msg[at]
            at += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n
    while at < len(msg):
        key = varint()
        if key & 7 == 0:
            v = varint()
        elif key & 7 == 1:
            v, at = struct.unpack_from("<d", msg, at)[0], at + 8
        else:
            assert key & 7 == 2
            n = varint()
            v, at = msg[at:at + n], at + n
        out.setdefault(key >> 3, []).append(v)
    return out
