"""Authenticated membership (issue 44): the roles of a run prove its key (ALPHAC_RUN_KEY) to each
other at every connection's set-up and MAC every frame after it. Real executables on loopback:
a role without the key, with another run's, a replayed HELLO and a frame changed by one bit on
the way are refused by name; the honest run publishes the interpreter's bits; the key leaves the
role's environment; the Slurm script and the Kubernetes manifest carry the key without holding
it (docs/distribution.md, "Membership")."""
import base64
import contextlib
import os
import socket
import subprocess
import threading
import time

import pytest

import frames
from conftest import alphac, example
from frames import HEADER, recv_exact

from alphac.formats import FRAME, HELLO_BYTES
from alphac.refusals import REFUSALS

STEPS = 3
OWNERS = [f"owner.{k}" for k in range(4)]


@pytest.fixture(scope="module")
def star(example_roles):
    return example_roles / "lsq_adam_star"


@pytest.fixture(scope="module")
def honest():
    return alphac("run", example("lsq_adam"), "--deployment", "lsq_adam_star", "--steps", STEPS)[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(exe, *args, key=None):
    env = {} if key is None else {"ALPHAC_RUN_KEY": key.hex()}
    return subprocess.Popen([str(exe), "--steps", str(STEPS), "--deadline-ms", "3000", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def run_star(star, keys, port=None, parent=None, during=None):
    """The star's roles, each under keys[role] (None: no key; a role not in keys is not
    started), owners reaching the coordinator at `parent` (a proxy's port) or its own; `during`
    runs once they are started. {role: (exit code, stdout, stderr)}."""
    port = port or free_port()
    procs = {"coordinator": start(star / "coordinator", "--listen", f"127.0.0.1:{port}",
                                  key=keys["coordinator"])}
    for r in OWNERS:
        if r in keys:
            procs[r] = start(star / r, "--parent", f"127.0.0.1:{(parent or {}).get(r, port)}", key=keys[r])
    try:
        if during:
            during(port)
        return {r: (p.wait(timeout=30), p.stdout.read(), p.stderr.read()) for r, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()


def refused(out, role, name):
    assert out[role][0] == REFUSALS[name][0] and out[role][2] == f"refused: {name}\n", out[role]
    assert all(o[1] == "" for o in out.values()), "a refused run published something"


KEY = bytes(range(32))
OTHER = bytes(range(1, 33))


def test_the_honest_run_publishes_the_interpreters_bits(star, honest):
    out = run_star(star, {r: KEY for r in ["coordinator"] + OWNERS})
    assert {r: o[0] for r, o in out.items()} == dict.fromkeys(out, 0), out
    assert out["coordinator"][1] == honest


@pytest.mark.parametrize("case", ["no key", "another run's key"])
def test_a_role_without_the_run_key_is_refused_by_name(star, case):
    keys = {r: KEY for r in ["coordinator"] + OWNERS}
    keys["owner.1"] = None if case == "no key" else OTHER
    refused(run_star(star, keys), "coordinator", "peer-unauthenticated")


@pytest.mark.parametrize("key", [frames.ZERO_KEY, OTHER], ids=["no key", "another run's key"])
def test_a_parent_without_the_run_key_is_refused_by_name(star, key):
    """A stranger listening where an owner's parent should be, answering its HELLO."""
    with fake_parent(star / "owner.0", KEY) as (conn, p):
        conn.sendall(frames.accept(conn, 0, identity(), STEPS, key)[1])
        out = {"owner.0": (p.wait(timeout=10), p.stdout.read(), p.stderr.read())}
    refused(out, "owner.0", "peer-unauthenticated")


@contextlib.contextmanager
def fake_parent(role, key, *args):
    """`role` started under `key` (and `args`) with a socket here as its parent: (the
    connection, the role's process), the role ended and reaped afterwards."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        p = start(role, *args, "--parent", f"127.0.0.1:{srv.getsockname()[1]}", key=key)
        try:
            srv.settimeout(10)
            conn, _ = srv.accept()
            with conn:
                yield conn, p
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()


def captured_hello(star, key):
    """owner.1's HELLO as an eavesdropper on its link keeps it (a fake coordinator's challenge)."""
    with fake_parent(star / "owner.1", key) as (conn, _):
        conn.sendall(challenge())
        return recv_exact(conn, HEADER + HELLO_BYTES)


def identity():
    from alphac.dist.identity import digests
    from alphac.driver import compile_deployments
    return digests(compile_deployments(example("lsq_adam"))[1]["lsq_adam_star"].dep)


def challenge():
    """A CHALLENGE as the star's coordinator sends it (a fresh nonce)."""
    return frames.encode(frames.KINDS["challenge"], 0, os.urandom(32), identity(), version=STEPS)


def test_a_replayed_hello_is_refused(star):
    """owner.1's HELLO, captured on its link, replayed to a coordinator of a run with the same
    key: the coordinator's nonce is not the one it proves."""
    hello = captured_hello(star, KEY)

    def replay(port):
        t0 = time.monotonic()
        while True:
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() - t0 < 5
                time.sleep(0.02)
        with c:
            recv_exact(c, HEADER + 32)                  # the coordinator's CHALLENGE
            c.sendall(hello)
            c.settimeout(5)
            try:
                c.recv(1)
            except OSError:
                pass
    keys = {r: KEY for r in ["coordinator", "owner.0", "owner.2", "owner.3"]}
    refused(run_star(star, keys, during=replay), "coordinator", "peer-unauthenticated")


def relay(a, b, edit):
    """Frames from a to b, one by one, each through edit(n, frame); then both closed."""
    n = 0
    try:
        while True:
            head = recv_exact(a, HEADER)
            frame = edit(n, head + recv_exact(a, FRAME.unpack(head)["length"]))
            b.sendall(frame)
            n += 1
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def flip(bit, fix):
    """Frame 1 from the owner (its first after the HELLO) with one bit changed; with `fix`, its
    checksum made right again (sum64 is no secret), so that only the MAC can see it."""
    def edit(n, frame):
        if n != 1:
            return frame
        f = bytearray(frame)
        f[bit // 8] ^= 1 << (bit % 8)
        if fix:
            head = FRAME.unpack(f[:HEADER])
            zero = FRAME.pack(**{**head, "checksum": 0})
            f[:HEADER] = FRAME.pack(**{**head, "checksum": frames.sum64(zero, frames.sum64(bytes(f[HEADER:])))})
        return bytes(f)
    return edit


def through_proxy(star, keys, edit):
    """The star with owner.1's link through a proxy that edits what owner.1 sends."""
    port = free_port()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(10)
    threads = []

    def proxy():
        owner, _ = srv.accept()
        t0 = time.monotonic()
        while True:
            try:
                up = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                if time.monotonic() - t0 > 5:
                    owner.close()
                    return
                time.sleep(0.02)
        for a, b, e in ((owner, up, edit), (up, owner, lambda n, f: f)):
            threads.append(threading.Thread(target=relay, args=(a, b, e), daemon=True))
            threads[-1].start()
    t = threading.Thread(target=proxy, daemon=True)
    t.start()
    try:
        return run_star(star, keys, port=port, parent={"owner.1": srv.getsockname()[1]})
    finally:
        t.join(10)
        for th in threads:
            th.join(10)
        srv.close()


PAYLOAD_BIT = 8 * HEADER + 8 * 8 + 3                   # in the second word of the gradient sums
VERSION_BIT = 8 * FRAME.offset("version")


@pytest.mark.parametrize("bit,fix", [(PAYLOAD_BIT, True), (PAYLOAD_BIT, False), (VERSION_BIT, True)],
                         ids=["payload", "payload-checksum-left", "header"])
def test_a_frame_changed_by_one_bit_is_refused_by_name(star, honest, bit, fix):
    keys = {r: KEY for r in ["coordinator"] + OWNERS}
    assert through_proxy(star, keys, lambda n, f: f)["coordinator"][1] == honest   # the proxy is honest
    refused(through_proxy(star, keys, flip(bit, fix)), "coordinator", "frame-unauthenticated")


# what a frame whose field changed by one bit (its lowest; the checksum made right again but in
# the checksum's own case) is refused as: the checks before the MAC keep their names, every
# other field is the MAC's
BEFORE_THE_MAC = {"magic": "frame-bad-header", "format": "frame-bad-header",
                  "length": "frame-too-long", "checksum": "frame-checksum"}


@pytest.mark.parametrize("field", [f.name for f in FRAME.fields])
def test_a_bit_flipped_in_any_header_field_is_refused_by_name(star, field):
    keys = {r: KEY for r in ["coordinator"] + OWNERS}
    out = through_proxy(star, keys, flip(8 * FRAME.offset(field), field != "checksum"))
    refused(out, "coordinator", BEFORE_THE_MAC.get(field, "frame-unauthenticated"))


def test_a_replayed_frame_is_refused_by_name(star):
    """owner.1's step-0 gradients sent again in place of its step-1 ones: a valid MAC, for
    another number in the connection's sequence."""
    seen = {}

    def replay(n, frame):
        seen[n] = frame
        return seen[1] if n == 2 else frame
    refused(through_proxy(star, {r: KEY for r in ["coordinator"] + OWNERS}, replay),
            "coordinator", "frame-unauthenticated")


def test_without_a_key_the_same_change_goes_through(star, honest):
    """What the MAC is for: a run without a key takes the changed frame whose checksum was made
    right, and publishes other bits than the honest run."""
    out = through_proxy(star, {r: None for r in ["coordinator"] + OWNERS}, flip(PAYLOAD_BIT, True))
    assert out["coordinator"][0] == 0 and out["coordinator"][1] != honest


def test_the_frames_macs_are_what_docs_runtime_md_says(star):
    """A fake coordinator with the run's key (tests/frames.py, written from the docs) and a real
    owner: the owner's frames carry the MACs the twin computes, and takes the twin's."""
    import struct
    from alphac.dist.structure import Role
    from alphac.driver import compile_deployments
    from alphac.lower.role import code_of
    plan = compile_deployments(example("lsq_adam"))[1]["lsq_adam_star"]
    ident, P = identity(), sum(p.size for p in plan.lr.params) + 1
    coord = code_of(plan, Role("coordinator"))
    with fake_parent(star / "owner.0", KEY, "--steps", "1") as (conn, p):      # the last --steps counts
        who, answer, session = frames.accept(conn, coord, ident, 1, KEY)
        conn.sendall(answer)
        sess = session()

        def frame():
            head = recv_exact(conn, HEADER)
            return head + recv_exact(conn, FRAME.unpack(head)["length"])
        combine = frame()
        assert sess.check(combine) and not sess.check(combine)      # its number counts
        sess.got -= 1
        payload = struct.pack(f"<{P}d", *[0.5] * P) + struct.pack("<q", 8)
        conn.sendall(frames.encode(frames.KINDS["deliver"], coord, payload, ident, session=sess))
        assert sess.check(frame())                                   # its publication
        assert p.wait(timeout=10) == 0, p.stderr.read()


def test_the_key_leaves_the_roles_environment(star):
    """/proc/PID/environ, once the role is connecting, holds no digit of the key."""
    with fake_parent(star / "owner.1", KEY) as (_, p):
        environ = open(f"/proc/{p.pid}/environ", "rb").read()
    assert b"ALPHAC_RUN_KEY=" in environ and KEY.hex().encode() not in environ


def forms(key: bytes) -> list[bytes]:
    """The ways a key could be written in clear: its bytes, hex (either case), base64."""
    return [key, key.hex().encode(), key.hex().upper().encode(), base64.b64encode(key),
            base64.urlsafe_b64encode(key), base64.b64encode(key.hex().encode())]


def test_launch_gives_each_run_its_own_key(example_roles, tmp_path, monkeypatch):
    """Two launches: each role got a key in its environment (not on its command line), a new one
    for each run; the record and the events hold none of them."""
    import alphac.tools.supervise as sup
    seen = []
    real = sup.subprocess.Popen

    def spy(argv, **kw):
        seen.append((list(argv), dict(kw["env"])))
        return real(argv, **kw)
    monkeypatch.setattr(sup.subprocess, "Popen", spy)
    from alphac.tools.launch import launch
    recs = [launch(example_roles / "lsq_adam_star", steps=1, records=tmp_path / "runs") for _ in range(2)]
    assert all(r["passed"] for r in recs)
    assert all(b"\nconnected authenticated @" in f.read_bytes() for f in (tmp_path / "runs").rglob("*.log"))
    keys = [bytes.fromhex(env["ALPHAC_RUN_KEY"]) for _, env in seen]
    assert len(keys) == 10 and len(set(keys[:5])) == 1 and len(set(keys[5:])) == 1 and keys[0] != keys[5]
    written = b"".join(p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file())
    for k in (keys[0], keys[5]):
        assert not any(f in written or f.decode(errors="replace") in " ".join(a for argv, _ in seen for a in argv)
                       for f in forms(k))


def test_the_slurm_script_and_the_kubernetes_manifest_hold_no_key(example_roles, tmp_path):
    """The Slurm job's key is a file of its run directory (mode 0600) that the task wrapper puts
    in each role's environment; the Job's is the Secret NAME-run-key that its container's
    ALPHAC_RUN_KEY references. Neither the script nor the manifest holds a key in any form
    (tests/test_slurm.py and tests/test_k8s.py run both, their runs passing with the key)."""
    from alphac.tools.k8s import generate
    from alphac.tools.slurm import write_script
    script, rdir = write_script(example_roles / "lsq_adam_tree", steps=1, records=tmp_path / "runs",
                                key=tmp_path / "record-key")
    key = bytes.fromhex((rdir / "run-key").read_text())
    assert len(key) == 32 and (rdir / "run-key").stat().st_mode & 0o777 == 0o600
    text = script.read_text()
    assert "ALPHAC_RUN_KEY=$runkey" in text and '"$run/run-key"' in text
    assert not any(f in script.read_bytes() for f in forms(key))
    w = generate(example_roles / "lsq_adam_tree", tmp_path / "k8s")
    yaml = (w["out"] / "k8s.yaml").read_text()
    assert "ALPHAC_RUN_KEY" in yaml and "secretKeyRef" in yaml and f"name: {w['name']}-run-key" in yaml
    again = generate(example_roles / "lsq_adam_tree", tmp_path / "k8s")    # the same bytes for
    assert (again["out"] / "k8s.yaml").read_text() == yaml                  # every key: none in it


def test_a_delivery_to_every_child_hashes_its_payload_once():
    """The coordinator's four deliveries of the combined gradient are one SHA-256 of it and four
    MACs (net.rt's frame_resend: the MAC's digest kept); the runs above check they are right."""
    from alphac.dist.structure import Role
    from alphac.driver import compile_deployments
    from alphac.lower.role import role_source
    plan = compile_deployments(example("lsq_adam"))[1]["lsq_adam_star"]
    src = role_source(plan, Role("coordinator"))[0]
    assert src.count("frame_resend(") == 3 and src.count("frame_send(") == 1
