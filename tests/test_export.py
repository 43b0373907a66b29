"""`alphac ckpt export`: a checkpoint as full named tensors (issue 21), read back by numpy and
safetensors with exactly the bits the learner printed; the same bytes every time."""
import struct

import numpy as np
import pytest

from alphac.tools.export import export, learner_shapes
from backend import build_learner_exe, build_deployment, run_exe
from conftest import alphac, example


def printed(stdout: str) -> dict[str, str]:
    """NAME or NAME[K] -> the 16 hex digits the learner printed."""
    return dict(line.split(" ") for line in stdout.splitlines())


def as_printed(arrays) -> dict[str, str]:
    out = {}
    for name, a in arrays.items():
        flat = np.asarray(a, dtype="<f8").reshape(-1)
        for k, v in enumerate(flat):
            label = name if np.ndim(a) == 0 else f"{name}[{k}]"
            out[label] = f"{struct.unpack('<Q', struct.pack('<d', v))[0]:016x}"
    return out


@pytest.fixture(scope="module")
def adam_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    exe = build_learner_exe("lsq_adam", "x86_64", d)
    r = run_exe(exe, "--steps", 3, "--checkpoint", d / "ck")
    assert r.returncode == 0
    return d / "ck", printed(r.stdout)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_export_reads_back_with_the_printed_bits(adam_ckpt, suffix, tmp_path):
    from alphac.driver import compile_file
    ck, bits = adam_ckpt
    shapes = learner_shapes(compile_file(example("lsq_adam")).learner)
    out = tmp_path / f"model{suffix}"
    assert export(ck, out, shapes) == {"m": (5,), "v": (5,), "w": (5,), "p1": (), "p2": ()}
    if suffix == ".npz":
        with np.load(out) as z:
            arrays = {k: z[k] for k in z.files}
    else:
        from safetensors.numpy import load_file
        arrays = load_file(str(out))
    assert as_printed(arrays) == bits
    again = tmp_path / f"again{suffix}"
    export(ck, again, shapes)
    assert again.read_bytes() == out.read_bytes()


def test_export_of_a_star_merges_every_owners_shards(tmp_path):
    from alphac.tools.launch import launch
    dep = build_deployment(example("lsq_adam"), "lsq_adam_star", tmp_path / "b")
    rec = launch(dep, steps=3, records=tmp_path / "runs", checkpoint=tmp_path / "ck")
    assert rec["passed"]
    export(tmp_path / "ck", tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as z:
        arrays = {k: z[k] for k in z.files}
    got = as_printed(arrays)
    want = printed(rec["published"])
    # without the learner every state is 1-d: p1 is p1[0]
    assert {k.replace("[0]", "") if k.startswith("p") else k: v for k, v in got.items()} == want
