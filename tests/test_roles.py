"""The distributed runtime: role executables on loopback print exactly the reference plan's bits;
malformed frames, foreign peers and lost peers are refused by name, never crash or hang."""
import json
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import oracle
from frames import HEADER, recv_exact
from conftest import EXAMPLES, ROOT, alphac, example, require_tool

from alphac.refusals import REFUSALS

SPLIT, TREE = oracle.REF_SPLIT, oracle.REF_TREE
DEPLOYMENTS = oracle.REF_DEPLOYMENTS


@pytest.fixture(scope="module")
def roles(example_roles):
    return example_roles


def launch(roles, dep, tmp_path, **kw):
    from alphac.tools.launch import launch as run
    cwd = os.getcwd()
    os.chdir(ROOT)                                   # roles.json names its source from the root
    try:
        return run(roles / dep, records=tmp_path / "runs", **kw)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("dep", sorted(DEPLOYMENTS))
@pytest.mark.parametrize("steps", [0, 1, 5, 50])
def test_deployment_equals_oracle(roles, dep, steps, tmp_path):
    if dep == "lsq_adam_mixed":
        require_tool("qemu-aarch64")
    rec = launch(roles, dep, tmp_path, steps=steps)
    assert rec["passed"], rec["roles"]
    name = DEPLOYMENTS[dep]
    assert rec["published"] == oracle.run(name, [(steps, SPLIT, TREE)])
    assert rec["published"] == alphac("run", example(name), "--deployment", dep, "--steps", steps)[1]


def test_mixed_isa_equals_all_x86(roles, tmp_path):
    require_tool("qemu-aarch64")
    a = launch(roles, "lsq_adam_mixed", tmp_path, steps=9)
    b = launch(roles, "lsq_adam_star", tmp_path, steps=9)
    assert a["published"] == b["published"] and a["passed"]
    assert {r["role"]: r["isa"] for r in a["roles"]}["owner.0"] == "aarch64"


def test_run_record_is_linked_sealed_and_verifiable(roles, tmp_path):
    from alphac.tools.record import verify_record
    rec = launch(roles, "lsq_adam_star", tmp_path, steps=3)
    path = Path(rec["path"])
    assert verify_record(path) == []
    data = json.loads(path.read_text())
    assert {r["role"] for r in data["roles"]} == {"coordinator", "owner.0", "owner.1", "owner.2", "owner.3"}
    assert all(len(r["sha256"]) == 64 and r["stream"]["count"] >= 5 for r in data["roles"])
    log = path.parent / "events" / "owner.2.log"
    log.write_text(log.read_text().replace("step 2", "step 9"))
    assert any("does not match its seal" in p for p in verify_record(path))


def test_launcher_refuses_a_changed_executable(roles, tmp_path):
    import shutil
    from alphac.refusals import Refusal
    copy = tmp_path / "b"
    shutil.copytree(roles.parent, copy)
    exe = copy / "roles" / "lsq_adam_star" / "owner.1"
    data = bytearray(exe.read_bytes())
    data[200] ^= 1
    exe.write_bytes(bytes(data))
    with pytest.raises(Refusal) as e:
        launch(copy / "roles", "lsq_adam_star", tmp_path)
    assert e.value.name == "artifact-hash"


@pytest.mark.parametrize("victim", ["coordinator", "owner.0", "owner.3"])
def test_killing_a_role_stops_everyone_by_name(roles, victim, tmp_path):
    t0 = time.monotonic()
    rec = launch(roles, "lsq_adam_star", tmp_path, steps=10**9, deadline_ms=2000, kill=(victim, 0.3))
    assert time.monotonic() - t0 < 20
    assert not rec["passed"] and rec["published"] == ""
    for r in rec["roles"]:
        if r["role"] == victim:
            assert r["signal"] == 9
        else:
            assert r["refused"] in REFUSALS and r["exit"] == REFUSALS[r["refused"]][0], r


def test_role_usage(roles):
    r = subprocess.run([str(roles / "lsq_adam_star" / "coordinator"), "--steps", "1"],
                       capture_output=True, text=True, timeout=10)
    assert (r.returncode, r.stderr.splitlines()[-1]) == (64, "refused: usage (--listen: missing: this role has children)")


# -- a fake parent speaking frames to a live owner ------------------------------------------------
def plan_of(dep="lsq_adam_star", src="lsq_adam"):
    from alphac.driver import compile_deployments
    return compile_deployments(example(src))[1][dep]


@pytest.fixture(scope="module")
def star():
    from alphac.dist.identity import digests
    from alphac.dist.structure import Role
    from alphac.lower.role import code_of
    plan = plan_of()
    return {"plan": plan, "id": digests(plan.dep), "coord": code_of(plan, Role("coordinator")),
            "owner0": code_of(plan, Role("owner", 0)),     # P: G's words, then the loss sum's
            "P": sum(p.size for p in plan.lr.params) + (plan.lr.loss is not None)}




def talk(roles, star, mutate, deadline_ms=800):
    """Start owner.0 against a fake coordinator; `mutate(conn, star)` plays the coordinator
    after the owner's HELLO (and may send any bytes). Returns (exit code, stderr)."""
    import frames
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    exe = roles / "lsq_adam_star" / "owner.0"
    p = subprocess.Popen([str(exe), "--steps", "1", "--deadline-ms", str(deadline_ms),
                          "--parent", f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        srv.settimeout(5)
        conn, _ = srv.accept()
        who, answer, _ = frames.accept(conn, star["coord"], star["id"], 1)
        assert who == star["owner0"]
        mutate(conn, {**star, "answer": answer})
        out, err = p.communicate(timeout=deadline_ms / 1000 + 10)
        conn.close()
    finally:
        srv.close()
        if p.poll() is None:
            p.kill()
    assert p.returncode >= 0, f"owner died of signal {-p.returncode}"
    return p.returncode, err


def good_hello(conn, star):
    import frames
    conn.sendall(star["answer"])
    # the owner computes and sends its contribution
    head = recv_exact(conn, frames.HEADER)
    from frames import decode_header
    h = decode_header(head)
    recv_exact(conn, h["length"])
    assert h["kind"] == 2 and h["length"] == 8 * (star["P"] + 1)


def deliver_frame(star, **kw):
    import frames
    payload = struct.pack(f"<{star['P']}d", *[0.5] * star["P"]) + struct.pack("<q", 8)
    args = dict(kind=3, sender=star["coord"], payload=payload, identity=star["id"], version=0)
    args.update(kw)
    return frames.encode(**args)


def test_a_good_conversation_publishes_nothing_at_an_owner(roles, star):
    def play(conn, star):
        good_hello(conn, star)
        conn.sendall(deliver_frame(star))
        # the owner updates, then sends its part of the publication
        head = recv_exact(conn, HEADER)
    code, err = talk(roles, star, play)
    # after the publication message, the owner finishes; it never prints the state
    assert code == 0 and err == ""


MUTATIONS = {
    "frame-checksum": lambda s, d: deliver_frame(s, checksum=12345),
    "frame-too-long": lambda s, d: deliver_frame(s, length=8 * (s["P"] + 1) + d.draw(st.integers(1, 10**6))),
    "frame-unknown-role": lambda s, d: deliver_frame(s, sender=s["owner0"]),
    "frame-out-of-order": lambda s, d: deliver_frame(s, **d.draw(st.sampled_from(
        [{"version": 1}, {"version": 7}, {"kind": 2}, {"kind": 7}]))),
    "frame-bad-header": lambda s, d: deliver_frame(s, magic=d.draw(st.integers(0, 2**32 - 1).filter(
        lambda m: m != 0x48504C41))),
    "stale-epoch": lambda s, d: deliver_frame(s, epoch=d.draw(st.integers(1, 2**63))),
}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_malformed_frames_are_refused_by_name(roles, star, data):
    from alphac.dist.identity import COMPONENTS
    choice = data.draw(st.sampled_from(sorted(MUTATIONS) + ["truncated", "garbage", "silence",
                                                          "close", "identity"]))
    expect = {choice}

    def play(conn, star):
        if choice == "identity":
            comp = data.draw(st.sampled_from(COMPONENTS))
            other = dict(star["id"])
            other[comp] = bytes(32) if other[comp] != bytes(32) else b"\1" * 32
            import frames
            conn.sendall(frames.hello(star["coord"], other, 1))
            expect.clear()
            expect.add({"learner": "peer-learner", "rate": "peer-rate", "contract": "peer-contract",
                        "combine": "peer-combine-order", "membership": "peer-membership",
                        "plan": "peer-plan"}[comp])
            return
        good_hello(conn, star)
        if choice in MUTATIONS:
            conn.sendall(MUTATIONS[choice](star, data))
        elif choice == "truncated":
            frame = deliver_frame(star)
            conn.sendall(frame[:data.draw(st.integers(1, len(frame) - 1))])
            conn.shutdown(socket.SHUT_WR)
            expect.clear()
            expect.update({"frame-truncated"})
        elif choice == "garbage":
            conn.sendall(data.draw(st.binary(min_size=1, max_size=400)))
            conn.shutdown(socket.SHUT_WR)
            expect.clear()
            expect.update(REFUSALS)
        elif choice == "close":
            conn.shutdown(socket.SHUT_RDWR)
            expect.clear()
            expect.add("peer-lost")
        elif choice == "silence":
            expect.clear()
            expect.add("peer-lost")
    t0 = time.monotonic()
    code, err = talk(roles, star, play)
    assert time.monotonic() - t0 < 8, "the owner did not respect its deadline"
    assert err.startswith("refused: ") and err.count("\n") == 1, err
    name = err.strip()[len("refused: "):]
    assert name in expect and code == REFUSALS[name][0], (choice, err)


def test_foreign_peers_built_from_mutated_sources(tmp_path, roles):
    """Real executables built for another learner / rate / combine order / membership / plan
    connect to the real coordinator: both sides refuse by name, nothing is combined."""
    base = (EXAMPLES / "lsq_adam.alpha").read_text()
    cases = {
        "peer-learner": base.replace("y = [0.7, 3.1", "y = [0.75, 3.1"),
        "peer-rate": base.replace("const lr = 0.05", "const lr = 0.04"),
        "peer-combine-order": base.replace(
            "  combine ((owner[0], owner[1]), (owner[2], owner[3]))\n}\n\ndeployment lsq_adam_tree",
            "  combine ((owner[0], owner[2]), (owner[1], owner[3]))\n}\n\ndeployment lsq_adam_tree"),
        "peer-plan": base.replace("owner[2] = 3..4, owner[3] = 4..8\n  combine ((owner[0], owner[1]), (owner[2], owner[3]))\n}\n\ndeployment lsq_adam_tree",
                                  "owner[2] = 3..5, owner[3] = 5..8\n  combine ((owner[0], owner[1]), (owner[2], owner[3]))\n}\n\ndeployment lsq_adam_tree"),
    }
    from alphac.build import build_role
    from alphac.dist.structure import Role
    from alphac.driver import compile_deployments
    started = {}                                # the cases' deployments run at once, each its port
    for want, text in cases.items():
        assert text != base, want
        src = tmp_path / "lsq_adam.alpha"
        src.write_text(text)
        plan = compile_deployments(src)[1]["lsq_adam_star"]
        foreign = tmp_path / f"owner.1-{want}"
        foreign.write_bytes(build_role(plan, Role("owner", 1)).elf)
        foreign.chmod(0o755)
        port = socket.socket()
        port.bind(("127.0.0.1", 0))
        pn = port.getsockname()[1]
        port.close()
        real = roles / "lsq_adam_star"
        procs = {"coordinator": subprocess.Popen([str(real / "coordinator"), "--listen", f"127.0.0.1:{pn}",
                                                  "--deadline-ms", "3000"], stderr=subprocess.PIPE, text=True)}
        procs["owner.1"] = subprocess.Popen([str(foreign), "--parent", f"127.0.0.1:{pn}",
                                             "--deadline-ms", "3000"], stderr=subprocess.PIPE, text=True)
        for k in (0, 2, 3):
            procs[f"owner.{k}"] = subprocess.Popen([str(real / f"owner.{k}"), "--parent", f"127.0.0.1:{pn}",
                                                    "--deadline-ms", "3000"], stderr=subprocess.PIPE, text=True)
        started[want] = procs
    for want, procs in started.items():
        results = {n: (p.wait(timeout=20), p.stderr.read()) for n, p in procs.items()}
        assert results["coordinator"][1] == f"refused: {want}\n", (want, results)
        assert all(code != 0 for code, _ in results.values())


# -- deadlines per frame and per connection set-up (issue 22) ---------------------------------------
def trickle(conn, data, every, limit):
    """Send `data` one byte every `every` seconds, for at most `limit` seconds or until the peer
    goes away; returns how long the peer held on."""
    t0 = time.monotonic()
    try:
        for i in range(len(data)):
            conn.sendall(data[i:i + 1])
            time.sleep(every)
            if time.monotonic() - t0 > limit:
                break
    except OSError:
        pass
    return time.monotonic() - t0


def test_a_parent_trickling_a_frame_holds_an_owner_no_longer_than_its_deadline(roles, star):
    held = []

    def play(conn, star):
        good_hello(conn, star)
        held.append(trickle(conn, deliver_frame(star), 0.3, 8))
    code, err = talk(roles, star, play, deadline_ms=1000)
    assert (code, err) == (REFUSALS["peer-lost"][0], "refused: peer-lost\n")
    assert held[0] < 3.5, f"the owner waited {held[0]:.1f} s for one frame with a 1 s deadline"


def coordinator(roles, deadline_ms=1000):
    port = free_port()
    exe = roles / "lsq_adam_star" / "coordinator"
    p = subprocess.Popen([str(exe), "--steps", "1", "--deadline-ms", str(deadline_ms),
                          "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5
    while True:
        try:
            return p, socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                p.kill()
                raise
            time.sleep(0.02)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["trickled-hello", "silent", "hello-too-long"])
def test_a_connecting_peer_holds_the_coordinator_no_longer_than_its_deadline(roles, star, case):
    import frames
    p, conn = coordinator(roles)
    try:
        hello = frames.hello(star["owner0"], star["id"], 1)
        t0 = time.monotonic()
        if case == "trickled-hello":
            trickle(conn, hello, 0.3, 8)
        elif case == "hello-too-long":
            conn.sendall(frames.encode(frames.KINDS["hello"], star["owner0"], b"", star["id"],
                                       length=2 ** 32 - 1))
        out, err = p.communicate(timeout=10)
        held = time.monotonic() - t0
    finally:
        conn.close()
        if p.poll() is None:
            p.kill()
    name = "frame-too-long" if case == "hello-too-long" else "peer-lost"
    assert (p.returncode, out, err) == (REFUSALS[name][0], "", f"refused: {name}\n")
    assert held < 3.5, f"the coordinator waited {held:.1f} s with a 1 s deadline"


# -- event streams authenticated by the role itself (issue 22) ---------------------------------
def events_twin(key: bytes, lines: list[str]) -> list[str]:
    """The lines a role writes under `key`: each ends with HMAC-SHA-256(key, previous | line)."""
    import hashlib
    import hmac
    mac = hmac.new(key, b"alphac-events-v2", hashlib.sha256).digest()
    out = []
    for line in lines:
        mac = hmac.new(key, mac + line.encode(), hashlib.sha256).digest()
        out.append(f"{line} {mac.hex()}")
    return out


@pytest.mark.parametrize("key", ["good", "short", "upper", "none"])
def test_a_role_authenticates_its_events_with_the_key_it_is_given(roles, key, tmp_path):
    k = bytes(range(32))
    env = {"good": k.hex(), "short": k.hex()[:-2], "upper": k.hex().upper()}.get(key)
    ev = tmp_path / "owner.events"
    r = subprocess.run([str(roles / "lsq_adam_star" / "owner.0"), "--deadline-ms", "100",
                        "--parent", "127.0.0.1:1", "--events", str(ev)], capture_output=True,
                       text=True, env={} if env is None else {"ALPHAC_EVENTS_KEY": env}, timeout=20)
    if key in ("short", "upper"):
        assert (r.returncode, r.stderr.splitlines()[-1]) == (
            64, "refused: usage (ALPHAC_EVENTS_KEY: not 64 lowercase hexadecimal digits)")
        return
    assert (r.returncode, r.stderr) == (71, "refused: connect-failed\n")
    from alphac.tools.record import split_event
    got = ev.read_text().splitlines()
    texts = [l.rpartition(" ")[0] if key == "good" else l for l in got]       # "TEXT @NS"
    assert [split_event(t)[0] for t in texts] == ["owner.0", "refused: connect-failed"]
    times = [split_event(t)[1] for t in texts]
    assert all(t is not None for t in times) and times == sorted(times)
    assert got == (events_twin(k, texts) if key == "good" else texts)


def test_roles_started_for_other_step_counts_refuse_by_name(roles, tmp_path):
    """issue 21: an owner started with --steps 3 under a coordinator started with --steps 5 was
    `frame-too-long` a few frames later; the coordinator now refuses `peer-steps` at its HELLO,
    and every other role refuses in turn."""
    rec = launch(roles, "lsq_adam_star", tmp_path, steps=5, extra={"owner.1": ["--steps", "3"]},
                 deadline_ms=3000)
    refused = {r["role"]: r["refused"] for r in rec["roles"]}
    assert refused["coordinator"] == "peer-steps" and all(refused.values()), refused
    assert not rec["passed"] and rec["published"] == ""
