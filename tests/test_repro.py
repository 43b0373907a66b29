"""Reproducible builds (DESIGN.md contract 4): manifests, `alphac verify`, reproducible/check.py.

The mutant tests copy the project, make the copy's compiler deliberately non-reproducible, and
show that reproducible/check.py catches it, naming the artifact, the ELF section and the offset.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, alphac
from alphac import artifacts, manifest
from alphac.lower.target import targets

EXAMPLE_NAMES = sorted(p.stem for p in (ROOT / "examples").glob("*.alpha"))
CHECK = Path("reproducible") / "check.py"


def inputs_of(source: str, deployment: str | None = None) -> list[str]:
    """What an example is compiled from: its source and every .npy file it loads, and for a
    deployment's GPU owners its cards' descriptions (its `gpu` item)."""
    text = (ROOT / source).read_text()
    loads = re.findall(r'load\("([^"]+)"\)', text)
    if deployment is not None:
        block = text.split(f"deployment {deployment} {{", 1)[1].split("}", 1)[0]
        loads += [f for line in block.splitlines() if line.strip().startswith("gpu ")
                  for f in re.findall(r'"([^"]+)"', line)]
    return sorted({source, *(f"{Path(source).parent.as_posix()}/{p}" for p in loads)})


def walk(value, key=None):
    """(key, item) for every key and scalar in a JSON value (a scalar with the key it is under)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield None, k
            yield from walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v, key)
    else:
        yield key, value


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """reproducible/check.py on this tree (`make repro`), once for the module: its run, and its
    build A copied (`--copy-a`): `alphac build-all` of a copy of this project, so the artifacts
    and manifest `build-all` writes here, byte for byte, as the check itself shows."""
    out = tmp_path_factory.mktemp("built") / "out"
    run = subprocess.run([sys.executable, str(ROOT / CHECK), "--copy-a", str(out)],
                         capture_output=True, text=True, timeout=600)
    return run, out


@pytest.fixture(scope="module")
def built_once(checked):
    """`alphac build-all` of this project, once for the module (the check's build A)."""
    run, out = checked
    assert run.returncode == 0 and (out / "MANIFEST.json").is_file(), run.stdout + run.stderr
    return out


@pytest.fixture
def built(built_once, tmp_path, monkeypatch):
    """A copy of that build, tmp_path/out, for a test to read or change."""
    monkeypatch.chdir(ROOT)
    shutil.copytree(built_once, tmp_path / "out")
    return tmp_path / "out"


@pytest.fixture
def built_few(built):
    """That copy with its manifest naming one executable, learners/lsq_adam.x86_64, for the
    verify mutants below (each rebuilds everything it names; the fresh build's verify, whole)."""
    m = json.loads((built / "MANIFEST.json").read_text())
    arts = {p: a for p, a in m["artifacts"].items() if p == "learners/lsq_adam.x86_64"}
    used = {i for a in arts.values() for i in a["inputs"]}
    manifest.write(built / "MANIFEST.json", {**m, "artifacts": arts,
                                             "inputs": {i: e for i, e in m["inputs"].items() if i in used}})
    return built


# ---- the manifest ------------------------------------------------------------------------------
def test_manifest_is_sorted_stable_and_complete(built, tmp_path):
    """(That a second build gives the same bytes, every file, is reproducible/check.py's,
    under varied conditions: test_check_passes_on_this_tree.)"""
    text = (built / "MANIFEST.json").read_text()
    files = [p for p in built.rglob("*") if p.is_file()]
    assert len(files) == len(artifacts.all_recipes()) + 1       # every recipe's, and the manifest
    m = json.loads(text)
    assert text == json.dumps(m, sort_keys=True, indent=2) + "\n"
    assert set(m) == {"format", "compiler", "tools", "inputs", "artifacts"}
    assert m["format"] == manifest.FORMAT and set(m["tools"]) == {"ptxas"}
    assert m["tools"]["ptxas"]["version"].startswith("Cuda compilation tools")
    from alphac.math import table_digests
    assert m["compiler"] == {"sha256": manifest.compiler_digest(ROOT / "alphac"),
                             "version": "0.1.0", "math_tables": table_digests()}
    assert {"exp2", "exp_t", "log_inv", "log_l"} <= set(m["compiler"]["math_tables"])
    learners = [f"learners/{n}.{t}" for n in EXAMPLE_NAMES for t in sorted(targets())]
    names = [p for p, _ in artifacts.all_recipes()]
    assert sorted(m["artifacts"]) == names and set(learners) <= set(names)
    assert any(n.startswith("roles/lsq_adam_star/") for n in names)
    for name, a in m["artifacts"].items():
        data = (built / name).read_bytes()
        assert a["sha256"] == manifest.sha256_bytes(data) and a["size"] == len(data)
        assert (built / name).stat().st_mode & 0o777 == (0o644 if name.endswith((".json", ".cubin")) else 0o755)
        if not name.startswith("learners/"):
            assert a["recipe"]["kind"] in ("role", "roles-table", "cubin", "gpu-owner")
            gpu = a["recipe"].get("deployment") if "card" in a["recipe"] else None
            assert a["inputs"] == inputs_of(a["recipe"]["source"], gpu)
            continue
        stem, target = Path(name).stem, Path(name).suffix[1:]
        assert a["recipe"] == {"kind": "learner", "source": f"examples/{stem}.alpha",
                               "target": target}
        assert a["inputs"] == inputs_of(f"examples/{stem}.alpha")
    assert sorted(m["inputs"]) == sorted({p for a in m["artifacts"].values() for p in a["inputs"]})
    assert {p for n in EXAMPLE_NAMES for p in inputs_of(f"examples/{n}.alpha")} <= set(m["inputs"])
    assert {"examples/h200.gpuhost", "examples/h200-1.gpuhost"} <= set(m["inputs"])
    assert "examples/data/digits_w1.npy" in m["inputs"]          # a const's load is an input too
    for p, entry in m["inputs"].items():
        assert entry["sha256"] == manifest.sha256_file(ROOT / p)
    # no absolute path, no time, no host
    assert str(ROOT) not in text and str(tmp_path) not in text
    keys = {k for part in ("compiler", "tools") for k in m[part]} | {
        k for a in m["artifacts"].values() for k in [*a, *a["recipe"]]}
    assert not [k for k in keys if re.search(r"time|date|host|user|dir", k, re.I)]
    for key, v in walk(m):
        if isinstance(v, str):
            assert not v.startswith("/") and not re.search(r"\d{4}-\d\d-\d\d|\d\d:\d\d", v), v
        elif isinstance(v, int) and key not in ("size", "memory"):     # bytes, not times
            assert not 10**9 <= v < 10**19, (key, v)    # no seconds or nanoseconds since 1970


def test_compiler_digest_covers_every_file_of_the_package_but_caches(tmp_path):
    pkg = tmp_path / "alphac"
    shutil.copytree(ROOT / "alphac", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    d = manifest.compiler_digest(pkg)
    assert d == manifest.compiler_digest(ROOT / "alphac")
    assert {"dist/strategies.alpha", "runtime/core.rt", "cli.py"} <= set(manifest.compiler_files(pkg))
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (pkg / "old.pyc").write_bytes(b"junk")
    assert manifest.compiler_digest(pkg) == d
    for name in ("runtime/core.rt", "dist/strategies.alpha", "cli.py"):
        f = pkg / name
        before = f.read_bytes()
        f.write_bytes(before + b"\n")
        assert manifest.compiler_digest(pkg) != d, name
        f.write_bytes(before)
    assert manifest.compiler_digest(pkg) == d
    (pkg / "math" / "table.bin").write_bytes(b"\0")              # a data file is read too
    assert manifest.compiler_digest(pkg) != d


def test_input_paths_are_relative_and_inside(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    assert manifest.input_path("a/../a/x.alpha") == "a/x.alpha"
    assert manifest.input_path(tmp_path / "a" / "x.alpha") == "a/x.alpha"
    for outside in ("/etc/passwd", "../x.alpha", str(tmp_path.parent / "x.alpha")):
        with pytest.raises(manifest.ManifestError, match="outside the current directory"):
            manifest.input_path(outside)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(format=99), "format 99"),
    (lambda m: m.pop("inputs"), "missing field: inputs"),
    (lambda m: m["artifacts"].update({"/tmp/x": m["artifacts"].popitem()[1]}), "not a relative"),
    (lambda m: m["inputs"].update({"../x.alpha": {"sha256": "0" * 64}}), "not a relative"),
    (lambda m: next(iter(m["artifacts"].values())).update(sha256="xyz"), "not a SHA-256"),
    (lambda m: next(iter(m["artifacts"].values())).update(inputs=["nowhere"]), "not among"),
], ids=["format", "missing", "absolute-artifact", "outside-input", "bad-sha", "unknown-input"])
def test_malformed_manifest_is_a_clear_error(built, change, message):
    m = json.loads((built / "MANIFEST.json").read_text())
    change(m)
    (built / "MANIFEST.json").write_text(json.dumps(m))
    code, out, err = alphac("verify", built / "MANIFEST.json")
    assert code == 1 and message in err and "Traceback" not in err, err


def test_missing_or_unparsable_manifest(tmp_path):
    code, _, err = alphac("verify", tmp_path / "nope.json")
    assert code == 1 and "cannot read" in err and "nope.json" in err
    (tmp_path / "bad.json").write_text("{")
    code, _, err = alphac("verify", tmp_path / "bad.json")
    assert code == 1 and "is not JSON" in err


# ---- alphac verify -----------------------------------------------------------------------------
def test_verify_accepts_a_fresh_build(built):
    """Every kind of artifact rebuilt by verify and found equal: the first of each recipe kind
    (learner, role, roles table, GPU owner, cubin) and the AArch64 learners. (That the whole
    build rebuilds to the same bytes is reproducible/check.py's: test_check_passes_on_this_tree.)"""
    m = json.loads((built / "MANIFEST.json").read_text())
    keep, kinds = {}, set()
    for path, a in sorted(m["artifacts"].items()):
        kind = a["recipe"]["kind"]
        if kind not in kinds or path.endswith(".aarch64"):
            kinds.add(kind)
            keep[path] = a
    assert kinds == {"learner", "role", "roles-table", "gpu-owner", "cubin"}, kinds
    used = {i for a in keep.values() for i in a["inputs"]}
    manifest.write(built / "MANIFEST.json", {**m, "artifacts": keep,
                                             "inputs": {i: e for i, e in m["inputs"].items() if i in used}})
    code, out, err = alphac("verify", built / "MANIFEST.json")
    assert code == 0 and err == "" and "every hash matches" in out


def test_verify_refuses_an_executable_changed_by_one_byte(built_few):
    exe = built_few / "learners" / "lsq_adam.x86_64"
    data = bytearray(exe.read_bytes())
    data[len(data) // 2] ^= 0x01
    exe.write_bytes(bytes(data))
    code, _, err = alphac("verify", built_few / "MANIFEST.json")
    assert code == 3
    assert err.splitlines() == [
        f"verify: learners/lsq_adam.x86_64: file sha256 {manifest.sha256_bytes(bytes(data))} "
        f"!= manifest {json.loads((built_few / 'MANIFEST.json').read_text())['artifacts']['learners/lsq_adam.x86_64']['sha256']}"]


def test_verify_refuses_a_changed_source(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "examples", tmp_path / "examples",      # two small learners
                    ignore=lambda d, names: [n for n in names if n.endswith(".alpha") and
                                             n not in ("scalar_regression.alpha", "two_coordinate.alpha")])
    monkeypatch.chdir(tmp_path)
    assert alphac("build-all", "--out", "out")[0] == 0
    src = tmp_path / "examples" / "scalar_regression.alpha"
    src.write_text(src.read_text().replace("a = a - 0.02 * grad(a)", "a = a - 0.03 * grad(a)"))
    code, _, err = alphac("verify", "out/MANIFEST.json")
    assert code == 3
    line = next(l for l in err.splitlines() if l.startswith("verify: input examples/scalar_regression.alpha"))
    assert "(used by " in line and "learners/scalar_regression.x86_64" in line and ": sha256" in line
    assert "verify: learners/scalar_regression.x86_64: rebuilt sha256" in err
    assert "two_coordinate" not in err


def test_verify_refuses_another_compiler(built_few):
    m = json.loads((built_few / "MANIFEST.json").read_text())
    m["compiler"]["sha256"] = "0" * 64
    manifest.write(built_few / "MANIFEST.json", m)
    code, _, err = alphac("verify", built_few / "MANIFEST.json")
    assert code == 3 and err.startswith("verify: compiler: sha256 ") and f"!= manifest {'0' * 64}" in err


def test_verify_refuses_other_math_tables(built_few):
    m = json.loads((built_few / "MANIFEST.json").read_text())
    m["compiler"]["math_tables"]["exp_t"]["sha256"] = "0" * 64
    manifest.write(built_few / "MANIFEST.json", m)
    code, _, err = alphac("verify", built_few / "MANIFEST.json")
    assert code == 3 and "verify: compiler: math table exp_t differs from the manifest's" in err


def test_build_writes_a_manifest_that_names_npy_inputs(tmp_path, monkeypatch):
    import numpy as np
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src" / "data").mkdir(parents=True)
    (tmp_path / "src" / "t.alpha").write_text(
        'learner t\ndata x = load("data/x.npy")\nparam w: f64 = 0.0\n'
        'loss(i) = (w * x[i] - 1.0)^2\nupdate {\n  w = w - 0.1 * grad(w)\n}\n')
    np.save(tmp_path / "src" / "data" / "x.npy", np.array([1.0, 2.0]))
    code, _, err = alphac("build", "src/t.alpha", "-o", "bin/t")
    assert code == 0, err
    m = manifest.load(tmp_path / "bin" / "t.manifest.json")
    npy = manifest.sha256_file("src/data/x.npy")
    assert m["inputs"] == {"src/data/x.npy": {"sha256": npy},
                           "src/t.alpha": {"sha256": manifest.sha256_file("src/t.alpha")}}
    assert m["artifacts"]["t"]["inputs"] == ["src/data/x.npy", "src/t.alpha"]
    from alphac.driver import compile_file
    from alphac import npy as npyfile
    assert compile_file("src/t.alpha").learner.data[0].origin == f"npy:{npyfile.scan('src/data/x.npy').root}"
    assert alphac("verify", "bin/t.manifest.json")[0] == 0
    np.save(tmp_path / "src" / "data" / "x.npy", np.array([1.0, 3.0]))
    code, _, err = alphac("verify", "bin/t.manifest.json")
    assert code == 3 and "verify: input src/data/x.npy (used by t): sha256" in err
    assert "verify: t: rebuilt sha256" in err


def test_build_outside_the_current_directory_writes_no_manifest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = alphac("build", ROOT / "examples" / "two_coordinate.alpha", "-o", "tc")
    assert code == 0 and (tmp_path / "tc").exists()
    assert "no manifest written" in err and not (tmp_path / "tc.manifest.json").exists()


# ---- reproducible/check.py ---------------------------------------------------------------------
def run_check(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(tree / CHECK)], capture_output=True, text=True,
                          timeout=300)


def test_check_passes_on_this_tree(checked):
    """The reproducibility check itself (`make repro`), once per `make test`."""
    r = checked[0]
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "repro: OK: " in out and "MANIFEST.json are identical" in out
    for varied in ("build path", "time zone", "umask", "HOME", "PYTHONHASHSEED",
                   "SOURCE_DATE_EPOCH", "locale", "environment", "file creation order"):
        assert f"repro:   {varied}" in out, varied
    assert "repro: not varied:" in out and ("clock: now / 397 days ahead" in out
                                            or "clock: faketime is not installed" in out)


WRITER = "alphac/elf/writer.py"
MUTANTS = {
    # a timestamp reaching the output: the string table starts with the time of the build
    "timestamp": (WRITER, 'bytearray(b"\\0")\n',
                  'bytearray(b"\\0" + str(__import__("time").time_ns()).encode() + b"\\0")\n',
                  ".strtab"),
    # an unsorted set reaching the output: symbols in the order a set of names iterates
    "set-order": (WRITER, "ordered = sorted(symbols.values(), key=lambda y: (\n"
                          "        BINDINGS[y.binding], order.index(y.section), y.offset, y.name))",
                  "ordered = [symbols[n] for n in set(symbols)]", ".symtab"),
}


def real_data(name: str) -> bool:
    """The examples on data sets or weights of examples/data/*.npy: the digits models, logistic
    and the attention model."""
    return name.startswith(("digits_", "logistic", "seq_"))


def in_mutants(name: str) -> bool:
    """The examples a mutant's copy keeps: every kind of artifact (learners, roles and their
    table, GPU owners, cubins) without the large deployments (the check on this tree builds
    those; lsq_adam's and lsq_momentum's 44 roles would be most of a mutant's builds)."""
    return not real_data(name) and not name.startswith(("lsq_adam", "lsq_momentum"))


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_check_catches_a_non_reproducible_compiler(tmp_path, mutant):
    path, old, new, section = MUTANTS[mutant]
    tree = tmp_path / "tree"
    skip = shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", ".pytest_cache",
                                  ".hypothesis", "*.egg-info")
    shutil.copytree(ROOT, tree, ignore=lambda d, names: set(skip(d, names)) | {
        n for n in names if Path(d).name == "examples" and (n == "data" or (
            n.endswith(".alpha") and not in_mutants(n)))})
    text = (tree / path).read_text()
    assert text.count(old) == 1, "the mutant no longer applies; update it"
    (tree / path).write_text(text.replace(old, new))
    r = run_check(tree)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "found by a plain copy (no git)" in out
    recipes = [(p, r) for p, r in artifacts.all_recipes() if in_mutants(Path(r["source"]).name)]
    names = [p for p, r in recipes if r["kind"] in ("learner", "role", "gpu-owner")]
    assert {r["kind"] for _, r in recipes} >= {"learner", "role", "roles-table", "gpu-owner", "cubin"}
    for name in names:
        assert f"repro: MISMATCH {name}: sha256 differs between build A and build B\n" \
               f"repro:   first difference at file offset 0x" in out, name
    first = re.findall(r"first difference at file offset 0x[0-9a-f]+, in (\S+) \+ 0x[0-9a-f]+", out)
    assert len(first) == len(names) and set(first) == {section}, out
    assert out.rstrip().endswith(f"FAIL: build A and build B differ ({len(recipes)}"
                                 f" artifacts compared)")
