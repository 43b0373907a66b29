"""Roles reach each other by host name and over IPv6 (issue 20): names from the test's own hosts
file, names only a DNS server started here knows (A, AAAA, a CNAME chain), and `[::1]`, each run
printing the interpreter's bits; a name nobody resolves is refused by name within the deadline;
malformed, truncated and foreign answers are survived; random addresses never crash the parser.
The runtime reads the hosts file and resolv.conf from ALPHAC_HOSTS and ALPHAC_RESOLV_CONF."""
import ipaddress
import os
import random
import re
import socket
import struct
import subprocess
import threading
import time

import pytest

import oracle
from backend import build_deployment
from conftest import EXAMPLES, require_tool

from alphac.refusals import REFUSALS

CODES = {code: name for name, (code, _) in REFUSALS.items()}
NS = "127.0.0.77"                # the test's nameserver: a loopback address nothing else uses
SPLIT, TREE = [(0, 5), (5, 8)], (0, 1)
STAR2 = ("\ndeployment star2 {\n  roles coordinator, owner[2]\n  topology star(coordinator)\n"
         "  samples owner[0] = 0..5, owner[1] = 5..8\n}\n")


def need_root():
    """Port 53 on 127.0.0.77 needs root: CI runs as root, so there a missing privilege fails."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("tests/test_names.py needs root in CI (a nameserver on port 53)")
        pytest.skip("needs root (a nameserver on 127.0.0.77:53)")


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    src = d / "star2.alpha"
    src.write_text((EXAMPLES / "lsq_adam.alpha").read_text() + STAR2)
    x86 = build_deployment(src, "star2", d / "x86")
    arm = build_deployment(src, "star2", d / "arm", target_of=lambda r, t: "aarch64")
    return {"x86_64": x86, "aarch64": arm, "dir": d}


# -- the test's nameserver -----------------------------------------------------------------------
def enc(name: str) -> bytes:
    return b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"


def rr(owner: bytes, rtype: int, rdata: bytes) -> bytes:
    return owner + struct.pack(">HHIH", rtype, 1, 60, len(rdata)) + rdata


def ptr(off: int) -> bytes:
    return struct.pack(">H", 0xC000 | off)


class Nameserver:
    """A UDP nameserver on NS:53. Each name's answers are a function of (id, question, qtype)
    returning the datagrams to send (possibly none)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((NS, 53))
        self.seen = []
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                data, peer = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                return
            qid, = struct.unpack(">H", data[:2])
            off, labels = 12, []
            while data[off]:
                labels.append(data[off + 1:off + 1 + data[off]].decode())
                off += 1 + data[off]
            qtype, = struct.unpack(">H", data[off + 1:off + 3])
            name, question = ".".join(labels).lower(), data[12:off + 5]
            self.seen.append((name, qtype))
            for d in self.answers(name, qid, question, qtype, self.seen.count((name, qtype))):
                self.sock.sendto(d, peer)

    @staticmethod
    def reply(qid, question, rrs, flags=0x8180, qd=1):
        return struct.pack(">HHHHHH", qid, flags, qd, len(rrs), 0, 0) + question + b"".join(rrs)

    def answers(self, name, qid, q, qtype, nth):
        A, AAAA, CNAME = 1, 28, 5
        good4 = [rr(ptr(12), A, socket.inet_aton("127.0.0.1"))] if qtype == A else []
        if name == "a.dns.test":
            return [self.reply(qid, q, good4)]
        if name == "six.dns.test":             # AAAA only: the A question has no records
            return [self.reply(qid, q, [rr(ptr(12), AAAA, socket.inet_pton(socket.AF_INET6, "::1"))]
                               if qtype == AAAA else [])]
        if name == "alias.dns.test":           # alias -> mid -> a, by pointers into the rdata
            first = 12 + len(q)
            one = rr(ptr(12), CNAME, enc("mid.dns.test"))
            two = rr(ptr(first + 12), CNAME, b"\1a" + ptr(first + 12 + 4))
            three = rr(ptr(first + len(one) + 12), A, socket.inet_aton("127.0.0.1"))
            return [self.reply(qid, q, [one, two, three] if qtype == A else [])]
        if name == "loop.dns.test":            # a CNAME to itself, and pointer loops
            return [self.reply(qid, q, [rr(ptr(12), CNAME, ptr(12))]),
                    self.reply(qid, q, [rr(ptr(12 + len(q)), A, bytes(4))])]
        if name == "bad.dns.test":             # every malformed answer first, then the good one
            good = self.reply(qid, q, good4)
            two = socket.inet_aton("127.0.0.2")                    # taken, the owner fails
            wrong = [rr(ptr(12), A, two)]
            bad = [self.reply(qid ^ 1, q, wrong),                  # another id
                   good[:len(good) - 3],                           # truncated
                   self.reply(qid, q, wrong, flags=0x8380),        # TC
                   self.reply(qid, q, wrong, flags=0x0180),        # not a response
                   self.reply(qid, q, wrong, qd=2),                # two questions
                   self.reply(qid, q[:-4] + b"\0\x05\0\1", wrong),   # another question
                   self.reply(qid, q, [rr(ptr(12 + len(q)), A, two)]),    # a pointer to itself
                   self.reply(qid, q, [rr(ptr(12), A, bytes(4))[:-4] + b"\xff\xff"]),  # rdlength
                   self.reply(qid, q, [rr(ptr(12), A, bytes(3))]),   # an A of 3 bytes
                   self.reply(qid, q, [rr(ptr(400), A, two)]),            # a pointer out of it
                   b"", struct.pack(">H", qid), bytes(511)]
            return (bad + [good]) if qtype == A else []
        if name.startswith("fuzz"):            # the good answer, mutated at random, many times
            good = self.reply(qid, q, good4)
            rng, out = random.Random(qid), []
            for _ in range(150):
                m = bytearray(good)
                for _ in range(rng.randint(1, 4)):
                    m[rng.randrange(len(m))] = rng.randrange(256)
                out.append(bytes(m[:rng.randint(0, len(m))] if rng.random() < 0.3 else m))
            return out
        if name.startswith("chain") and name.endswith(".dns.test"):   # chainN: N CNAME links
            links, first = int(name[5:-len(".dns.test")]), 12 + len(q)
            rrs, owner = [], ptr(12)
            for k in range(links):
                rrs.append(rr(owner, CNAME, enc(f"c{k}.dns.test")))
                owner = ptr(first + sum(map(len, rrs)) - len(enc(f"c{k}.dns.test")))
            rrs.append(rr(owner, A, socket.inet_aton("127.0.0.1")))
            return [self.reply(qid, q, rrs if qtype == A else [])]
        if name == "overcount.dns.test":       # announces 3 records, holds the A record only
            r = self.reply(qid, q, good4)
            return [r[:6] + struct.pack(">H", 3) + r[8:]] if qtype == A else []
        if name == "late.dns.test":            # the first try gets nothing
            return [self.reply(qid, q, good4)] if nth > 1 else []
        if name == "silent.dns.test":
            return []
        return [self.reply(qid, q, [], flags=0x8183)]              # NXDOMAIN

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def env(dep):
    need_root()
    d = dep["dir"]
    (d / "hosts").write_text("# the test's hosts\n127.0.0.1\tlocalhost\n::1  six.hosts.test  # v6\n"
                             "10.9.9.9 wrong.hosts.test\n127.0.0.1 Coord.Hosts.Test owner.hosts.test\n"
                             "127.0.0.1 wrong.hosts.test\nnot-an-address broken.hosts.test\n")
    (d / "resolv.conf").write_text(f"# the test's resolvers\nsearch example\noptions ndots:1\n"
                                   f"nameserver 127.0.0.78\nnameserver {NS}\n")
    ns = Nameserver()
    e = dict(os.environ, ALPHAC_HOSTS=str(d / "hosts"), ALPHAC_RESOLV_CONF=str(d / "resolv.conf"))
    yield e
    ns.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmd(dep, isa, role, *args):
    exe = [str(dep[isa] / role), *map(str, args)]
    return [require_tool("qemu-aarch64")] + exe if isa == "aarch64" else exe


def named(p):
    assert p.returncode >= 0, f"died of signal {-p.returncode}"
    return CODES.get(p.returncode, "?") if p.returncode else None


def star(dep, env, listen, parents, isas=("x86_64", "x86_64"), steps=3, deadline=4000):
    """The coordinator listening on `listen`, owner k connecting to parents[k] ({port} filled in)."""
    port = free_port()
    procs = [subprocess.Popen(cmd(dep, "x86_64", "coordinator", "--steps", steps, "--deadline-ms",
                                  deadline, "--listen", listen.format(port=port)), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    for k, parent in enumerate(parents):
        procs.append(subprocess.Popen(cmd(dep, isas[k], f"owner.{k}", "--steps", steps, "--deadline-ms",
                                          deadline, "--parent", parent.format(port=port)), env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=deadline / 1000 * 3 + 20) for p in procs]
    return [named(p) for p in procs], outs[0][0], [o[1] for o in outs]


@pytest.fixture(scope="module")
def bits():
    return oracle.run("lsq_adam", [(3, SPLIT, TREE)])


CASES = {
    "hosts": ("coord.hosts.test:{port}", ["owner.hosts.test:{port}", "COORD.hosts.test:{port}"]),
    "ipv6": ("[::1]:{port}", ["[0:0:0:0:0:0:0:1]:{port}", "[::1]:{port}"]),
    "ipv6-any-and-hosts": ("[::]:{port}", ["six.hosts.test:{port}", "[::ffff:127.0.0.1]:{port}"]),
    "dns": ("a.dns.test:{port}", ["alias.dns.test:{port}", "A.dns.test:{port}"]),
    "dns-v6": ("[::]:{port}", ["six.dns.test:{port}", "a.dns.test:{port}"]),
    "dns-survives": ("127.0.0.1:{port}", ["bad.dns.test:{port}", "late.dns.test:{port}"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_roles_by_name_and_ipv6_print_the_interpreters_bits(dep, env, bits, case):
    listen, parents = CASES[case]
    codes, out, errs = star(dep, env, listen, parents, deadline=2000)
    assert codes == [None, None, None] and out == bits, (codes, errs)


def test_random_answers_are_survived(dep, env):
    """150 mutations of a good answer (ours or another id, cut anywhere) before any other: the
    owner resolves (then finds no coordinator) or does not, by name, never by a signal."""
    procs = [subprocess.Popen(cmd(dep, "x86_64", "owner.0", "--steps", 1, "--deadline-ms", 500,
                                  "--parent", f"fuzz{k}.dns.test:{free_port()}"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in range(4)]
    for p in procs:
        p.communicate(timeout=20)
        assert named(p) in {"name-unresolved", "connect-failed"}, p.returncode


def test_aarch64_role_resolves_by_dns_and_v6(dep, env, bits):
    codes, out, errs = star(dep, env, "[::]:{port}", ["a.dns.test:{port}", "six.dns.test:{port}"],
                            isas=("x86_64", "aarch64"))
    assert codes == [None, None, None] and out == bits, (codes, errs)


@pytest.mark.parametrize("links", [1, 8])
def test_a_cname_chain_of_up_to_8_links_is_followed(dep, env, links):
    """docs/runtime.md: CNAMEs are followed within the answer, 8 links at most (9 are refused
    below)."""
    port = free_port()
    p = subprocess.run(cmd(dep, "x86_64", "owner.0", "--steps", 1, "--deadline-ms", 600, "--parent",
                           f"chain{links}.dns.test:{port}"), env=env, capture_output=True, text=True,
                       timeout=20)
    assert named(p) == "connect-failed", p.stderr         # resolved: then nobody listens there


LONG = ".".join(["a" * 63] * 3) + "." + "b" * 61              # 253 characters, the most DNS allows


@pytest.mark.parametrize("n", [250, 251, 252, 253])
def test_names_of_250_to_253_characters_are_names(dep, env, n, tmp_path):
    """A name of up to 253 characters (RFC 1035) with its port: resolved from the hosts file, not
    refused as `usage`; 254 is."""
    name = LONG[253 - n:]
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 {name}\n")
    e = dict(env, ALPHAC_HOSTS=str(hosts))
    for parent, want in ((f"{name}:{free_port()}", "connect-failed"),
                         (f"{name}:7000+{{}}", "connect-failed"),
                         (f"x{LONG}:4000", "usage")):
        p = subprocess.run(cmd(dep, "x86_64", "owner.0", "--steps", 1, "--deadline-ms", 300,
                               "--parent", parent), env=e, capture_output=True, text=True, timeout=20)
        assert named(p) == want, (parent, p.stderr)


@pytest.mark.parametrize("name", ["nobody.test", "silent.dns.test", "loop.dns.test",
                                  "broken.hosts.test", "chain9.dns.test", "overcount.dns.test"])
def test_a_name_nobody_resolves_is_refused_by_name_within_the_deadline(dep, env, name):
    t0 = time.monotonic()
    p = subprocess.run(cmd(dep, "x86_64", "owner.0", "--steps", 1, "--deadline-ms", 600, "--parent",
                           f"{name}:4000"), env=env, capture_output=True, text=True, timeout=20)
    assert (named(p), p.stderr) == ("name-unresolved", "refused: name-unresolved\n")
    assert time.monotonic() - t0 < 0.6 + 0.5


# -- the address parser, fuzzed ------------------------------------------------------------------
def dec_octet(p):
    return p.isascii() and p.isdigit() and len(p) <= 3 and int(p) <= 255


def v4_ok(h):
    return len(h.split(".")) == 4 and all(dec_octet(p) for p in h.split("."))


def v6_ok(h):
    def groups(part, tail):                # the groups a part stands for, or None
        if part == "":
            return 0
        gs, n = part.split(":"), 0
        for k, g in enumerate(gs):
            if tail and k == len(gs) - 1 and v4_ok(g):
                n += 2
            elif re.fullmatch(r"[0-9A-Fa-f]{1,4}", g):
                n += 1
            else:
                return None
        return n
    if "::" in h:
        a, b = h.split("::", 1)
        ga, gb = groups(a, False), groups(b, True)
        return ga is not None and gb is not None and ga + gb <= 7
    return groups(h, True) == 8


def accepted(s):
    """The model of net_parse_addr: True when the address is well formed."""
    m = re.fullmatch(r"\[([^\]]*)\]:(.*)", s, re.S)
    if m:                                      # `[V6]:P`, or `[A.B.C.D]:P` (alphac k8s's `[$(POD_IP)]`)
        host, port, ok = m[1], m[2], v6_ok(m[1]) or v4_ok(m[1])
    else:
        host, _, port = s.partition(":")
        name = (re.fullmatch(r"[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63})*", host) is not None
                and len(host) <= 253 and re.search("[A-Za-z-]", host) is not None)
        ok = v4_ok(host) or name
        if not _:
            return False
    return ok and port.isascii() and port.isdigit() and len(port) <= 15 and 0 < int(port) < 65536


def addresses(rng, n):
    alphabet = "0123456789abcdefABCDEF:.[]-xyz%/ \t\x01\xff"
    for _ in range(n):
        kind = rng.random()
        if kind < 0.4:
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        else:
            a = ipaddress.IPv6Address(rng.getrandbits(128) >> rng.choice([0, 64, 112, 127]))
            forms = [a.compressed, a.exploded, f"::ffff:{rng.randint(0, 255)}.1.2.3",
                     f"{rng.randint(0, 300)}.{rng.randint(0, 9)}.0.{rng.randint(0, 255)}",
                     "host-" + str(rng.randint(0, 9)) + ".example"]
            s = rng.choice(forms)
            if kind < 0.7:
                i = rng.randint(0, len(s))
                s = s[:i] + rng.choice(alphabet) + s[i + rng.randint(0, 2):]
            s = f"[{s}]" if (":" in s and rng.random() < 0.8) or rng.random() < 0.2 else s
            s += ":" + str(rng.choice([rng.randint(1, 65535), 0, 65536, rng.randint(0, 10**16)]))
        yield s


ADDR_WHY = b"not A.B.C.D:PORT, [IPv6]:PORT, [A.B.C.D]:PORT or NAME:PORT; {} is the rank"


def test_random_addresses_are_refused_usage_or_accepted(dep, tmp_path):
    """The coordinator listens on whatever it is given: a malformed address is `usage` (exactly
    when the Python model says so); a well-formed one binds or cannot (`listen-failed`), a name
    is unresolved (no nameserver here), and nothing dies of a signal."""
    env = dict(os.environ, ALPHAC_HOSTS=str(tmp_path / "none"), ALPHAC_RESOLV_CONF=str(tmp_path / "none"))
    rng = random.Random(20)
    for s in addresses(rng, 400):
        arg = s.encode("latin-1")
        p = subprocess.run([str(dep["x86_64"] / "coordinator"), "--steps", "1", "--deadline-ms", "20",
                            "--listen", arg], env=env, capture_output=True, timeout=10)
        got = named(p)
        line = p.stderr.split(b"\n")[-2]                # usage: after the usage line, with a detail
        assert line == (b"refused: usage (--listen: " + ADDR_WHY + b")" if got == "usage" else
                        f"refused: {got}".encode()), (s, p.stderr)
        want = {"listen-failed", "peer-lost", "name-unresolved"} if accepted(s) else {"usage"}
        assert got in want, (s, got)
