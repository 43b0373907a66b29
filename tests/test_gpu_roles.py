"""GPU owners inside deployments, against the mock driver (docs/nvdrv.md, "GPU owners in
deployments").

A deployment gives owners GPU targets (`target owner[0] = x86_64+sm_90`) and each its card
(`gpu owner[0] = "a.gpuhost"`). `alphac launch --gpu-wrapper` starts every GPU owner under
tests/mockgpu/wrap.py: its own mock driver serving the machine's four cards, of which the
process opens its own. Guarantees checked:
  * two GPU owners with unequal shares in a star, each on its card, print the interpreter's bits
    after five steps, with an empty mock error list and the planned kernels launched;
  * a mixed star of an sm_90 owner, a CPU owner and an sm_86 owner under ZeRO-3 does too, and
    so does a star of a CPU owner and a GPU owner whose card description says `map rm` (no UVM
    file opened: docs/nvdrv.md "Mapping with the RM alone") and every fallback to 2026-12-04's
    paths (`results bar1`, `sysmem uncached`, `inputs bar1`, `upload bar1`: no copy, system
    memory mapped uncached; docs/nvdrv.md "Fallbacks to the verified paths"), and
    a hierarchy whose root owner (an aggregator) and a leaf owner are GPU owners;
  * a checkpoint written by the GPU pair resumes on CPU owners and on another GPU pair (another
    product, other minors), one written by CPU owners on that pair: the uninterrupted bits;
  * a card that computes another bit is refused by its owner, and nothing is published;
  * a state in a coordinate group that no statement assigns (the card never writes it) is the
    host's alone: a single owner (both shadows) and a hierarchy's GPU owners, one holding no
    sample, print the interpreter's bits;
  * a classifier (A @ v, relu, logsumexp, onehot) whose rows are read from .npy files at run
    time trains on an sm_90 and an sm_86 owner, resumes on CPU owners, and `alphac eval` of its
    checkpoint equals the uninterrupted run's;
  * memory is admitted per card: two owners on one card must fit in it together (one byte less
    is E0120), a card's memory never counts for another;
  * a GPU target on a coordinator, a GPU owner without a card, a card for a CPU owner and a bad
    card description are refused with their codes and positions.
"""
import json
import os
import pickle
import re
import sys
from pathlib import Path

import pytest

import mockgpu
from conftest import ROOT, alphac, example, require_tool
from mockgpu import Card
from mockgpu.wrap import config

from alphac.diag import CompileError
from alphac.dist.execute import run_plan
from alphac.driver import compile_deployments
from alphac.ir.interp import format_state
from alphac.nvdrv import host as host_mod

CARDS = {   # file: (uuid, product, sm, minor, memory)
    "a": ("GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a", "NVIDIA H200", 90, 0, "143771 MiB"),
    "b": ("GPU-0b2f4c6e-8a9d-1f2e-3d4c-5b6a5a1e7c3d", "NVIDIA H200", 90, 1, "8 MiB"),   # h200-1.gpuhost
    "c": ("GPU-11111111-2222-3333-4444-555555555555", "NVIDIA GeForce RTX 3090", 86, 2, "24 GiB"),
    "d": ("GPU-66666666-7777-8888-9999-aaaaaaaaaaaa", "NVIDIA H200", 90, 3, "4 MiB"),
}
SPLIT = "samples owner[0] = 0..3, owner[1] = 3..8"
DEPLOYMENTS = f"""
deployment gpus {{
  roles coordinator, owner[2]
  topology star(coordinator)
  {SPLIT}
  target owner[0], owner[1] = x86_64+sm_90
  gpu owner[0] = "a.gpuhost", owner[1] = "b.gpuhost"
}}

deployment other_gpus {{
  roles coordinator, owner[2]
  topology star(coordinator)
  {SPLIT}
  target owner[0] = x86_64+sm_86, owner[1] = x86_64+sm_90
  gpu owner[0] = "c.gpuhost", owner[1] = "d.gpuhost"
}}

deployment rm_star {{
  roles coordinator, owner[2]
  topology star(coordinator)
  {SPLIT}
  target owner[1] = x86_64+sm_90
  gpu owner[1] = "arm.gpuhost"
}}

deployment cpus {{
  roles coordinator, owner[2]
  topology star(coordinator)
  {SPLIT}
}}

deployment tree {{
  roles owner[4]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..1, owner[1] = 1..3, owner[2] = 3..4, owner[3] = 4..8
  target owner[0] = x86_64-v3+sm_90, owner[3] = x86_64+sm_90
  gpu owner[0] = "a.gpuhost", owner[3] = "b.gpuhost"
}}

deployment mixed {{
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..3, owner[2] = 3..8
  combine ((owner[0], owner[2]), owner[1])
  strategy zero3
  partition owner[0] = 0..1, owner[1] = 1..3, owner[2] = 3..5
  target owner[0] = x86_64+sm_90, owner[2] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[2] = "c.gpuhost"
}}
"""


def host_text(key: str, memory: str | None = None) -> str:
    uuid, product, _, minor, mem = CARDS[key]
    return f"uuid {uuid}\nproduct {product}\nmemory {memory or mem}\ndriver 580.159.04\nminor {minor}\n"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The learner with the deployments, the cards' descriptions, the wrapper's configuration."""
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    d = tmp_path_factory.mktemp("gpu-roles")
    (d / "lsq.alpha").write_text(Path(example("lsq_adam")).read_text() + DEPLOYMENTS)
    for key in CARDS:
        (d / f"{key}.gpuhost").write_text(host_text(key))
    # the RM's mapping, and every fallback to 2026-12-04's paths (docs/nvdrv.md)
    (d / "arm.gpuhost").write_text(host_text("a") + "map rm\nresults bar1\nsysmem uncached\ninputs bar1\nupload bar1\n")
    for name in ("h200.gpuhost", "h200-1.gpuhost"):      # the example's own deployment's cards
        (d / name).write_bytes((ROOT / "examples" / name).read_bytes())
    old = os.getcwd()
    os.chdir(d)
    try:
        compiled, plans = compile_deployments("lsq.alpha")
        from alphac.build import gpu_kernels
        (d / "kernels.pickle").write_bytes(pickle.dumps([gpu_kernels(compiled.learner, sm)[0] for sm in (86, 90)]))
        cards = []
        for k, key in enumerate(CARDS):
            h = host_mod.load(d / f"{key}.gpuhost")
            cards.append(Card(uuid=h.uuid, name=h.product, driver=h.driver, sm=CARDS[key][2],
                              minor=h.minor, memory=h.memory, gpu_id=0x1800 + 0x100 * k, device_instance=k))
        (d / "logs").mkdir()
        (d / "cards.json").write_text(json.dumps(config(cards, str(d / "kernels.pickle"), str(d / "logs"))))
        yield d, compiled.learner, plans
    finally:
        os.chdir(old)


def launched(work, name: str, steps: int, **kw) -> dict:
    from alphac.artifacts import build_deployment
    from alphac.tools.launch import launch
    d, lr, plans = work
    out = d / "build" / name
    if not (out / "MANIFEST.json").exists():
        build_deployment("lsq.alpha", name, out)
    for f in (d / "logs").iterdir():
        f.unlink()
    wrapper = [sys.executable, str(ROOT / "tests" / "mockgpu" / "wrap.py"), str(d / "cards.json")]
    rec = launch(out, steps=steps, records=d / "runs", gpu_wrapper=wrapper, **kw)
    rec["logs"] = {Path(j["argv"][0]).name: j for j in
                   (json.loads(f.read_text()) for f in sorted((d / "logs").iterdir()))}
    return rec


def wrapper_for(work, lr, where: Path) -> list[str]:
    """The wrapper's command for another learner: the machine's cards, lr's kernels (both SMs)."""
    from alphac.build import gpu_kernels
    d, _, _ = work
    (where / "kernels.pickle").write_bytes(pickle.dumps([gpu_kernels(lr, sm)[0] for sm in (86, 90)]))
    cfg = json.loads((d / "cards.json").read_text())
    (where / "cards.json").write_text(json.dumps({**cfg, "kernels": str(where / "kernels.pickle")}))
    return [sys.executable, str(ROOT / "tests" / "mockgpu" / "wrap.py"), str(where / "cards.json")]


def reference(work, name: str, steps: int) -> str:
    _, lr, plans = work
    return format_state(lr, run_plan(lr, plans[name], steps))


def test_two_gpu_owners_with_unequal_shares_print_the_interpreters_bits(work):
    from conftest import alphac
    rec = launched(work, "gpus", 5)
    code, _, err = alphac("verify", "build/gpus/MANIFEST.json")       # rebuilt, ptxas pinned
    assert code == 0, err
    assert [(r["role"], r["exit"]) for r in rec["roles"]] == [("coordinator", 0), ("owner.0", 0), ("owner.1", 0)]
    assert rec["passed"] and rec["published"] == reference(work, "gpus", 5)
    logs = rec["logs"]
    assert sorted(logs) == ["owner.0", "owner.1"]
    for role, minor in (("owner.0", 0), ("owner.1", 1)):
        log = logs[role]
        assert log["errors"] == [] and log["card"] == minor
        assert log["opened"] == ["/dev/nvidia-uvm", f"/dev/nvidia{minor}", "/dev/nvidiactl"]
        assert log["launches"] == ["grad_samples", "owner_sum", "update_g0"] * 5
    # each card's own demand: the shares differ, so the arenas do (owner[1]'s card has 8 MiB)
    assert logs["owner.0"]["vram"] <= 8 << 20 and logs["owner.1"]["vram"] <= 8 << 20


@pytest.mark.parametrize("name,cards", [("mixed", {"owner.0": 0, "owner.2": 2}),
                                        ("tree", {"owner.0": 0, "owner.3": 1})])
def test_gpu_owners_with_cpu_owners_in_a_star_under_zero3_and_in_a_hierarchy(work, name, cards):
    """The hierarchy's owner[0] has its host part at x86_64-v3 (AVX2's lanes): the same bits; on
    a CPU without AVX2 the launcher refuses it by name (a GPU owner is not emulated)."""
    from alphac.refusals import Refusal
    from alphac.targets import host_runs
    if name == "tree" and not host_runs("x86_64-v3"):
        with pytest.raises(Refusal, match="x86_64-v3\\+sm_90 roles need a CPU with AVX2"):
            launched(work, name, 5)
        return
    rec = launched(work, name, 5)
    assert rec["passed"] and rec["published"] == reference(work, name, 5)
    assert {r: log["card"] for r, log in rec["logs"].items()} == cards
    if name == "tree":
        import subprocess
        from conftest import alphac
        said = subprocess.run([work[0] / "build" / name / "owner.0", "--version"], capture_output=True, text=True)
        assert "\ntarget x86_64-v3\n" in said.stdout
        code, _, err = alphac("verify", f"build/{name}/MANIFEST.json")    # its role recipe rebuilds it
        assert code == 0, err
    for log in rec["logs"].values():
        assert log["errors"] == [] and log["launches"].count("update_g0") == 5


def test_an_rm_mapped_gpu_owner_beside_a_cpu_owner(work):
    """Its host also takes every fallback (results bar1, sysmem uncached, inputs bar1, upload
    bar1): its start-up and a role's two submissions a step write and read the arena through BAR1."""
    rec = launched(work, "rm_star", 5)
    assert rec["passed"] and rec["published"] == reference(work, "rm_star", 5)
    log = rec["logs"]["owner.1"]
    assert log["errors"] == [] and log["card"] == 0 and log["launches"].count("update_g0") == 5
    assert log["opened"] == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert (log["copies"], log["caching"]) == (0, ["UNCACHED"])     # no copy at all; system memory uncached


def test_checkpoints_move_between_gpu_and_cpu_owners(work, tmp_path):
    want = reference(work, "gpus", 5)
    a = launched(work, "gpus", 3, checkpoint=tmp_path / "g")
    assert a["passed"]
    b = launched(work, "cpus", 2, resume=tmp_path / "g")
    assert b["passed"] and b["published"] == want
    b = launched(work, "other_gpus", 2, resume=tmp_path / "g")
    assert b["passed"] and b["published"] == want
    c = launched(work, "cpus", 3, checkpoint=tmp_path / "c")
    d = launched(work, "other_gpus", 2, resume=tmp_path / "c")
    assert c["passed"] and d["passed"] and d["published"] == want
    assert {r: log["card"] for r, log in d["logs"].items()} == {"owner.0": 2, "owner.1": 3}


def check(work, text: str):
    d, _, _ = work
    (d / "bad.alpha").write_text(Path(example("lsq_adam")).read_text() + text)
    with pytest.raises(CompileError) as e:
        from alphac.artifacts import deployment_recipes
        _, plans = compile_deployments("bad.alpha")
        for name, plan in plans.items():
            for _, recipe in deployment_recipes("bad.alpha", name, plan):
                if "card" in recipe:
                    from alphac.artifacts import build
                    build(recipe)
    return e.value.diagnostics[0]


def deployment(body: str) -> str:
    return "\ndeployment d {\n  roles coordinator, owner[2]\n  topology star(coordinator)\n" \
           f"  {SPLIT}\n{body}\n}}\n"


def test_memory_is_admitted_per_card(work):
    d, lr, plans = work
    from alphac.build import gpu_role_image
    both = deployment('  target owner[0], owner[1] = x86_64+sm_90\n  gpu owner[0], owner[1] = "shared.gpuhost"')
    host = host_mod.load(d / "a.gpuhost")
    plan = plans["gpus"]
    demand = sum(gpu_role_image(plan, r, "x86_64+sm_90", host)[0].demand
                 for r in plan.roles() if plan.is_owner(r))
    (d / "shared.gpuhost").write_text(host_text("a", f"{demand - 1}"))
    diag = check(work, both)
    assert diag.code == "E0120" and "card GPU-5a1e7c3d" in diag.message and str(demand) in diag.message
    (d / "shared.gpuhost").write_text(host_text("a", f"{demand}"))
    from alphac.artifacts import build, deployment_recipes
    (d / "ok.alpha").write_text(Path(example("lsq_adam")).read_text() + both)
    _, ok = compile_deployments("ok.alpha")
    assert all(build(r).data for _, r in deployment_recipes("ok.alpha", "d", ok["d"]) if "card" in r)
    # card d declares exactly one owner's demand: other_gpus (built and run above) holds
    # owner[1] there, and owner[0]'s demand on card c never counts against it
    assert demand == 2 * (4 << 20) == 2 * host_mod.parse_memory(CARDS["d"][4])


@pytest.mark.parametrize("body,code,needle", [
    ('  target coordinator = x86_64+sm_90\n  gpu coordinator = "a.gpuhost"', "E0111", "a GPU runs an owner's compute"),
    ("  target owner[0] = x86_64+sm_90", "E0122", "has no host description"),
    ('  gpu owner[1] = "a.gpuhost"', "E0122", "its target is `x86_64`"),
    ('  target owner[0] = x86_64+sm_70\n  gpu owner[0] = "a.gpuhost"', "E0111", "unsupported target `x86_64+sm_70`"),
    ('  target owner[0] = x86_64+sm_90\n  gpu owner[0] = "missing.gpuhost"', "E0123", "cannot read"),
])
def test_gpu_roles_refused_by_name(work, body, code, needle):
    diag = check(work, deployment(body))
    assert diag.code == code and needle in diag.message
    assert diag.span is not None and diag.span.source.name == "bad.alpha"


def test_a_gpu_owner_whose_card_computes_another_bit_refuses_and_nothing_is_published(work):
    d, _, _ = work
    cfg = json.loads((d / "cards.json").read_text())
    try:
        (d / "cards.json").write_text(json.dumps(
            {**cfg, "mutate": {"update_g0": ["add.rn.f64", "sub.rn.f64"]}, "mutate_minor": 1}))
        rec = launched(work, "gpus", 3)
    finally:
        (d / "cards.json").write_text(json.dumps(cfg))
    by = {r["role"]: r for r in rec["roles"]}
    assert by["owner.1"]["refused"] == "gpu-shadow-mismatch" and not rec["passed"]
    assert rec["published"] == "" and by["owner.0"]["exit"] != 0 and by["coordinator"]["exit"] != 0
    assert rec["logs"]["owner.1"]["launches"] == ["grad_samples", "owner_sum", "update_g0"]


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this host has an NVIDIA driver")
def test_gpu_owners_on_a_host_without_the_cards_are_named_at_once_with_their_card(work, tmp_path):
    """A GPU deployment launched where there is no NVIDIA driver (this host, no mock): the first
    owner's refusal names the device file; the launcher ends the other roles at once rather than
    letting them wait out a minute's deadline, and says which card the owner was built for and
    what to do."""
    from alphac.artifacts import build_deployment
    d, _, _ = work
    out = d / "build" / "gpus"
    if not (out / "MANIFEST.json").exists():
        build_deployment("lsq.alpha", "gpus", out)
    code, _, err = alphac("launch", out, "--deadline-ms", 60000, "--records", tmp_path / "runs",
                          "--record-key", tmp_path / "key")
    rec = json.loads(next((tmp_path / "runs").glob("*/record.json")).read_text())
    refused = [r for r in rec["roles"] if r["refused"]]        # the other owner may refuse too
    assert code == 102 and refused and {(r["refused"], r["detail"]) for r in refused} == {
        ("nvidia-open", "/dev/nvidiactl: errno 2")}
    ended = [r for r in rec["roles"] if not r["refused"]]
    first = ended[0]["detail"].removeprefix("ended when ").removesuffix(" refused at start")
    assert ended[0]["role"] == "coordinator" and first in {r["role"] for r in refused}
    assert all((r["exit"], r["detail"]) == (-9, f"ended when {first} refused at start") for r in ended)
    uuid, product = host_text("a" if first == "owner.0" else "b").split("\n")[0:2]
    assert f"{first}: refused: nvidia-open (/dev/nvidiactl: errno 2)\n  {first} was built for " \
           f"{product.split(' ', 1)[1]} {uuid.split()[1]} (driver 580.159.04" in err
    assert "coordinator: ended when" in err and "alphac explain nvidia-open" in err


DEPLOY_CLS = """
deployment cards {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..6
  strategy zero3
  target owner[0] = x86_64+sm_90, owner[1] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[1] = "c.gpuhost"
}
deployment cpus {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..6
  strategy zero3
}
"""


def classifier() -> str:
    """oracle.CLASSIFIER with relu for tanh (a smaller kernel for ptxas), its data loaded from
    .npy files, and the deployments above."""
    import oracle
    text = oracle.CLASSIFIER.split("deployment ")[0].replace("tanh(", "relu(")
    text = re.sub(r"data x = .*\n", 'data x = load("x.npy")\n', text)
    text = re.sub(r"data y = .*\n", 'data y = load("y.npy")\n', text)
    assert text.count("load(") == 2 and "relu(" in text
    return text + DEPLOY_CLS


def test_a_classifier_with_its_data_at_run_time_trains_on_two_cards_resumes_and_predicts(work, tmp_path, monkeypatch):
    """The real-models operations (A @ v, relu, logsumexp, onehot) on an sm_90 and an sm_86
    owner, the rows read from .npy files at run time and written to the cards; 3 steps on the
    cards, 2 on CPU owners, then `alphac eval` of the checkpoint: the uninterrupted run's bits."""
    import numpy as np
    from alphac.artifacts import build_deployment
    from alphac.tools.launch import launch
    from conftest import alphac
    d, _, _ = work
    c = tmp_path / "cls"
    c.mkdir()
    monkeypatch.chdir(c)
    np.save("x.npy", np.array([[0.5, -1.0], [1.5, 0.25], [-0.75, 0.5], [0.1, 2.0], [-1.2, -0.4], [0.9, -0.6]]))
    np.save("y.npy", np.array([0, 1, 2, 1, 0, 2], dtype=np.int64))
    np.save("hx.npy", np.array([[0.3, -0.2], [1.0, 1.0], [-1.0, 0.2], [0.0, 0.5], [2.0, -1.5]]))
    np.save("hy.npy", np.array([0, 1, 2, 1, 2], dtype=np.int64))
    (c / "cls.alpha").write_text(classifier())
    for key in ("a", "c"):
        (c / f"{key}.gpuhost").write_text(host_text(key))
    compiled, plans = compile_deployments("cls.alpha")
    wrapper = wrapper_for(work, plans["cards"].lr, c)
    for name in ("cards", "cpus"):
        build_deployment("cls.alpha", name, c / name)
    first = launch(c / "cards", steps=3, records=c / "runs", gpu_wrapper=wrapper, checkpoint=c / "ck3")
    assert first["passed"], [r["stderr"] for r in first["roles"]]
    assert first["published"] == format_state(compiled.learner, run_plan(compiled.learner, plans["cards"], 3))
    then = launch(c / "cpus", steps=2, records=c / "runs", resume=c / "ck3", checkpoint=c / "ck5")
    whole = launch(c / "cpus", steps=5, records=c / "runs", checkpoint=c / "ck5w")
    assert then["published"] == whole["published"] == \
        format_state(compiled.learner, run_plan(compiled.learner, plans["cpus"], 5))

    def evaluate(ck):
        code, out, err = alphac("eval", "cls.alpha", "--checkpoint", ck, "--data", "x=hx.npy",
                                "--data", "y=hy.npy", "--format", "json")
        assert code == 0, err
        return json.loads(out)
    assert evaluate(c / "ck5") == evaluate(c / "ck5w") and evaluate(c / "ck5")["step"] == 5
    assert evaluate(c / "ck3")["mean_loss_hex"] != evaluate(c / "ck5")["mean_loss_hex"]


def test_the_example_deployment_of_two_cards(work, example_roles):
    """examples/lsq_adam.alpha's lsq_adam_two_gpus, as `make roles` builds it, on the machine
    of the mock's cards a and b (its two reference hosts)."""
    from alphac.tools.launch import launch
    d, lr, _ = work
    wrapper = [sys.executable, str(ROOT / "tests" / "mockgpu" / "wrap.py"), str(d / "cards.json")]
    for f in (d / "logs").iterdir():
        f.unlink()
    rec = launch(example_roles / "lsq_adam_two_gpus", steps=5, records=d / "runs", gpu_wrapper=wrapper)
    plan = compile_deployments(example("lsq_adam"))[1]["lsq_adam_two_gpus"]
    assert rec["passed"] and rec["published"] == format_state(lr, run_plan(lr, plan, 5))
    logs = [json.loads(f.read_text()) for f in (d / "logs").iterdir()]
    assert sorted(log["card"] for log in logs) == [0, 1] and all(log["errors"] == [] for log in logs)


def test_a_kernel_that_needs_local_memory_needs_the_hosts_topology(work):
    """A kernel ptxas spilled (made to spill here: 16 bytes a thread) gets a local-memory area
    sized from the host description's topology (tests/test_gpu_local.py runs such owners); without
    one it is refused at build time, never launched short of it."""
    import dataclasses
    from alphac.build import gpu_kernels, owner_data
    from alphac.diag import BuildError
    from alphac.nvdrv import image
    _, learner, _ = work
    built, _ = gpu_kernels(learner, 90)
    lr = owner_data(learner)
    assert [a.name for a in image.plan(lr, built, 90).allocations][-1] == "usermode"
    spilled = [dataclasses.replace(b, image=dataclasses.replace(b.image, local=16)) if k == 0 else b
               for k, b in enumerate(built)]
    with pytest.raises(BuildError, match="grad_samples of `lsq_adam` needs 16 bytes of local memory"):
        image.plan(lr, spilled, 90)
    g = image.plan(lr, spilled, 90, topology=host_mod.Topology(8, 9, 2, 64))
    assert g.alloc("local").size == image.round_up(image.local_area_size(g.local_per_thread, g.topology),
                                                   image.HUGE)
    assert g.local_per_thread == 608             # 16 + 0x240, rounded to 32


SCALAR_STATE = """\
learner ss
data x = [1.0, 2.0, 3.0, -1.0]
param w: f64 = 0.5
state t: f64 = 1.0
loss(i) {
  t * (w * x[i] - 1.0)^2
}
update {
  t = t * 0.5
  w = w - 0.1 * grad(w)
}
deployment cards {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..1, owner[1] = 1..4
  target owner[0], owner[1] = x86_64+sm_90
  gpu owner[0] = "a.gpuhost", owner[1] = "b.gpuhost"
}
"""


def test_a_loss_that_reads_a_scalar_state_the_host_computes(work, tmp_path):
    """The scalar statements run on the host; a loss reading their state (t) gets it written to
    the card before grad_samples, in a single GPU owner and in GPU roles (before the fix: a
    false gpu-shadow-mismatch at step 2)."""
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from alphac.ir.interp import run
    d, _, _ = work
    (d / "ss.alpha").write_text(SCALAR_STATE)
    lr = compile_file(d / "ss.alpha").learner
    host = host_mod.load(d / "a.gpuhost")
    built = build_gpu_owner(lr, "x86_64+sm_90", host)
    exe = tmp_path / "ss.gpu"
    exe.write_bytes(built.image.elf)
    exe.chmod(0o755)
    r = mockgpu.run(exe, ["--steps", "4"], card=Card(uuid=host.uuid), kernels=built.kernels)
    assert (r.returncode, r.errors) == (0, []) and r.stdout == format_state(lr, run(lr, 4))
    from alphac.artifacts import build_deployment
    from alphac.tools.launch import launch
    _, plans = compile_deployments("ss.alpha")
    build_deployment("ss.alpha", "cards", tmp_path / "dep")
    rec = launch(tmp_path / "dep", steps=4, records=tmp_path / "runs",
                 gpu_wrapper=wrapper_for(work, plans["cards"].lr, tmp_path))
    assert rec["passed"] and rec["published"] == format_state(lr, run_plan(lr, plans["cards"], 4))


def test_scalar_states_the_card_runs_when_sampled_are_written_by_each_gpu_role(work, tmp_path):
    """A scalar state reading the gradients' norm (AdaGrad-Norm's): a single GPU owner's update
    kernels read it from `sc` (abi.card_scalars); a deployment's GPU roles, which launch no
    `scalars`, write the host's values there each step: a star of a CPU and two GPU owners gives
    the interpreter's bits."""
    from test_gpu_sampled import NORM
    from alphac.ptx.abi import card_scalars
    d, _, _ = work
    (d / "norm.alpha").write_text(NORM + """
deployment cards {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..3, owner[1] = 3..4, owner[2] = 4..8
  target owner[0], owner[2] = x86_64+sm_90
  gpu owner[0] = "a.gpuhost", owner[2] = "b.gpuhost"
}
""")
    from alphac.artifacts import build_deployment
    from alphac.tools.launch import launch
    _, plans = compile_deployments("norm.alpha")
    lr = plans["cards"].lr
    assert list(card_scalars(lr)) == ["acc", "rate", "p1", "p2"]
    build_deployment("norm.alpha", "cards", tmp_path / "dep")
    rec = launch(tmp_path / "dep", steps=4, records=tmp_path / "runs",
                 gpu_wrapper=wrapper_for(work, lr, tmp_path))
    assert rec["passed"] and rec["published"] == format_state(lr, run_plan(lr, plans["cards"], 4))


IDLE = """\
learner idle
data x = [[1.0, 2.0], [0.5, -1.0], [2.0, 0.25]]
data y = [1.0, -0.5, 2.0]
param w: f64[2] = 0.0
state m: f64[2] = 0.0
state idle: f64[2] = -0.03
loss(i) {
  0.5 * (dot(w, x[i]) - y[i])^2
}
update {
  m = 0.9 * m + grad(w)
  w = w - 0.1 * m
}
deployment tree {
  roles owner[3]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..0, owner[1] = 0..1, owner[2] = 1..3
  target owner[0] = x86_64+sm_90, owner[2] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[2] = "c.gpuhost"
}
"""


def test_a_grouped_state_no_statement_assigns_is_the_hosts_alone(work, tmp_path):
    """`idle` is in a coordinate group whose update kernel takes no state, so the card never
    writes it and the plan copies none back (no result): the host compares, and adopts, only
    what the card writes. A single owner (full and sampled shadows) and a hierarchy whose GPU
    owners hold no sample (sm_90) and two (sm_86) print the interpreter's bits (before the fix:
    every one refused gpu-shadow-mismatch at step 1, comparing a result never copied; the
    differential fuzzer's seed 1206007, whose GPU owners happened to hold no samples)."""
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from alphac.ir.interp import run
    d, _, _ = work
    (d / "idle.alpha").write_text(IDLE)
    lr = compile_file(d / "idle.alpha").learner
    host = host_mod.load(d / "a.gpuhost")
    built = build_gpu_owner(lr, "x86_64+sm_90", host)
    assert "state_idle" not in built.gpu.results and "state_m" in built.gpu.results
    exe = tmp_path / "idle.gpu"
    exe.write_bytes(built.image.elf)
    exe.chmod(0o755)
    for shadow in ((), ("--shadow", "sampled")):
        r = mockgpu.run(exe, ["--steps", "4", *shadow], card=Card(uuid=host.uuid), kernels=built.kernels,
                        draws=b"\x01")
        assert (r.returncode, r.errors, r.stderr) == (0, [], ""), (shadow, r.events)
        assert r.stdout == format_state(lr, run(lr, 4)), shadow
    from alphac.artifacts import build_deployment
    from alphac.tools.launch import launch
    _, plans = compile_deployments("idle.alpha")
    build_deployment("idle.alpha", "tree", tmp_path / "dep")
    rec = launch(tmp_path / "dep", steps=4, records=tmp_path / "runs",
                 gpu_wrapper=wrapper_for(work, plans["tree"].lr, tmp_path))
    assert {r["role"]: r["exit"] for r in rec["roles"]} == dict.fromkeys(
        ["root", "agg1.0", "agg1.1", "owner.0", "owner.1", "owner.2"], 0)
    assert rec["passed"] and rec["published"] == format_state(lr, run_plan(lr, plans["tree"], 4))


MINIBATCH = """\
learner mb
data x = load("x.npy")
data y = load("y.npy")
const lr = 0.3
param w: f64[2] = 0.0
param b: f64 = 0.0
batch 4
order shuffle(77)
loss(i) {
  let z = dot(w, x[i]) + b
  softplus(z) - y[i] * z
}
update {
  w = w - lr * grad(w)
  b = b - lr * grad(b)
}
deployment cards {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..3, owner[1] = 3..10
  target owner[0] = x86_64+sm_90, owner[1] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[1] = "c.gpuhost"
}
deployment cpus {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..3, owner[1] = 3..10
}
"""


def test_minibatches_on_two_cards_with_rows_read_from_files(work, tmp_path, monkeypatch):
    """A shuffled minibatch learner (10 samples, batches of 4: 3 a epoch) whose rows are read
    from .npy files a row at a time: each GPU owner reads its shard at start-up and writes it to
    its card; each step the host lists the batch's samples it holds (none, some steps, for
    owner[0]) and the card computes just those. 7 steps, an epoch boundary crossed, then 2 more
    resumed on CPU owners: the interpreter's bits; a single GPU owner of it too."""
    import numpy as np
    from alphac.artifacts import build_deployment
    from alphac.build import build_gpu_owner
    from alphac.ir.interp import run
    from alphac.tools.launch import launch
    d, _, _ = work
    monkeypatch.chdir(tmp_path)
    np.save("x.npy", np.array([[0.5, -1.0], [1.5, 0.25], [-0.75, 0.5], [0.1, 2.0], [-1.2, -0.4],
                               [0.9, -0.6], [0.3, 0.3], [-0.2, 1.1], [1.0, -0.1], [0.05, 0.7]]))
    np.save("y.npy", np.array([0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]))
    (tmp_path / "mb.alpha").write_text(MINIBATCH)
    for key in ("a", "c"):
        (tmp_path / f"{key}.gpuhost").write_text(host_text(key))
    compiled, plans = compile_deployments("mb.alpha")
    lr = compiled.learner
    host = host_mod.load("a.gpuhost")
    single = build_gpu_owner(lr, "x86_64+sm_90", host)
    (tmp_path / "mb.gpu").write_bytes(single.image.elf)
    (tmp_path / "mb.gpu").chmod(0o755)
    r = mockgpu.run(tmp_path / "mb.gpu", ["--steps", "7", "--data", tmp_path], card=Card(uuid=host.uuid),
                    kernels=single.kernels)
    assert (r.returncode, r.errors, r.stdout) == (0, [], format_state(lr, run(lr, 7)))
    wrapper = wrapper_for(work, plans["cards"].lr, tmp_path)
    for name in ("cards", "cpus"):
        build_deployment("mb.alpha", name, tmp_path / name)
    for f in (d / "logs").iterdir():
        f.unlink()
    first = launch(tmp_path / "cards", steps=7, records=tmp_path / "runs", gpu_wrapper=wrapper,
                   checkpoint=tmp_path / "ck")
    assert first["passed"] and first["published"] == format_state(lr, run_plan(lr, plans["cards"], 7))
    logs = {Path(j["argv"][0]).name: j for j in (json.loads(f.read_text()) for f in (d / "logs").iterdir())}
    assert 0 < logs["owner.0"]["launches"].count("grad_samples") < 7 and logs["owner.0"]["errors"] == []
    assert logs["owner.0"]["launches"].count("update_g0") == 7
    then = launch(tmp_path / "cpus", steps=2, records=tmp_path / "runs", resume=tmp_path / "ck")
    assert then["published"] == format_state(lr, run_plan(lr, plans["cpus"], 9))


def test_nans_of_other_payloads_are_equal_and_the_state_is_refused_as_non_finite(work, tmp_path):
    """sqrt of a negative: the card's NaN (the PTX interpreter's, as NVIDIA's canonical NaN)
    and x86-64's default NaN differ in their bits. The shadow compare takes any two NaNs as
    equal, so the run ends as every engine's does, `non-finite-state` (before: a false
    gpu-shadow-mismatch, found by the differential fuzzer's gpu engine, seed 11)."""
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    d, _, _ = work
    (tmp_path / "nan.alpha").write_text("learner nanl\ndata x = [1.0, 2.0]\nparam w: f64 = 0.5\n"
                                        "loss(i) {\n  sqrt(w - x[i])\n}\nupdate {\n  w = w - 0.1 * grad(w)\n}\n")
    lr = compile_file(tmp_path / "nan.alpha").learner
    host = host_mod.load(d / "a.gpuhost")
    built = build_gpu_owner(lr, "x86_64+sm_90", host)
    (tmp_path / "nan.gpu").write_bytes(built.image.elf)
    (tmp_path / "nan.gpu").chmod(0o755)
    r = mockgpu.run(tmp_path / "nan.gpu", ["--steps", "2"], card=Card(uuid=host.uuid), kernels=built.kernels)
    assert (r.returncode, r.stderr, r.errors) == (65, "refused: non-finite-state\n", [])
    assert "step 2" in r.events


# the card's exact sums, changed by one term's one ulp (its significand M + 1: xsum_add) and by
# a carry dropped in the normalization (xsum_fold): each changes a sum, and the host refuses it
ULP = ("xsum_add", lambda ptx: re.sub(r"(shl\.b64 (%rd\d+), %rd\d+, 52;\n\tor\.b64 (%rd\d+), %rd\d+, \2;)",
                                      r"\1\n\tadd.s64 \3, \3, 1;", ptx, count=1))
CARRY = ("xsum_fold", lambda ptx: re.sub(r"shr\.s64 (%rd\d+), %rd\d+, 32;", r"mov.u64 \1, 0;", ptx, count=1))
ROW = ("grad_samples", lambda ptx: ptx.replace("mul.rn.f64", "add.rn.f64", 1))
DEPLOY_EXACT_CLS = """
deployment mixc {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..3, owner[2] = 3..6
  target owner[0] = x86_64+sm_90, owner[2] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[2] = "c.gpuhost"
}
"""


def single_owner(lr, host, path: Path, steps: int, **kw):
    from alphac.build import build_gpu_owner
    built = build_gpu_owner(lr, "x86_64+sm_90", host)
    path.write_bytes(built.image.elf)
    path.chmod(0o755)
    return mockgpu.run(path, ["--steps", str(steps)], card=Card(uuid=host.uuid), kernels=built.kernels, **kw)


@pytest.mark.parametrize("learner", ["lsq", "cls"])
def test_exact_sums_on_the_card_and_a_resume_on_cpu_owners(work, tmp_path, monkeypatch, learner):
    """`contract exact_sum` on GPU owners: the card sums each coordinate's per-sample terms
    exactly (alphac/ptx/xsum.py: integer limbs, atomics), the host reads back its accumulators
    and checks them against its own exact sums (gpu_exact_check), then sends its own up. Least
    squares and a classifier (A @ v, outer, onehot, logsumexp) as a single GPU owner, in a star
    of two cards and a CPU owner (3 steps, checkpointed) and resumed on CPU owners: all equal the
    interpreter's exact run. A card whose sum is another (a term off by one ulp, a carry
    dropped, a row's operation changed) is refused by name."""
    import oracle
    from alphac.artifacts import build_deployment
    from alphac.driver import compile_file
    from alphac.ir.interp import run
    from alphac.tools.launch import launch
    monkeypatch.chdir(tmp_path)
    if learner == "lsq":
        text = Path(example("lsq_adam")).read_text().split("# -- deployments")[0] + DEPLOYMENTS
        mix, cpus = "mixed", "cpus"
    else:
        text = oracle.CLASSIFIER.replace("tanh(", "relu(") + DEPLOY_EXACT_CLS
        mix, cpus = "mixc", "cls_star"
    (tmp_path / "x.alpha").write_text(re.sub(r"^(learner \w+\n)", r"\1contract exact_sum\n", text, count=1, flags=re.M))
    for key in CARDS:
        (tmp_path / f"{key}.gpuhost").write_text(host_text(key))
    compiled, plans = compile_deployments("x.alpha")
    lr = compiled.learner
    host = host_mod.load("a.gpuhost")
    r = single_owner(lr, host, tmp_path / "x.gpu", 5)
    assert (r.returncode, r.errors, r.stdout) == (0, [], format_state(lr, run(lr, 5)))
    kernels = ["xsum_clear", "grad_samples", "xsum_add", "xsum_fold"]
    assert [x[0] for x in r.launches] == (kernels + [f"update_g{g.index}" for g in lr.groups]) * 5
    for kernel, change in (CARRY,) if learner == "cls" else (ULP, CARRY, ROW):
        r = single_owner(lr, host, tmp_path / "x.gpu", 5, mutate={kernel: change})
        assert r.stderr == "refused: gpu-shadow-mismatch\n" and "mismatch at step 1" in r.events, kernel
    if learner == "lsq":
        from test_exact_sum import SPREAD          # sums that spill: the dense digits read back
        (tmp_path / "spread.alpha").write_text(SPREAD)
        spread = compile_file(tmp_path / "spread.alpha").learner
        r = single_owner(spread, host, tmp_path / "spread.gpu", 3)
        assert (r.returncode, r.errors, r.stdout) == (0, [], format_state(spread, run(spread, 3)))
    wrapper = wrapper_for(work, lr, tmp_path)
    for dep in (mix, cpus):
        build_deployment("x.alpha", dep, tmp_path / dep)
    first = launch(tmp_path / mix, steps=3, records=tmp_path / "runs", gpu_wrapper=wrapper, checkpoint=tmp_path / "ck")
    assert first["passed"] and first["published"] == format_state(lr, run(lr, 3))
    then = launch(tmp_path / cpus, steps=2, records=tmp_path / "runs", resume=tmp_path / "ck")
    assert then["passed"] and then["published"] == format_state(lr, run(lr, 5))

