"""The models of a first deep-learning course as examples (examples/digits_cnn.alpha,
examples/seq_attention.alpha; README, "Models"): each runs on the interpreter and x86-64 with the same bits; its star and ZeRO-3
deployments, launched, publish the single process's bits (the examples declare `contract
exact_sum`, so no split changes a sum); and its loss curve is PyTorch float64's from the same
weights (tests/golden/torch_*.json, written by the example's torch script, checked here with or
without torch) to within ULPS units in the last place at each of the golden steps: torch sums
the batch's losses (and the convolution's taps) in its own orders where Alpha rounds the exact
sum once, so a loss may differ in its last bit."""
import json
import math
import os
import struct
import subprocess

import pytest

from backend import build_deployment, run_exe
from conftest import EXAMPLES, ROOT, alphac

MODELS = {"digits_cnn": ("digits_cnn_star", "digits_cnn_star_zero3"),
          "seq_attention": ("seq_attention_star", "seq_attention_star_zero3")}
ULPS = 1
STEPS = 5


def golden(name: str):
    return ROOT / "tests" / "golden" / f"torch_{name}.json"


def torch_python() -> str | None:
    from test_optim import torch_python as find
    return find()


def run(*args) -> str:
    code, out, err = alphac("run", *args)
    assert code == 0, err
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_interpreter_and_x86_64_give_the_same_bits_and_torchs_curve(name, tmp_path):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    src = EXAMPLES / f"{name}.alpha"
    metrics = tmp_path / "metrics.jsonl"
    want = run(src, "--steps", STEPS, "--metrics", metrics)
    exe = tmp_path / name
    exe.write_bytes(build_learner(compile_file(src).learner, "x86_64").elf)
    exe.chmod(0o755)
    r = subprocess.run([exe, "--steps", str(STEPS)], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == want, r.stderr
    ours = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    theirs = [struct.unpack(">d", bytes.fromhex(b))[0]
              for b in json.loads(golden(name).read_text())["loss"]]
    assert len(ours) == len(theirs) == STEPS
    assert all(abs(a - t) <= ULPS * math.ulp(t) for a, t in zip(ours, theirs)), (ours, theirs)
    assert ours[-1] < ours[0]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_golden_torch_run_is_torchs(name, tmp_path):
    """Where torch is importable (or ALPHAC_TORCH_PYTHON names a Python that has it), the
    example's torch script gives the golden file's bits again."""
    g = json.loads(golden(name).read_text())
    assert g["steps"] == STEPS and len(g["loss"]) == STEPS
    py = torch_python()
    if py is not None:
        out = tmp_path / "torch.json"
        r = subprocess.run([py, EXAMPLES / "data" / f"{name}_torch.py", "--steps", str(STEPS),
                            "--golden", out], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert json.loads(out.read_text())["loss"] == g["loss"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_star_and_zero3_publish_the_single_processs_bits(name, tmp_path):
    from alphac.tools.launch import launch
    src = EXAMPLES / f"{name}.alpha"
    single = run(src, "--steps", 2)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for dep in MODELS[name]:
            assert run(src, "--deployment", dep, "--steps", 2) == single
            built = build_deployment(f"examples/{name}.alpha", dep, tmp_path / "roles")
            rec = launch(built, records=tmp_path / "runs", deadline_ms=30000, steps=2)
            assert rec["passed"] and rec["published"] == single, rec["roles"]
    finally:
        os.chdir(cwd)
