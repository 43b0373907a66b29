"""The course's CNN and attention examples as GPU owners, against the mock driver (alphac issue 47).

examples/digits_cnn.alpha (conv2d on slices and comprehensions, max pooling, an MLP head) and
examples/seq_attention.alpha (embeddings `E[tok[i, t]]`: Gather and Scatter, one attention head),
each on the first few samples of its data, built as a single GPU owner for sm_90 against the
reference host examples/h200.gpuhost (whose `topology` their .local arrays need), print the
reference interpreter's bits after a few steps under the mock GPU, which runs every kernel in the
PTX interpreter (tests/ptx_interp.py); attention's grad_samples spills nothing (its stack is its
.local arrays). The builds' ptxas time is docs/gpu.md's ("grad_samples: loops"): seconds, where it
was 22 s and about 6 minutes. And a softmax's `exp` over a small kept vector is written once, not
once per class. Not checked, since not done: the CNN's PTX still grows with the image (its
windows are scalar nodes of the IR, each lowered once).
"""
import os
import re
from pathlib import Path

import numpy as np
import pytest

import mockgpu
from conftest import ROOT, require_tool
from mockgpu import Card

from alphac.driver import compile_file
from alphac.ir.interp import format_state, run
from alphac.nvdrv import host as host_mod

ROWS, STEPS = 3, 2


def shortened(example: str, where: Path) -> Path:
    """The example without its deployments, its data cut to the first ROWS samples (its
    params' files copied as they are), written in `where`."""
    text = (ROOT / "examples" / f"{example}.alpha").read_text().split("# -- deployments")[0]
    (where / "data").mkdir(exist_ok=True)
    for kind, name in re.findall(r"^(data|param) \w+(?:: [^=]*)? = load\(\"data/([\w.]+)\"\)", text, re.M):
        if not (ROOT / "examples" / "data" / name).exists():
            pytest.skip(f"no examples/data/{name}: `make data` writes it")
        a = np.load(ROOT / "examples" / "data" / name)
        np.save(where / "data" / name, a[:ROWS] if kind == "data" else a)
    src = where / f"{example}.alpha"
    src.write_text(re.sub(r"^(data \w+: [fi]64)\[\d+", rf"\1[{ROWS}", text, flags=re.M))
    return src


@pytest.mark.parametrize("example", ["digits_cnn", "seq_attention"])
def test_the_example_as_a_gpu_owner_prints_the_interpreters_bits(tmp_path, example):
    from alphac.build import build_gpu_owner
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    lr = compile_file(str(shortened(example, tmp_path))).learner
    host = host_mod.load(str(ROOT / "examples" / "h200.gpuhost"))
    built = build_gpu_owner(lr, "x86_64+sm_90", host)
    gs = next(b for b in built.kernels if b.kernel.name == "grad_samples")
    arrays = sum(int(n) for n in re.findall(r"^\t\.local \.align 8 \.b8 \w+\[(\d+)\];", gs.kernel.ptx, re.M))
    assert gs.image.local >= arrays > 0         # .local arrays: the host's topology is needed
    if example == "seq_attention":              # and nothing spilled (41,792 bytes unrolled)
        assert gs.image.local == arrays
    exe = tmp_path / f"{example}.gpu"
    exe.write_bytes(built.image.elf)
    exe.chmod(0o755)
    r = mockgpu.run(exe, ["--steps", str(STEPS)], card=Card(uuid=host.uuid, name=host.product,
                                                            driver=host.driver, sm=90),
                    kernels=built.kernels, timeout=600)
    assert (r.returncode, r.errors, r.stderr) == (0, [], "")
    assert r.stdout == format_state(lr, run(lr, STEPS))
    # under exact_sum the clipping's norm is an exact sum: under --shadow full the host's, from
    # its own G, in its shadow (docs/gpu.md "The ABI"), and the step stays one submission
    assert r.submissions == 1 + STEPS and "reduce" not in [la[0] for la in r.launches]
    # under --shadow sampled the card computes them: `reduce` adds each norm's terms exactly
    r = mockgpu.run(exe, ["--steps", str(STEPS), "--shadow", "sampled"], card=Card(
        uuid=host.uuid, name=host.product, driver=host.driver, sm=90), kernels=built.kernels, timeout=600)
    assert (r.returncode, r.errors, r.stderr) == (0, [], "") and r.stdout == format_state(lr, run(lr, STEPS))
    proven = sum(line.startswith("proven ") for line in r.events.splitlines())   # each read back once more
    assert proven == STEPS and r.submissions == 1 + STEPS + proven and [la[0] for la in r.launches].count("reduce") == STEPS


def test_the_ordered_attention_example_under_sampled_has_its_clipping_norm_on_the_card(tmp_path):
    """examples/seq_attention.alpha without `contract exact_sum`: its `adam(lr = lr_t, grad_scale =
    clip)` reads the global norm's dots of the gradients, which `--shadow sampled` has the card's
    `reduce` compute (abi.card_reductions) in the step's one submission: the interpreter's bits
    (both steps proven, the first two)."""
    from alphac.build import build_gpu_owner
    from alphac.ptx.abi import card_reductions
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    src = shortened("seq_attention", tmp_path)
    src.write_text(src.read_text().replace("contract exact_sum ", "# ordered "))
    lr = compile_file(str(src)).learner
    assert not lr.exact and len(card_reductions(lr)) >= 2
    host = host_mod.load(str(ROOT / "examples" / "h200.gpuhost"))
    built = build_gpu_owner(lr, "x86_64+sm_90", host)
    exe = tmp_path / "seq.gpu"
    exe.write_bytes(built.image.elf)
    exe.chmod(0o755)
    r = mockgpu.run(exe, ["--steps", str(STEPS), "--shadow", "sampled"], card=Card(
        uuid=host.uuid, name=host.product, driver=host.driver, sm=90), kernels=built.kernels, timeout=600)
    assert (r.returncode, r.errors, r.stderr) == (0, [], "")
    assert r.stdout == format_state(lr, run(lr, STEPS))
    assert STEPS <= 2 and r.submissions == 1 + 2 * STEPS    # each step proven: its messages copied back by a second
    assert [la[0] for la in r.launches].count("reduce") == STEPS


def test_an_elementary_function_of_a_small_kept_vector_is_written_once(tmp_path):
    """softmax's `exp(z - m)`, kept in registers, is computed by one loop that writes `exp`'s
    2,435 PTX lines once, whatever the class count: from 3 classes to 10 the owner's kernels grow
    by the registers' moves alone (7 more inline copies of `exp` before)."""
    from local_check import mlp_source
    from alphac.ptx.kernels import module

    def lines(classes):
        src = tmp_path / f"m{classes}.alpha"
        src.write_text(mlp_source(6, 5, classes, 4, f"m{classes}"))
        return module(compile_file(str(src)).learner).count("\n")
    assert 0 < lines(10) - lines(3) < 1000
