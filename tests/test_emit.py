"""`alphac build --emit FORM`: to stdout, or to the file -o names instead of the executable; the
PTX is one module that ptxas assembles; without capstone, `--emit asm` is refused in one line.

Requires: ptxas (`require_tool`: CI fails without it) for the PTX and cubin-info checks.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import alphac, example, require_tool

from alphac.ptx.cubin import read_cubin
from alphac.ptx.ptxas import FLAGS                 # the build's options: one constant bank

FORMS = ("asm", "rt", "lir", "ptx", "cubin-info")
MARK = {"asm": "learner_group_0:", "rt": "fn learner_grad(", "lir": "fmul",
        "ptx": ".entry owner_sum(", "cubin-info": "kernel owner_sum:"}


@pytest.mark.parametrize("form", FORMS)
def test_emit_goes_to_o_instead_of_the_executable(form, tmp_path, monkeypatch):
    if form == "cubin-info":
        require_tool("ptxas")
    monkeypatch.chdir(tmp_path)
    code, out, err = alphac("build", example("lsq_adam"), "--emit", form, "-o", "x.txt")
    assert code == 0 and out == "", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]      # no executable, no manifest
    text = (tmp_path / "x.txt").read_text()
    assert MARK[form] in text
    code, out, err = alphac("build", example("lsq_adam"), "--emit", form)
    assert code == 0 and out == text, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]


def test_emit_to_an_unwritable_path_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    code, _, err = alphac("build", example("lsq_adam"), "--emit", "rt", "-o", tmp_path / "file" / "x")
    assert code == 1 and err.startswith("alphac: error: cannot write") and err.count("\n") == 1


@pytest.mark.parametrize("sm", (86, 90))
@pytest.mark.parametrize("name", ("lsq_adam", "independent_state", "two_coordinate"))
def test_emitted_ptx_is_one_module_ptxas_assembles(name, sm, tmp_path):
    ptxas = require_tool("ptxas")
    code, _, err = alphac("build", example(name), "--emit", "ptx", "--sm", sm,
                          "-o", tmp_path / "k.ptx")
    assert code == 0, err
    run = subprocess.run([ptxas, f"-arch=sm_{sm}", *FLAGS, "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    from alphac.driver import compile_file
    from alphac.ptx.kernels import kernels
    want = {k.name for k in kernels(compile_file(example(name)).learner, sm)}
    assert set(read_cubin((tmp_path / "k.cubin").read_bytes())) == want and want


def test_emit_asm_without_capstone_is_one_named_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "capstone", None)       # `import capstone` fails
    code, out, err = alphac("build", example("lsq_adam"), "--emit", "asm", "-o", tmp_path / "a.s")
    assert code == 1 and out == "" and not (tmp_path / "a.s").exists()
    assert err == ("alphac: error: --emit asm needs the disassembler capstone, an optional "
                   "dependency: pip install 'alphac[listing]' (or pip install capstone)\n")
