"""Both backends end to end, one test each, parametrized over the ISA: every reference learner,
built for x86-64 (run natively) and for AArch64 (run under qemu-aarch64), prints exactly what
the tests' oracle and the reference interpreter print; the executables are what pyelftools,
readelf and capstone expect (static, W^X, every word decodes, no fused multiply-add); they make
only the system calls the runtime means to make; refusals are named; every LIR operation runs
(tests/rt/ops.rt). Then what belongs to one ISA: AArch64's system-call table against the
kernel's generic header, its branch ranges; the command line's build and emit."""
import io
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

import oracle
from backend import build_rt_exe, run_exe
from conftest import LEARNER_NAMES, alphac, example, require_tool

from alphac.build import build_learner, target

ISAS = ("x86_64", "aarch64")
ELF_MACHINE = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}
FUSED = {"x86_64": lambda m: "fma" in m or m.startswith("v"),        # no FMA, no AVX forms
         "aarch64": lambda m: m in {"fmadd", "fmsub", "fnmadd", "fnmsub"}}
ARITH = {"x86_64": {"addsd", "mulsd"}, "aarch64": {"fadd", "fmul"}}


@pytest.fixture(scope="session")
def executable(tmp_path_factory):
    """executable(learner, isa): the learner built for `isa`, once per session."""
    from alphac.driver import compile_file
    out = tmp_path_factory.mktemp("exes")

    @lru_cache(maxsize=None)
    def build(name, isa):
        path = out / f"{name}.{isa}"
        path.write_bytes(build_learner(compile_file(str(example(name))).learner, isa).elf)
        path.chmod(0o755)
        return path
    return build


def run(path, isa, *args):
    return run_exe(path, *args, target=isa)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", LEARNER_NAMES)
@pytest.mark.parametrize("steps", [0, 1, 5, 50])
def test_learner_equals_oracle_and_interpreter(executable, isa, name, steps):
    r = run(executable(name, isa), isa, "--steps", steps)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == oracle.run(name, steps=steps)
    assert r.stdout == alphac("run", example(name), "--steps", steps)[1]


@pytest.mark.parametrize("isa", ISAS)
def test_default_steps(executable, isa):
    assert run(executable("lsq_adam", isa), isa).stdout == oracle.run("lsq_adam", steps=5)


USAGE = ("usage: {} [--steps N] [--epochs E] [--checkpoint DIR] [--resume DIR] [--resume-latest DIR] [--checkpoint-every K] [--keep N] [--loss-every K] "
         "[--evaluate] [--data DIR]\n")
DECIMAL = "not a decimal whole number of at most 15 digits"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("args, why", [
    (["--steps"], "--steps: needs a value"), (["--steps", "x"], f"--steps: {DECIMAL}"),
    (["--steps", "abc"], f"--steps: {DECIMAL}"), (["--steps", "-1"], f"--steps: {DECIMAL}"),
    (["--stepz", "3"], "--stepz: unknown option; --help lists them"),
    (["--bogus"], "--bogus: unknown option; --help lists them"),
    (["--steps", "1234567890123456"], f"--steps: {DECIMAL}"), (["5"], "5: unknown option; --help lists them"),
    (["--steps", ""], f"--steps: {DECIMAL}"), (["--epochs", "1", "--steps", "2"], "--epochs: not with --steps"),
    (["--" + "x" * 200], "--" + "x" * 94 + ": unknown option; --help lists them")])
def test_usage_refusal_prints_the_usage_and_names_the_argument(executable, isa, args, why):
    exe = executable("lsq_adam", isa)
    r = run(exe, isa, *args)
    assert (r.returncode, r.stdout, r.stderr) == (64, "", USAGE.format(exe) + f"refused: usage ({why})\n")


@pytest.mark.parametrize("isa", ISAS)
def test_help_and_version(executable, isa):
    from elftools.elf.elffile import ELFFile
    from alphac.driver import compile_file
    from alphac.manifest import compiler
    exe = executable("lsq_adam", isa)
    assert (lambda r: (r.returncode, r.stdout, r.stderr))(run(exe, isa, "--steps", "x", "--help")) \
        == (0, USAGE.format(exe), "")
    with open(exe, "rb") as f:
        note = next(ELFFile(f).get_section_by_name(".note.gnu.build-id").iter_notes())["n_desc"]
    r = run(exe, isa, "--version")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == (f"learner lsq_adam {compile_file(str(example('lsq_adam'))).learner.identity}\n"
                        f"target {isa}\ncompiler alphac 0.1.0 sha256 {compiler()['sha256']}\n"
                        f"build {note}\n")


@pytest.mark.parametrize("isa", ISAS)
def test_non_finite_refusal(tmp_path, isa):
    from alphac.driver import compile_file
    p = tmp_path / "blowup.alpha"
    p.write_text("learner blowup\nstate s: f64 = 1e300\nupdate {\n  s = s * 1e10\n}\n")
    exe = tmp_path / "blowup"
    exe.write_bytes(build_learner(compile_file(p).learner, isa).elf)
    exe.chmod(0o755)
    r = run(exe, isa, "--steps", 1)
    assert (r.returncode, r.stdout, r.stderr) == (65, "", "refused: non-finite-state\n")
    assert run(exe, isa, "--steps", 0).returncode == 0


def _elf(path):
    from elftools.elf.elffile import ELFFile
    return ELFFile(io.BytesIO(Path(path).read_bytes()))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_elf_is_static_wx_and_reads_cleanly(executable, isa, name):
    from elftools.elf.constants import P_FLAGS
    path = executable(name, isa)
    elf = _elf(path)
    assert (elf["e_type"], elf["e_machine"]) == ("ET_EXEC", ELF_MACHINE[isa])
    types = [s["p_type"] for s in elf.iter_segments()]
    assert "PT_INTERP" not in types and "PT_DYNAMIC" not in types
    assert "PT_GNU_STACK" in types and "PT_NOTE" in types
    for s in elf.iter_segments():
        assert not (s["p_flags"] & P_FLAGS.PF_W and s["p_flags"] & P_FLAGS.PF_X)
    assert elf.get_section_by_name(".dynamic") is None
    syms = {s.name for s in elf.get_section_by_name(".symtab").iter_symbols()}
    assert {"_start", "rt_start", "main", "learner_step_at"} <= syms
    r = subprocess.run([require_tool("readelf"), "-W", "-a", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "" and "warning" not in r.stdout.lower()
    assert Path(path).stat().st_size < 40960        # learner, runtime (checkpoints, the loss, the
    # f64x2 word copies, the bounded appends' checks: +2.7 KB, issue 45; the usage line, --help,
    # --version and a refusal's detail: +3.4 KB with their symbols, issue 46; periodic checkpoints
    # and their pruning, issue 44, and the first sample block's G written in place, issue 43:
    # lsq_momentum 37,016 bytes), ELF


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_every_word_decodes_and_nothing_is_fused(executable, isa, name):
    import capstone
    arch, mode = target(isa).capstone
    cs = capstone.Cs(getattr(capstone, arch), getattr(capstone, mode))
    elf = _elf(executable(name, isa))
    text = elf.get_section_by_name(".text")
    code, base = text.data(), text["sh_addr"]
    funcs = [s for s in elf.get_section_by_name(".symtab").iter_symbols()
             if s["st_info"]["type"] == "STT_FUNC"]
    seen = set()
    for s in funcs:
        body = code[s["st_value"] - base: s["st_value"] - base + s["st_size"]]
        insns = list(cs.disasm(body, s["st_value"]))
        assert sum(i.size for i in insns) == len(body), f"{s.name}: capstone cannot decode it"
        seen |= {i.mnemonic for i in insns}
    assert not any(FUSED[isa](m) for m in seen), sorted(seen)
    assert ARITH[isa] <= seen or name == "independent_state"


def system_calls(path, isa, tmp_path, *args) -> list[str]:
    if isa == "x86_64":
        r = subprocess.run([require_tool("strace"), "-f", "-qq", "-e", "trace=all", str(path), *args],
                           capture_output=True, text=True)
        return [line.split("(")[0] for line in r.stderr.splitlines() if "(" in line][1:]   # after execve
    log = tmp_path / "strace.log"
    subprocess.run([require_tool("qemu-aarch64"), "-strace", "-D", str(log), str(path), *args],
                   capture_output=True, timeout=60)
    return re.findall(r"^\d+ (\w+)\(", log.read_text(), re.M)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("args", [("--steps", "3"), ("--steps", "x")])
def test_only_write_and_exit_group(executable, isa, args, tmp_path):
    calls = system_calls(executable("lsq_adam", isa), isa, tmp_path, *args)
    assert calls and calls[-1] == "exit_group" and set(calls) == {"write", "exit_group"}, calls


@pytest.mark.parametrize("isa", ISAS)
def test_rebuild_is_byte_identical(executable, isa):
    from alphac.driver import compile_file
    again = build_learner(compile_file(str(example("lsq_adam"))).learner, isa).elf
    assert Path(executable("lsq_adam", isa)).read_bytes() == again


@pytest.mark.parametrize("isa", ISAS)
def test_every_lir_operation(tmp_path, isa):
    exe = build_rt_exe(Path(__file__).parent / "rt" / "ops.rt", isa, tmp_path)
    r = run(exe, isa)
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout


# -- what belongs to one ISA ------------------------------------------------------------------
GENERIC_UNISTD = "/usr/include/asm-generic/unistd.h"


def test_aarch64_syscall_numbers_match_the_generic_table():
    """abi.SYSCALLS against the kernel's header: same numbers, and exactly the x86-64 names that
    the generic table has."""
    from alphac.aarch64.abi import SYSCALLS
    from alphac.x86_64.abi import SYSCALLS as X86
    if not Path(GENERIC_UNISTD).exists():
        pytest.skip(f"{GENERIC_UNISTD} is not installed (linux-libc-dev)")
    defs = dict(re.findall(r"^#define (__NR\w+)\s+(\w+)", Path(GENERIC_UNISTD).read_text(), re.M))

    def number(name):
        v = defs.get(f"__NR_{name}")
        v = defs.get(v, v)                           # __NR_fstat -> __NR3264_fstat -> 80
        return int(v) if v is not None and v.isdigit() else None
    header = {name: number(name) for name in X86 if number(name) is not None}
    assert SYSCALLS == header
    assert set(X86) - set(SYSCALLS) == {"rename", "mkdir", "unlink"}


def test_runtime_uses_only_syscalls_both_targets_have():
    from alphac.aarch64.abi import SYSCALLS
    from alphac.runtime import source
    used = {n for p in (Path(__file__).parent.parent / "alphac" / "runtime").glob("*.rt")
            for n in re.findall(r"SYS_(\w+)", source(p.stem))}
    assert used and used <= set(SYSCALLS)


def test_aarch64_branch_beyond_its_range_is_a_clear_error():
    from alphac.aarch64 import encode_mi
    from alphac.lower.assemble import MI
    assert len(encode_mi(MI("b.ne", (), target="near"), 0, {"near": (1 << 20) - 4})[0]) == 4
    with pytest.raises(ValueError, match="beyond its range"):
        encode_mi(MI("b.ne", (), target="far"), 0, {"far": 1 << 20})
    with pytest.raises(ValueError, match="beyond its range"):
        encode_mi(MI("bl", (), target="far"), (1 << 27) + 4, {"far": 0})


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
