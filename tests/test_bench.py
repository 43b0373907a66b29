"""Every benchmark runs, in its short mode, so that none can silently break (issue 21: `make
bench` crashed while the docs quoted its numbers). The figures of a short run are not checked:
benchmarks measure, tests do not time."""
import subprocess
import sys

import pytest

from conftest import ROOT, require_tool

HEADERS = {"learners.py": "| learner | compile ms |", "functions.py": "function",
           "fleet.py": "| deployment | check time s |", "distributed.py": "| system | learner |",
           "interp.py": "| learner | samples |", "digits.py": "| system | ms a step, median | spread |",
           "sha256.py": "| system | message bytes |", "data.py": "| measure | alphac |",
           "exact_sum.py": "| learner | contract |", "codegen.py": "| workload | target | alphac ms/step |",
           "bits_before_after.py": "| learner | ISA | output identical |"}


@pytest.mark.parametrize("script", sorted(HEADERS))
def test_benchmark_runs_in_its_short_mode(script):
    if script == "functions.py":
        require_tool("gcc")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--quick"], capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert HEADERS[script] in r.stdout, r.stdout
    rows = [l for l in r.stdout.splitlines() if l.startswith("| ") and "---" not in l]
    assert script == "functions.py" or len(rows) >= 2, r.stdout      # a header and a row at least
