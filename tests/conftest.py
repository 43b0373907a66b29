"""Shared test helpers: paths, running the CLI in-process, and the examples."""
import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if os.environ.get("ALPHAC_PTXAS"):
    # the pinned assembler the Makefile provides: visible as `ptxas` to every test and tool
    os.environ["PATH"] = str(Path(os.environ["ALPHAC_PTXAS"]).parent) + os.pathsep + os.environ["PATH"]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(ROOT / "gpu"))                   # gpu/ptx_host.py, the kernels' Python host

LEARNER_NAMES = ["scalar_regression", "two_coordinate", "independent_state", "lsq_momentum",
                 "lsq_adam"]


# `make test` runs the suite as two pytest processes at once (the CI host has two cores), each
# with `--shard K/2`: the test files dealt heaviest first, each to the shard with the least
# weight so far, a file's weight its seconds below (every file over 5 s, summed from a 2-core
# run's `--durations=0`; a file a change made cheaper: its weight times its CPU seconds after
# over before, both measured on one machine) or 0.25 s a test. Every file runs whole in one
# shard (its module fixtures built once).
SECONDS = {"test_learner_fuzz.py": 310, "test_gpu_choose.py": 16, "test_order_probe.py": 8,
           "test_gpu_fallbacks.py": 8, "test_repro.py": 123, "test_math.py": 39,
           "test_update_reductions.py": 72, "test_bench.py": 53, "test_launch_hostile.py": 23,
           "test_gpu_examples.py": 31, "test_roles.py": 33, "test_wheel.py": 33,
           "test_x86_64_encode.py": 28, "test_models.py": 27, "test_slurm.py": 27,
           "test_math_lanes.py": 24, "test_interp_fast.py": 24, "test_tiled.py": 19,
           "test_ptx.py": 19, "test_gather.py": 22, "test_gpu_roles.py": 21, "test_fleet.py": 20,
           "test_exact_sum.py": 20, "test_k8s.py": 20, "test_recover.py": 18,
           "test_runtime_fuzz.py": 18, "test_data.py": 17, "test_ckpt.py": 17,
           "test_digits.py": 16, "test_device_check_local.py": 16, "test_slices.py": 14,
           "test_nvdrv_owner.py": 13, "test_aarch64_encode.py": 11, "test_wide.py": 10,
           "test_gpu_realcard.py": 10, "test_optim.py": 9, "test_names.py": 9,
           "test_hostile.py": 8, "test_device_check.py": 8, "test_mesh.py": 8,
           "test_readers.py": 8, "test_membership.py": 7, "test_gpu_sampled.py": 6,
           "test_schedules.py": 6, "test_netns.py": 6, "test_eval.py": 6, "test_gpu_copy.py": 5,
           "test_encode.py": 5, "test_elf_reader.py": 5,
           "test_digest_card.py": 11}


def pytest_addoption(parser):
    parser.addoption("--shard", metavar="K/N", help="run only the test files of shard K (from 0) "
                     "of N, dealt by weight (tests/conftest.py, SECONDS)")


def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if not shard:
        return
    k, n = (int(x) for x in shard.split("/"))
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.path.name, []).append(item)
    weight = {f: SECONDS.get(f, 0.25 * len(its)) for f, its in files.items()}
    load, mine = [0.0] * n, set()
    for f in sorted(files, key=lambda f: (-weight[f], f)):
        j = min(range(n), key=lambda j: (load[j], j))
        load[j] += weight[f]
        if j == k:
            mine.add(f)
    config.hook.pytest_deselected(items=[it for it in items if it.path.name not in mine])
    items[:] = [it for it in items if it.path.name in mine]


def alphac(*args):
    """Run the alphac CLI in this process; returns (exit code, stdout, stderr)."""
    from alphac.cli import main
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def example(name):
    return EXAMPLES / f"{name}.alpha"


def exact_sum_variant(text: str) -> str:
    """A learner file under `contract exact_sum`: the contract line after `learner NAME`, and
    its mesh deployments left out (a mesh combines rounded sums: E0118 under exact_sum)."""
    import re
    text, n = re.subn(r"^(learner \w+)$", r"\1\ncontract exact_sum", text, count=1, flags=re.M)
    assert n == 1
    return re.sub(r"^deployment \w+ \{\n  roles [^\n]*\n  topology mesh\(.*?^\}\n", "", text,
                  flags=re.M | re.S)


def require_tool(name):
    """A tool the suite needs. In CI (CI=1) its absence fails loudly instead of skipping."""
    import shutil
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is required in CI but is not installed")
        pytest.skip(f"{name} is not installed")
    return path


@pytest.fixture(scope="session", autouse=True)
def record_key(tmp_path_factory):
    """The key run records are authenticated with: a file of the test run's, never ~/.config."""
    path = tmp_path_factory.mktemp("record-key") / "record-key"
    os.environ["ALPHAC_RECORD_KEY"] = str(path)
    return path


DATA = EXAMPLES / "data"


@pytest.fixture(scope="session", autouse=True)
def example_data():
    """The examples' data sets (`make data`), written by examples/data/make_data.py when absent:
    every test that builds all of examples/ needs them."""
    import subprocess
    names = subprocess.run([sys.executable, DATA / "make_data.py", "--list", "--out", DATA],
                           capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    if not all((ROOT / n).is_file() for n in names):
        subprocess.run([sys.executable, DATA / "make_data.py"], check=True, capture_output=True)
    return DATA


@pytest.fixture(scope="session")
def example_roles(tmp_path_factory):
    """The reference learners' deployments' role executables, built once for the whole run:
    DIR/roles/DEPLOYMENT/ROLE with DIR/MANIFEST.json (read them, never change them).
    (examples/digits_mlp.alpha's roles are tests/test_digits.py's own.)"""
    from backend import build_roles
    return build_roles(tmp_path_factory.mktemp("example-roles"),
                       sources=[f"examples/{n}.alpha" for n in LEARNER_NAMES])
