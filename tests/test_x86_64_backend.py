"""x86-64 executables: every reference learner, built and run natively, prints exactly what the
tests' oracle and the reference interpreter print; the ELF reads cleanly; the syscalls are only
the ones the runtime means to make; refusals are named; every LIR operation is exercised."""
import subprocess
from pathlib import Path

import pytest

import oracle
from backend import build_learner_exe, build_rt_exe, run_exe
from conftest import LEARNER_NAMES, alphac, example, require_tool

TARGET = "x86_64"


@pytest.fixture(scope="module")
def exes(tmp_path_factory):
    out = tmp_path_factory.mktemp("x86")
    return {n: build_learner_exe(n, TARGET, out) for n in LEARNER_NAMES}


@pytest.mark.parametrize("name", LEARNER_NAMES)
@pytest.mark.parametrize("steps", [0, 1, 5, 50])
def test_learner_equals_oracle_and_interpreter(exes, name, steps):
    r = run_exe(exes[name], "--steps", steps)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == oracle.run(name, steps=steps)
    assert r.stdout == alphac("run", example(name), "--steps", steps)[1]


def test_default_steps(exes):
    assert run_exe(exes["lsq_adam"]).stdout == oracle.run("lsq_adam", steps=5)


@pytest.mark.parametrize("args", [["--steps"], ["--steps", "x"], ["--steps", "-1"], ["--bogus"],
                                  ["--steps", "1234567890123456"], ["5"], ["--steps", ""]])
def test_usage_refusal(exes, args):
    r = run_exe(exes["lsq_adam"], *args)
    assert (r.returncode, r.stdout, r.stderr) == (64, "", "refused: usage\n")


def test_non_finite_refusal(tmp_path):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    p = tmp_path / "blowup.alpha"
    p.write_text("learner blowup\nstate s: f64 = 1e300\nupdate {\n  s = s * 1e10\n}\n")
    exe = tmp_path / "blowup"
    exe.write_bytes(build_learner(compile_file(p).learner, TARGET).elf)
    exe.chmod(0o755)
    r = run_exe(exe, "--steps", 1)
    assert (r.returncode, r.stdout, r.stderr) == (65, "", "refused: non-finite-state\n")
    assert run_exe(exe, "--steps", 0).returncode == 0


def test_elf_is_static_and_wx(exes):
    from elftools.elf.elffile import ELFFile
    from elftools.elf.constants import P_FLAGS
    for path in exes.values():
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            assert elf["e_type"] == "ET_EXEC" and elf["e_machine"] == "EM_X86_64"
            types = [s["p_type"] for s in elf.iter_segments()]
            assert "PT_INTERP" not in types and "PT_DYNAMIC" not in types
            assert "PT_GNU_STACK" in types and "PT_NOTE" in types
            for s in elf.iter_segments():
                assert not (s["p_flags"] & P_FLAGS.PF_W and s["p_flags"] & P_FLAGS.PF_X)
            assert elf.get_section_by_name(".dynamic") is None
            syms = {s.name for s in elf.get_section_by_name(".symtab").iter_symbols()}
            assert {"_start", "rt_start", "main", "learner_step"} <= syms


def test_readelf_has_no_warnings(exes):
    readelf = require_tool("readelf")
    for path in exes.values():
        r = subprocess.run([readelf, "-W", "-a", str(path)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "" and "warning" not in r.stdout.lower()


def test_strace_shows_only_write_and_exit(exes):
    strace = require_tool("strace")
    for name, path in exes.items():
        r = subprocess.run([strace, "-f", "-qq", "-e", "trace=all", str(path), "--steps", "3"],
                           capture_output=True, text=True)
        calls = [line.split("(")[0] for line in r.stderr.splitlines() if "(" in line]
        assert calls[0] == "execve" and set(calls[1:]) <= {"write", "exit_group"}, calls
        assert calls[-1] == "exit_group"


def test_builds_are_reproducible(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = build_learner_exe("lsq_adam", TARGET, tmp_path / "a")
    b = build_learner_exe("lsq_adam", TARGET, tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()


def test_executables_are_small(exes):
    # the learner, the runtime (output, arguments, checkpoints with their SHA-256), the ELF
    for path in exes.values():
        assert path.stat().st_size < 24576


def test_every_lir_operation(tmp_path):
    exe = build_rt_exe(Path(__file__).parent / "rt" / "ops.rt", TARGET, tmp_path)
    r = run_exe(exe)
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout


def test_cli_build_and_emit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = alphac("build", example("two_coordinate"), "-o", "tc")
    assert code == 0, err
    r = run_exe(tmp_path / "tc", "--steps", "5")
    assert r.stdout == oracle.run("two_coordinate", steps=5)
    code, asm, _ = alphac("build", example("lsq_adam"), "--emit", "asm")
    assert code == 0
    assert "learner_group_0:" in asm and "; lsq_adam.alpha:" in asm and "mulsd" in asm
    assert "m = b1 * m + c1 * g" in asm
    code, rt_text, _ = alphac("build", example("lsq_adam"), "--emit", "rt")
    assert code == 0 and "fn learner_grad(lo: i64, hi: i64)" in rt_text
    code, lir_text, _ = alphac("build", example("lsq_adam"), "--emit", "lir")
    assert code == 0 and "fmul" in lir_text


def test_cli_build_reports_diagnostics(tmp_path):
    p = tmp_path / "bad.alpha"
    p.write_text("learner bad\nstate s: f64 = q\nupdate {\n  s = s\n}\n")
    code, _, err = alphac("build", p, "-o", tmp_path / "x")
    assert code == 1 and "E0020" in err and not (tmp_path / "x").exists()


def test_no_fused_or_packed_float_instructions(exes):
    capstone = pytest.importorskip("capstone")
    from alphac.elf.writer import read_section
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    for path in exes.values():
        _, code = read_section(path.read_bytes(), ".text")
        mnems = {i.mnemonic for i in md.disasm(code, 0)}
        assert not any("fma" in m or m.startswith("v") for m in mnems)
        assert mnems & {"addsd", "mulsd"} or path.name.startswith("independent")
