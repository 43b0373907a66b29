"""Every parser of the executables, fuzzed on both ISAs: the command line, checkpoint manifests,
shards and frames. Whatever the input, an executable exits 0 or refuses by name with its code,
one line on stderr; it never dies of a signal, never hangs past its bound, and a refused resume
writes nothing. The inputs are what anyone can make: every checksum a mutation breaks is
recomputed, so the checks behind the checksums are what is tested.

RT_FUZZ_EXAMPLES (default 40) sets the examples per parser and ISA; `make` runs the default,
the issue-22 note quotes a longer run (RT_FUZZ_EXAMPLES=1000).
"""
import hashlib
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from alphac.formats import CKPT_HEADER, CKPT_RECORD, FRAME
from alphac.refusals import DETAILED, REFUSALS
from backend import build_deployment, build_learner_exe
from conftest import example, require_tool

ISAS = ["x86_64", "aarch64"]
CODES = {code: name for name, (code, _) in REFUSALS.items()}
FUZZ = settings(max_examples=int(os.environ.get("RT_FUZZ_EXAMPLES", 40)), deadline=None,
                suppress_health_check=list(HealthCheck), derandomize=True)
HDR, REC = CKPT_HEADER.size, CKPT_RECORD.size


def command(exe: Path, target: str, *args) -> list[str]:
    cmd = [str(exe), *map(str, args)]
    return [require_tool("qemu-aarch64")] + cmd if target == "aarch64" else cmd


def run(exe, target, *args, cwd=None, timeout=30):
    r = subprocess.run(command(exe, target, *args), capture_output=True, cwd=cwd, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def named(code: int, err: str, allowed=None) -> str | None:
    """The refusal an exit shows (None for success); fails on a signal or an unnamed exit."""
    assert code >= 0, f"died of signal {-code}"
    if code == 0:
        assert err == "", err
        return None
    assert code in CODES, f"exit {code} is no refusal's: {err!r}"
    name, lines = CODES[code], err.split("\n")      # `refused: NAME` alone, or with its detail
    if name in DETAILED:                              # (usage: after the usage line)
        assert lines[-2].startswith(f"refused: {name} (") and lines[-1] == "" and len(lines) <= 3, err
        assert len(lines) == 2 or lines[0].startswith("usage: "), err
    else:
        assert err == f"refused: {name}\n", (code, err)
    assert allowed is None or CODES[code] in allowed, (CODES[code], allowed)
    return CODES[code]


@pytest.fixture(scope="module")
def exes(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz-exes")
    return {t: build_learner_exe("lsq_adam", t, d) for t in ISAS}


@pytest.fixture(scope="module")
def owners(tmp_path_factory):
    """owner.0 of lsq_adam_star for each ISA."""
    d = tmp_path_factory.mktemp("fuzz-roles")
    out = {}
    for t in ISAS:
        dep = build_deployment(example("lsq_adam"), "lsq_adam_star", d / t, lambda r, _, t=t: t)
        out[t] = dep / "owner.0"
    return out


@pytest.fixture(scope="module")
def checkpoint(exes, tmp_path_factory):
    """A 3-step checkpoint of lsq_adam, and what resuming it for 2 steps prints."""
    ck = tmp_path_factory.mktemp("fuzz-ck") / "ck"
    assert run(exes["x86_64"], "x86_64", "--steps", 3, "--checkpoint", ck)[0] == 0
    files = {p.relative_to(ck).as_posix(): p.read_bytes() for p in ck.rglob("*") if p.is_file()}
    code, out, _ = run(exes["x86_64"], "x86_64", "--steps", 2, "--resume", ck)
    assert code == 0
    return files, out


# -- the command line ---------------------------------------------------------------------------
OPTIONS = ["--steps", "--checkpoint", "--resume", "--resume-latest", "--listen", "--parent", "--deadline-ms",
           "--events", "--probe-identity", "--step", "-h", "--", "-", ""]
VALUES = st.one_of(st.sampled_from(["0", "1", "3", "999999999999999", "1000000000000000",
                                    "-1", "", "1e3", "0x10", "127.0.0.1:1", "256.0.0.1:1",
                                    "1.2.3.4:0", "1.2.3.4:65536", "ck", "ck/sub", "none", "."]),
                   st.text(st.characters(min_codepoint=1, max_codepoint=0x2ff,
                                         blacklist_characters="/"), max_size=12))


@pytest.mark.parametrize("target", ISAS)
@FUZZ
@given(argv=st.lists(st.one_of(st.sampled_from(OPTIONS), VALUES), max_size=8))
def test_argv(exes, owners, target, argv, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("argv")
    for exe in (exes[target], owners[target]):
        args = list(argv)
        if exe is owners[target]:
            args += ["--deadline-ms", "200"]        # an owner without a parent refuses quickly
        code, out, err = run(exe, target, *args, cwd=cwd)
        named(code, err)


# -- manifests ----------------------------------------------------------------------------------
def write_checkpoint(files: dict, ck: Path) -> None:
    for rel, data in files.items():
        (ck / rel).parent.mkdir(parents=True, exist_ok=True)
        (ck / rel).write_bytes(data)


def fields():
    """(offset, size, name) of every manifest field of the first two records and the header."""
    out = [(f.offset, f.size, f"header.{f.name}") for f in CKPT_HEADER.fields]
    for k in range(2):
        out += [(HDR + REC * k + f.offset, f.size, f"record{k}.{f.name}") for f in CKPT_RECORD.fields]
    return out


SAME_STATE = ("record0.writer", "record1.writer", "header.owner_hi")   # may change, same state


@pytest.mark.parametrize("target", ISAS)
@FUZZ
@given(data=st.data())
def test_manifests(exes, checkpoint, target, data, tmp_path_factory):
    files, clean = checkpoint
    ck = tmp_path_factory.mktemp("man") / "ck"
    man = bytearray(files["MANIFEST"])
    how = data.draw(st.sampled_from(["field", "bitflip", "truncate", "extend"]))
    if how == "field":
        off, size, name = data.draw(st.sampled_from(fields()))
        value = data.draw(st.one_of(st.integers(0, 2 ** (8 * min(size, 8)) - 1),
                                    st.sampled_from([0, 1, 2 ** 31, 2 ** 63, 2 ** 64 - 1])))
        man[off:off + size] = (value % 2 ** (8 * min(size, 8))).to_bytes(min(size, 8), "little") \
            + bytes(max(0, size - 8))
    elif how == "bitflip":
        bit = data.draw(st.integers(0, 8 * (len(man) - 32) - 1))
        man[bit // 8] ^= 1 << (bit % 8)
        name = "bitflip"
    elif how == "truncate":
        del man[data.draw(st.integers(0, len(man) - 33)):-32]
        name = "truncate"
    else:
        man[-32:-32] = data.draw(st.binary(min_size=1, max_size=400))
        name = "extend"
    man[-32:] = hashlib.sha256(bytes(man[:-32])).digest()       # the trailer, recomputed
    write_checkpoint({**files, "MANIFEST": bytes(man)}, ck)
    before = sorted((p, p.read_bytes()) for p in ck.rglob("*") if p.is_file())
    code, out, err = run(exes[target], target, "--steps", 2, "--resume", ck, "--checkpoint", ck)
    refusal = named(code, err)
    if refusal is None:
        # a change the format leaves room for: the state read is the same
        assert out == clean and (how == "bitflip" or name in SAME_STATE or man == files["MANIFEST"]), name
    else:
        assert out == "" and before == sorted((p, p.read_bytes()) for p in ck.rglob("*") if p.is_file())


# -- shards -------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ISAS)
@FUZZ
@given(data=st.data())
def test_shards(exes, checkpoint, target, data, tmp_path_factory):
    files, clean = checkpoint
    ck = tmp_path_factory.mktemp("shard") / "ck"
    man = bytearray(files["MANIFEST"])
    k = data.draw(st.integers(0, struct.unpack_from("<Q", man, 96)[0] - 1))
    rec = HDR + REC * k
    rel = man[rec + CKPT_RECORD.offset("path"):rec + REC].rstrip(b"\0").decode()
    shard = bytearray(files[rel])
    header = 10 + struct.unpack_from("<H", shard, 8)[0]
    how = data.draw(st.sampled_from(["bitflip", "truncate", "extend"]))
    if how == "bitflip":
        bit = data.draw(st.integers(0, 8 * len(shard) - 1))
        shard[bit // 8] ^= 1 << (bit % 8)
        # a value changed is a legal state (it may train to a non-finite one)
        allowed = {"shard-corrupt"} if bit // 8 < header else \
            {None, "shard-non-finite", "non-finite-state"}
    elif how == "truncate":
        del shard[data.draw(st.integers(0, len(shard) - 1)):]
        allowed = {"shard-corrupt"}
    else:
        shard += data.draw(st.binary(min_size=1, max_size=64))
        allowed = {"shard-corrupt"}
    man[rec + 24:rec + 56] = hashlib.sha256(bytes(shard)).digest()   # its checksum, recomputed
    man[-32:] = hashlib.sha256(bytes(man[:-32])).digest()
    write_checkpoint({**files, "MANIFEST": bytes(man), rel: bytes(shard)}, ck)
    code, out, err = run(exes[target], target, "--steps", 2, "--resume", ck)
    named(code, err, allowed)


# -- frames -------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ISAS)
@FUZZ
@given(data=st.data())
def test_frames(owners, target, data):
    """A fake coordinator sends the owner a well-formed HELLO (or not), then any bytes: a frame
    header with random fields and a random payload, or garbage."""
    import frames
    from alphac.dist.identity import digests
    from alphac.driver import compile_deployments
    from alphac.dist.structure import Role
    from alphac.lower.role import code_of
    plan = compile_deployments(example("lsq_adam"))[1]["lsq_adam_star"]
    ident, coord = digests(plan.dep), code_of(plan, Role("coordinator"))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    p = subprocess.Popen(command(owners[target], target, "--steps", 1, "--deadline-ms", 500,
                                 "--parent", f"127.0.0.1:{srv.getsockname()[1]}"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        srv.settimeout(10)
        conn, _ = srv.accept()
        answer = frames.accept(conn, coord, ident, 1)[1]
        if data.draw(st.booleans()):
            conn.sendall(answer)
        kind = data.draw(st.sampled_from(sorted(frames.KINDS.values()) + [0, 9, 65535]))
        fields = dict(kind=kind, sender=data.draw(st.sampled_from([coord, 0, 2 ** 32 - 1])),
                      payload=data.draw(st.binary(max_size=300)), identity=ident,
                      version=data.draw(st.sampled_from([0, 1, 2 ** 64 - 1])),
                      epoch=data.draw(st.sampled_from([0, 1, 2 ** 63])),
                      length=data.draw(st.one_of(st.none(), st.integers(0, 2 ** 32 - 1))))
        try:
            if data.draw(st.booleans()):
                conn.sendall(frames.encode(**fields))
            else:
                conn.sendall(data.draw(st.binary(min_size=1, max_size=400)))
            if data.draw(st.booleans()):
                conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass                                     # the owner refused before reading it all
        t0 = time.monotonic()
        out, err = p.communicate(timeout=15)
        assert time.monotonic() - t0 < 8, "the owner outlived its deadline"
        conn.close()
    finally:
        srv.close()
        if p.poll() is None:
            p.kill()
    named(p.returncode, err.decode(errors="replace"))
