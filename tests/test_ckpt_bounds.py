"""Checkpoints of every name and step count a program can have (issue 45): state and role names of
the language's limit (128 characters, E0005), a ZeRO-3 partition of a wide layer, step counts past
10, 100, 1,000 and 10^9, each written, restored and resumed with the interpreter's bits; the
repository's own digits ZeRO-3 star checkpointed after 12 steps (it refused `checkpoint-write`
after 10 when a shard's path reached 32 bytes); and the memory rule of the runtime language
(alphac.lower.rt_bounds) refusing each kind of unchecked write, with a bounded append that
refuses by name at run time."""
import hashlib
import re
import struct
import subprocess
from pathlib import Path

import pytest

from backend import build_deployment, run_exe
from conftest import EXAMPLES, alphac
from alphac.formats import CKPT_HEADER, CKPT_RECORD, NAME_MAX

HDR, REC = CKPT_HEADER.size, CKPT_RECORD.size
PATH, PATHB = CKPT_RECORD.offset("path"), CKPT_RECORD.field("path").size
W = "weights_of_a_layer_named_as_a_researcher_would_" + "w" * (NAME_MAX - 47)
V = "velocity_weights_" + "v" * (NAME_MAX - 17)
ROLE = "owner_group_" + "o" * (NAME_MAX - 12)
assert len(W) == len(V) == len(ROLE) == NAME_MAX


def long_names_source() -> str:
    """lsq_momentum with the longest names the language takes, and a star of owners with the
    longest role name whose state is partitioned ZeRO-3."""
    text = (EXAMPLES / "lsq_momentum.alpha").read_text()
    text = text.split("# -- deployments")[0]
    text = re.sub(r"\bw\b", W, text)
    text = re.sub(r"\bv\b", V, text)
    return text + f"""
deployment wide {{
  roles coordinator, {ROLE}[3]
  topology star(coordinator)
  samples {ROLE}[0] = 0..3, {ROLE}[1] = 3..5, {ROLE}[2] = 5..8
  strategy zero3
  partition even
}}
"""


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    src = d / "long_names.alpha"
    src.write_text(long_names_source())
    code, _, err = alphac("build", src, "-o", d / "exe")
    assert code == 0, err
    return src, d / "exe"


def interp(src: Path, steps: int) -> str:
    code, out, err = alphac("run", src, "--steps", steps)
    assert code == 0, err
    return out


def manifest_records(ck: Path) -> list[dict]:
    data = (ck / "MANIFEST").read_bytes()
    count = struct.unpack_from("<Q", data, 96)[0]
    return [CKPT_RECORD.unpack(data, HDR + REC * k) for k in range(count)]


@pytest.mark.parametrize("steps", [11, 101, 1001])
def test_longest_names_checkpoint_and_resume_past_10_100_1000_steps(learner, steps, tmp_path):
    src, exe = learner
    a = run_exe(exe, "--steps", steps, "--checkpoint", tmp_path / "ck")
    assert a.returncode == 0, a.stderr
    recs = manifest_records(tmp_path / "ck")
    assert sorted(r["state"].rstrip(b"\0").decode() for r in recs) == sorted([W, V])
    for r in recs:
        rel = r["path"].rstrip(b"\0").decode()
        assert rel.startswith("single/") and rel.endswith(f".v{steps}.npy") and (tmp_path / "ck" / rel).is_file()
    b = run_exe(exe, "--steps", 2, "--resume", tmp_path / "ck")
    assert b.returncode == 0 and b.stdout == interp(src, steps + 2), b.stderr


def at_version(ck: Path, out: Path, version: int) -> None:
    """The checkpoint at ck as though written at step `version`: the root's version field, the
    shards renamed and their records pointing at them, the trailer recomputed."""
    data = bytearray((ck / "MANIFEST").read_bytes())
    struct.pack_into("<Q", data, 88, version)
    count = struct.unpack_from("<Q", data, 96)[0]
    for k in range(count):
        off = HDR + REC * k + PATH
        rel = data[off:off + PATHB].rstrip(b"\0").decode()
        new = re.sub(r"\.v\d+\.npy$", f".v{version}.npy", rel)
        (out / new).parent.mkdir(parents=True, exist_ok=True)
        (out / new).write_bytes((ck / rel).read_bytes())
        data[off:off + PATHB] = new.encode() + bytes(PATHB - len(new))
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    (out / "MANIFEST").write_bytes(bytes(data))


def test_a_step_count_past_10_to_the_9(learner, tmp_path):
    src, exe = learner
    assert run_exe(exe, "--steps", 3, "--checkpoint", tmp_path / "ck").returncode == 0
    big = tmp_path / "big"
    big.mkdir()
    at_version(tmp_path / "ck", big, 10 ** 9 - 1)
    # a full-batch learner's step does not depend on its number: 3 + 2 steps, whatever the count
    b = run_exe(exe, "--steps", 2, "--resume", big, "--checkpoint", tmp_path / "next")
    assert b.returncode == 0 and b.stdout == interp(src, 5), b.stderr
    assert struct.unpack_from("<Q", (tmp_path / "next" / "MANIFEST").read_bytes(), 88)[0] == 10 ** 9 + 1
    assert {r["path"].rstrip(b"\0").decode().rsplit(".", 2)[1] for r in manifest_records(tmp_path / "next")} \
        == {"v1000000001"}
    c = run_exe(exe, "--steps", 1, "--resume", tmp_path / "next")
    assert c.returncode == 0 and c.stdout == interp(src, 6), c.stderr


def test_zero3_star_of_the_longest_role_names(learner, tmp_path):
    from alphac.tools.launch import launch
    src, _ = learner
    dep = build_deployment(src, "wide", tmp_path / "b")
    full = launch(dep, steps=13, records=tmp_path / "runs", deadline_ms=20000)
    first = launch(dep, steps=11, records=tmp_path / "runs", deadline_ms=20000, checkpoint=tmp_path / "ck")
    rest = launch(dep, steps=2, records=tmp_path / "runs", deadline_ms=20000, resume=tmp_path / "ck")
    assert full["passed"] and first["passed"] and rest["passed"]
    assert rest["published"] == full["published"]
    shards = [p.relative_to(tmp_path / "ck").as_posix() for p in (tmp_path / "ck").rglob("*.npy")]
    assert any(s.startswith(f"{ROLE}.2/{V}.") and s.endswith(".e0.v11.npy") for s in shards), shards


def test_digits_zero3_checkpoints_after_10_steps(tmp_path):
    """The repository's own example refused `checkpoint-write` after 10 steps (issue 45)."""
    from alphac.tools.launch import launch
    dep = build_deployment(EXAMPLES / "digits_mlp.alpha", "digits_star_zero3", tmp_path / "b")
    full = launch(dep, steps=14, records=tmp_path / "runs", deadline_ms=30000)
    first = launch(dep, steps=12, records=tmp_path / "runs", deadline_ms=30000, checkpoint=tmp_path / "ck")
    rest = launch(dep, steps=2, records=tmp_path / "runs", deadline_ms=30000, resume=tmp_path / "ck")
    assert full["passed"] and first["passed"] and rest["passed"]
    assert rest["published"] == full["published"]
    assert (tmp_path / "ck" / "owner.1" / "W1.512-1024.e0.v12.npy").is_file() or \
        any(p.name.endswith(".e0.v12.npy") for p in (tmp_path / "ck" / "owner.1").iterdir())


# -- the memory rule of the runtime language ------------------------------------------------------
def lower(src: str):
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    return lower_program(rt.parse(src, "t.rt"), {}, entry="main")


HEAD = """
fn bytes_copy(dst: i64 writes n, src: i64, n: i64) {
    let i = 0;
    while i < n { store8(dst + i, load8(src + i)); i = i + 1; }
}
fn dec_len(v: i64) -> i64 { return 1; }
fn dec_to(p: i64 writes 20, v: i64) -> i64 { store8(p, '0'); return 1; }
fn rt_refuse(msg: i64, n: i64, code: i64) { }
global buf: [u8; 32];
"""
REFUSED = {
    "a computed offset": "fn main(n: i64) -> i64 { store8(buf + n, 0); return 0; }",
    "a computed length": "fn main(n: i64) -> i64 { bytes_copy(buf, \"abc\", n); return 0; }",
    "past the end": "fn main(n: i64) -> i64 { store64(buf + 28, 0); return 0; }",
    "past the end by a call": "fn main(n: i64) -> i64 { dec_to(buf + 16, n); return 0; }",
    "through a local": "fn main(n: i64) -> i64 { let p = buf; p = p + n; store8(p, 1); return 0; }",
    "an undeclared writer": "fn w(p: i64) { store8(p + 40, 0); }\nfn main(n: i64) -> i64 { w(buf); return 0; }",
    "room for less": "fn main(n: i64) -> i64 { store64(room(buf, n, 4, \"buffer-bound\"), 0); return 0; }",
    "room for another length": "fn main(n: i64) -> i64 { bytes_copy(room(buf, 0, n, \"buffer-bound\"), \"a\", n + 1); return 0; }",
}
ACCEPTED = {
    "constant, in bounds": "fn main(n: i64) -> i64 { store64(buf + 24, 0); dec_to(buf + 12, n); return 0; }",
    "a bounded append": "fn main(n: i64) -> i64 { let at = put(buf, 0, \"abc\", n, \"buffer-bound\"); return put_dec(buf, at, n, \"buffer-bound\"); }",
    "room": "fn main(n: i64) -> i64 { store64(room(buf, n, 8, \"buffer-bound\"), 0); bytes_copy(room(buf, 0, n, \"buffer-bound\"), \"a\", n); return 0; }",
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_the_memory_rule_refuses_unchecked_writes(what):
    from alphac.lower.rt import RtError
    with pytest.raises(RtError, match="writes"):
        lower(HEAD + REFUSED[what])


@pytest.mark.parametrize("what", sorted(ACCEPTED))
def test_the_memory_rule_takes_proven_and_bounded_writes(what):
    lower(HEAD + ACCEPTED[what])


GENERATED = """const CK_CAP = 4096;
global ck_buf: [u8; 4096]; global ck_fill: [u8; 64]; global ck_recs: [u8; 1152];
global ck_sub: [u8; 576]; global role_identity: [u8; 192];"""


def test_the_runtime_holds_to_the_rule():
    """Every runtime module is checked when any program is lowered: a write of the old kind put
    back into ckpt.rt (the 32-byte path buffer filled through a helper) is refused."""
    from alphac import build
    from alphac.lower import rt
    from alphac.lower.rt import RtError
    text = build.source("ckpt")
    bad = text.replace("fn shard_name(state: i64, lo: i64, hi: i64) {",
                       "fn old_name(out: i64) { store8(out + 40, 0); }\n"
                       "fn shard_name(state: i64, lo: i64, hi: i64) {\n    old_name(ck_rel);")
    assert bad != text
    from alphac.lower.rt_bounds import check_function
    from alphac.lower.rt_lower import Module
    items = list(rt.parse(build.target("x86_64").prelude(), "prelude.rt"))
    items += [it for m in rt.modules("single", build.runtime_items) if m != "ckpt"
              for it in build.runtime_items(m)]

    def check(ckpt_text):
        mod = Module(items + rt.parse(ckpt_text, "ckpt.rt") + rt.parse(GENERATED, "gen.rt"))
        for it in mod.fns.values():
            check_function(mod, it)
    check(text)
    with pytest.raises(RtError, match="old_name: store8 writes through parameter `out`"):
        check(bad)


def test_a_bounded_append_refuses_by_name_before_writing(tmp_path):
    """A checkpoint directory of RT_PATH_MAX + 1 bytes is refused at start (usage), before a step."""
    src = EXAMPLES / "lsq_momentum.alpha"
    code, _, err = alphac("build", src, "-o", tmp_path / "exe")
    assert code == 0, err
    long_dir = tmp_path / ("d" * 200)
    deep = Path(*([str(long_dir)] + ["e" * 250] * 15))
    assert len(str(deep)) > 3584
    r = run_exe(tmp_path / "exe", "--steps", 1, "--checkpoint", deep)
    assert r.returncode == 64 and r.stderr.endswith("refused: usage (--checkpoint: a path over 3584 bytes)\n") and r.stdout == ""
    assert not long_dir.exists()


def test_every_runtime_buffer_is_in_the_audit():
    """docs/runtime.md's table names every global buffer of alphac/runtime/*.rt, with its bound."""
    from conftest import ROOT
    doc = (ROOT / "docs" / "runtime.md").read_text()
    table = doc[doc.index("## Memory"):doc.index("## Addresses and names")]
    names = set()
    for f in sorted((ROOT / "alphac" / "runtime").glob("*.rt")):
        names |= set(re.findall(r"^(?:global|var) (\w+):", f.read_text(), re.M))
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert not missing, missing
