"""The AArch64 backend end to end: every reference learner built for AArch64 and run under
qemu-aarch64 prints exactly what the reference interpreter prints and what the x86-64 executable
prints; the executables are what pyelftools, readelf and capstone expect (static, W^X, no fused
multiply-add anywhere); they make only the system calls the runtime names; and the system-call
table agrees with the kernel's generic header."""
import io
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import LEARNER_NAMES, alphac, example, require_tool

from alphac.build import build_learner, target

STEPS = (0, 1, 5, 50)
FUSED = {"fmadd", "fmsub", "fnmadd", "fnmsub"}


@pytest.fixture(scope="session")
def executable(tmp_path_factory):
    """executable(learner, isa): the path of the learner built for `isa`, built once per session."""
    from alphac.driver import compile_file
    out = tmp_path_factory.mktemp("a64")

    @lru_cache(maxsize=None)
    def build(name, isa):
        path = out / f"{name}.{isa}"
        path.write_bytes(build_learner(compile_file(str(example(name))).learner, isa).elf)
        path.chmod(0o755)
        return str(path)
    return build


def run_a64(path, *args, qemu_flags=()):
    qemu = require_tool("qemu-aarch64")
    return subprocess.run([qemu, *qemu_flags, path, *map(str, args)], capture_output=True, timeout=60)


def same_as_x86(executable, name, args, r) -> None:
    """Where the host runs x86-64, the x86-64 executable behaves byte for byte like `r`."""
    if platform.machine() in ("x86_64", "AMD64"):
        x = subprocess.run([executable(name, "x86_64"), *map(str, args)], capture_output=True, timeout=60)
        assert (x.returncode, x.stdout, x.stderr) == (r.returncode, r.stdout, r.stderr)


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_learner_matches_interpreter_and_x86(executable, name, steps):
    r = run_a64(executable(name, "aarch64"), "--steps", steps)
    code, out, err = alphac("run", example(name), "--steps", steps)
    assert (code, err) == (0, "")
    assert (r.returncode, r.stderr) == (0, b"")
    assert r.stdout == out.encode()
    same_as_x86(executable, name, ("--steps", steps), r)


@pytest.mark.parametrize("args", [("--steps", "x"), ("--bogus",), ("--steps",)])
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_refusals(executable, name, args):
    r = run_a64(executable(name, "aarch64"), *args)
    assert (r.returncode, r.stdout, r.stderr) == (64, b"", b"refused: usage\n")
    same_as_x86(executable, name, args, r)


def _elf(path):
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return ELFFile(io.BytesIO(f.read()))


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_no_fused_multiply_add_and_every_word_decodes(executable, name):
    import capstone
    arch, mode = target("aarch64").capstone
    cs = capstone.Cs(getattr(capstone, arch), getattr(capstone, mode))
    elf = _elf(executable(name, "aarch64"))
    text = elf.get_section_by_name(".text")
    code, base = text.data(), text["sh_addr"]
    symbols = elf.get_section_by_name(".symtab").iter_symbols()
    funcs = [s for s in symbols if s["st_info"]["type"] == "STT_FUNC"]
    assert {"_start", "rt_start", "main"} <= {s.name for s in funcs}
    seen = set()
    for s in funcs:
        lo = s["st_value"] - base
        body = code[lo:lo + s["st_size"]]
        insns = list(cs.disasm(body, s["st_value"]))
        assert 4 * len(insns) == len(body), f"{s.name}+{4 * len(insns):#x}: capstone cannot decode it"
        seen |= {i.mnemonic for i in insns}
    assert not seen & FUSED
    assert {"fmul", "fadd", "svc", "bl", "adrp"} <= seen


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_static_executable(executable, name):
    elf = _elf(executable(name, "aarch64"))
    assert (elf["e_machine"], elf["e_type"]) == ("EM_AARCH64", "ET_EXEC")
    kinds = [seg["p_type"] for seg in elf.iter_segments()]
    assert "PT_INTERP" not in kinds and "PT_DYNAMIC" not in kinds and "PT_GNU_STACK" in kinds
    for seg in elf.iter_segments():
        assert not (seg["p_flags"] & 2 and seg["p_flags"] & 1), f"{seg['p_type']} is W and X"
    readelf = require_tool("readelf")
    r = subprocess.run([readelf, "-W", "-a", executable(name, "aarch64")], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""
    assert "warning" not in r.stdout.lower()


@pytest.mark.parametrize("args", [("--steps", "5"), ("--steps", "x")])
def test_only_write_and_exit_group(executable, tmp_path, args):
    log = tmp_path / "strace.log"
    r = run_a64(executable("lsq_adam", "aarch64"), *args, qemu_flags=("-strace", "-D", str(log)))
    assert r.returncode in (0, 64)
    calls = re.findall(r"^\d+ (\w+)\(", log.read_text(), re.M)
    assert calls and calls[-1] == "exit_group"
    assert set(calls) == {"write", "exit_group"}


GENERIC_UNISTD = "/usr/include/asm-generic/unistd.h"


def test_syscall_numbers_match_the_generic_table():
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
    used = {n for name in ("core", "single") for n in re.findall(r"SYS_(\w+)", source(name))}
    assert used and used <= set(SYSCALLS)


def test_branch_beyond_its_range_is_a_clear_error():
    from alphac.aarch64 import encode_mi
    from alphac.lower.assemble import MI
    assert len(encode_mi(MI("b.ne", (), target="near"), 0, {"near": (1 << 20) - 4})[0]) == 4
    with pytest.raises(ValueError, match="beyond its range"):
        encode_mi(MI("b.ne", (), target="far"), 0, {"far": 1 << 20})
    with pytest.raises(ValueError, match="beyond its range"):
        encode_mi(MI("bl", (), target="far"), (1 << 27) + 4, {"far": 0})


def test_rebuild_is_byte_identical(executable):
    from alphac.driver import compile_file
    again = build_learner(compile_file(str(example("lsq_adam"))).learner, "aarch64").elf
    assert Path(executable("lsq_adam", "aarch64")).read_bytes() == again
