"""`alphac k8s` (issue 20): Kubernetes manifests for a built deployment, checked three ways, as no
cluster is reachable here:
(a) against the Kubernetes API's own schemas: kubernetes-validate (PyPI, pinned in the `test`
    extra) bundles the OpenAPI-derived JSON schemas per Kubernetes version; strict mode rejects
    unknown fields. Those schemas carry no enums (the OpenAPI v2 document they come from lists
    allowed values only in descriptions), so each enum-valued field is checked against its own
    description in the same schemas: `completionMode: Indexd` passes the schema and fails that.
(b) what no schema says: completions = ranks, the Service selects the Job's pods, the subdomain
    is the Service, every pod's parent address names the pod that runs its parent's rank, ports.
(c) a local cluster: the image root built from the Containerfile (FROM scratch, COPY), one
    chroot per pod with the files a kubelet writes (/etc/hosts with the pod's own name,
    /etc/resolv.conf naming the cluster DNS), a DNS server for the headless Service on a
    loopback address, each pod's command and args expanded from its env as Kubernetes expands
    `$(VAR)`, its own 127.0.x.y address, run as the pods' user, and the Job's podFailurePolicy
    applied to a pod that exits; the root prints the oracle's bits (a star, a hierarchy, a
    learner whose data goes into the image).
(d) inputs that are not a built deployment, or whose executables changed, refused by name, and
    nothing written.
Kubernetes versions checked: 1.28 and 1.37 (the oldest and newest that the manifests claim and
the package bundles)."""
import copy
import hashlib
import json
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

import oracle
from backend import build_deployment
from conftest import EXAMPLES, alphac

from alphac.refusals import REFUSALS

VERSIONS = ("1.28.0", "1.37.0")
STEPS = 3
BITS = oracle.run("lsq_adam", [(STEPS, oracle.REF_SPLIT, oracle.REF_TREE)])


def need(module):
    """kubernetes-validate comes with the `test` extra: in CI its absence fails."""
    try:
        return __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is required in CI (pip install -e '.[test]')")
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("k8s")
    for dep in ("lsq_adam_star", "lsq_adam_tree", "lsq_adam_mesh"):
        build_deployment(EXAMPLES / "lsq_adam.alpha", dep, d / "roles")
    return d / "roles"


def generate(dep_dir, out, *args):
    code, _, err = alphac("k8s", dep_dir, "-o", out, "--steps", STEPS, *args)
    assert code == 0, err
    docs = need("yaml").safe_load_all((Path(out) / "k8s.yaml").read_text())
    return {d["kind"]: d for d in docs}


def table_of(dep_dir):
    return json.loads((Path(dep_dir) / "roles.json").read_text())


# -- Kubernetes' rules, written here from its documentation ---------------------------------------
def expand(text: str, env: dict) -> str:
    """`$(VAR)` in a container's command and args as Kubernetes expands it: replaced by VAR's
    value when the container's env defines VAR, else left as it is; `$$` is one `$`; any other
    `$` (and an unclosed `$(`) is kept."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            close = text.find(")", i + 2) if nxt == "(" else -1
            if nxt == "$":
                out.append("$")
            elif close >= 0:
                name = text[i + 2:close]
                out.append(env.get(name, text[i:close + 1]))
                i = close + 1
                continue
            else:
                out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def test_the_expansion_rule():
    env = {"A": "1", "POD_IP": "10.0.0.7"}
    assert expand("$(A)-$$(A)-$(B)-$(A", env) == "1-$(A)-$(B)-$(A"
    assert expand("a$b$", env) == "a$b$" and expand("$$$(A)", env) == "$1"
    assert expand("$(POD_IP):7000", env) == "10.0.0.7:7000" and expand("$()", env) == "$()"


def field_env(container: dict, fields: dict) -> dict:
    """The container's env: each variable from the downward API field it names."""
    env = {}
    for e in container["env"]:
        ref = e.get("valueFrom", {})
        env[e["name"]] = e["value"] if "value" in e else fields[ref["fieldRef"]["fieldPath"]] \
            if "fieldRef" in ref else fields[("secret", ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"])]
    return env


INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def pod_fields(i, ip, ns, secrets=None):
    """The downward API's fields of pod i, and the Secrets' keys ({(\"secret\", NAME, KEY): value})."""
    return {INDEX: str(i), "status.podIP": ip, "metadata.namespace": ns, **(secrets or {})}


def secret_of(job, key: bytes) -> dict:
    """The run key's Secret as `alphac k8s` says to make it: NAME-run-key, 64 hex digits."""
    return {("secret", f"{job['metadata']['name']}-run-key", "run-key"): key.hex()}


def fqdn(job, i, ns, domain="cluster.local"):
    """The DNS name of an Indexed Job's pod i: hostname JOB-i, subdomain the Service."""
    return f"{job['metadata']['name']}-{i}.{job['spec']['template']['spec']['subdomain']}.{ns}.svc.{domain}"


# -- (a) the schema oracle -------------------------------------------------------------------------
def validate(doc, version):
    return need("kubernetes_validate").validate(doc, version, strict=True)


def field_description(doc, path, version="1.37.0") -> str:
    """The description of the field at `path` (keys and list indices) of `doc`, from the strict
    schema kubernetes-validate holds for its kind."""
    import importlib.resources
    kv = need("kubernetes_validate")
    base = importlib.resources.files(kv).joinpath(f"kubernetes-json-schema/v{version}-local-strict")
    defs = json.loads(base.joinpath("_definitions.json").read_text())["$defs"]
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    node = json.loads(base.joinpath(f"{doc['kind'].lower()}-{api}.json").read_text())
    text = ""
    for key in path:
        node = node["items"] if isinstance(key, int) else node["properties"][key]
        text = node.get("description", text)
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[1]]
    return node.get("description", text)


ENUMS = {  # every enum-valued field the manifests set, and its value
    ("Job", ("spec", "completionMode")): "Indexed",
    ("Job", ("spec", "template", "spec", "restartPolicy")): "Never",
    ("Job", ("spec", "podFailurePolicy", "rules", 0, "action")): "Ignore",
    ("Job", ("spec", "podFailurePolicy", "rules", 0, "onExitCodes", "operator")): "In",
    ("Job", ("spec", "template", "spec", "containers", 0, "imagePullPolicy")): "IfNotPresent",
    ("Job", ("spec", "template", "spec", "containers", 0, "terminationMessagePolicy")):
        "FallbackToLogsOnError",
    ("Job", ("spec", "template", "spec", "containers", 0, "ports", 0, "protocol")): "TCP",
    ("Job", ("spec", "template", "spec", "securityContext", "seccompProfile", "type")): "RuntimeDefault",
    ("Service", ("spec", "clusterIP")): "None",
    ("Service", ("spec", "ports", 0, "protocol")): "TCP",
}


def at(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def enum_problems(docs) -> list[str]:
    """Each enum-valued field whose value is not one of the words its description allows."""
    out = []
    for kind, path in ENUMS:
        value, text = at(docs[kind], path), field_description(docs[kind], path)
        if not re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text):
            out.append(f"{kind} {'.'.join(map(str, path))}: {value!r}")
    return out


def schema_problems(docs) -> list[str]:
    kv = need("kubernetes_validate")
    out = []
    for doc in docs.values():
        for v in VERSIONS:
            try:
                validate(doc, v)
            except kv.ValidationError as e:
                out.append(f"{doc['kind']} {v} {'.'.join(map(str, e.path))}: {e.message}")
    return out


@pytest.mark.parametrize("dep", ["lsq_adam_star", "lsq_adam_tree", "lsq_adam_mesh"])
def test_the_manifests_are_what_the_api_takes(built, tmp_path, dep):
    docs = generate(built / dep, tmp_path / "k8s", "--namespace", "ml")
    assert sorted(docs) == ["Job", "Service"]
    assert schema_problems(docs) == [] and enum_problems(docs) == []
    for kind, path in ENUMS:
        assert at(docs[kind], path) == ENUMS[kind, path]


def test_each_pod_asks_for_the_memory_its_executable_needs_and_the_job_is_bounded(built, tmp_path):
    """Requests and limits: the largest executable's loaded segments (which hold the plan's
    demand), a stack and the kernel's share, above what a launch measures (peak RSS); the Job
    ends after --active-deadline (default a day, 0: none) and goes ttlSecondsAfterFinished later."""
    from alphac.tools.k8s import KERNEL, STACK
    from alphac.tools.launch import launch
    from elftools.elf.elffile import ELFFile
    dep = built / "lsq_adam_tree"
    segments = 0
    for f in sorted(dep.iterdir()):
        if f.name not in ("roles.json", "MANIFEST.json"):
            with open(f, "rb") as fh:
                segments = max(segments, sum(s["p_memsz"] for s in ELFFile(fh).iter_segments()
                                             if s["p_type"] == "PT_LOAD"))
    mem = f"{-(-(segments + STACK + KERNEL) // (1 << 20))}Mi"
    job = generate(dep, tmp_path / "k8s")["Job"]
    spec = job["spec"]
    resources = spec["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"memory": mem}, "limits": {"memory": mem}}
    rec = launch(dep, steps=STEPS, records=tmp_path / "runs", key=tmp_path / "key")
    assert rec["passed"] and max(r["peak_rss_kib"] for r in rec["roles"]) * 1024 < int(mem[:-2]) << 20
    assert (spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (86400, 86400)
    spec = generate(dep, tmp_path / "k8s", "--active-deadline", 0, "--ttl-after-finished", 60)["Job"]["spec"]
    assert "activeDeadlineSeconds" not in spec and spec["ttlSecondsAfterFinished"] == 60


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_roles_take_the_bracketed_listen_address_the_pods_get(built, tmp_path, host):
    """k8s.yaml gives `--listen [$(POD_IP)]:P`, an IPv6 pod's address in brackets (unbracketed,
    `fd00::5:7000` is no address); the executables take `[IPv6]:P` and `[A.B.C.D]:P`: a star
    started by hand so publishes the interpreter's bits."""
    args = generate(built / "lsq_adam_star", tmp_path / "k8s")["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--listen") + 1] == "[$(POD_IP)]:7000"
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip(f"no {host} here")
    dep, addr = built / "lsq_adam_star", f"[{host}]:{port}"
    common = ["--steps", str(STEPS), "--deadline-ms", "10000"]
    root = subprocess.Popen([dep / "coordinator", *common, "--listen", addr], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    owners = [subprocess.Popen([dep / f"owner.{k}", *common, "--parent", addr], stderr=subprocess.PIPE)
              for k in range(4)]
    out, err = root.communicate(timeout=60)
    assert [o.wait(timeout=60) for o in owners] == [0] * 4 and (root.returncode, err) == (0, ""), err
    assert out == alphac("run", EXAMPLES / "lsq_adam.alpha", "--deployment", "lsq_adam_star",
                         "--steps", STEPS)[1]


def test_the_oracle_refuses_what_the_api_refuses(built, tmp_path):
    """A field the API does not have, a wrong type, a missing name: the schema; a misspelt
    enum value: its description (the schema alone takes `Indexd`)."""
    docs = generate(built / "lsq_adam_star", tmp_path / "k8s")
    def mutant(kind, path, value, delete=False):
        m = copy.deepcopy(docs)
        parent = at(m[kind], path[:-1])
        if delete:
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
        return m
    container = ("spec", "template", "spec", "containers", 0)
    for m in [mutant("Job", ("spec", "completionsMode"), "Indexed"),
              mutant("Job", container + ("env", 0, "valueFrom", "fieldRef", "fieldPth"), "status.podIP"),
              mutant("Service", ("spec", "headless"), True),
              mutant("Job", ("spec", "completions"), "5"),
              mutant("Job", container + ("name",), None, delete=True)]:
        assert schema_problems(m) != [], m
    m = mutant("Job", ("spec", "completionMode"), "Indexd")
    assert schema_problems(m) == [] and enum_problems(m) == ["Job spec.completionMode: 'Indexd'"]
    m = mutant("Job", ("spec", "template", "spec", "restartPolicy"), "Nevr")
    assert enum_problems(m) == ["Job spec.template.spec.restartPolicy: 'Nevr'"]


def test_the_yaml_reads_back_as_the_objects(built, tmp_path):
    """The module's own emitter against PyYAML: the same objects, and strings that look like
    numbers, booleans or nulls stay strings."""
    from alphac.tools.k8s import to_yaml
    yaml = need("yaml")
    odd = {"a": ["5", "0x1F", "yes", "No", "null", "~", "-", "--rank", "a: b", "#c", "", "1e3",
                 ".inf", "x y", "é", "$(A):7000", "{}", "[x]", "'q'", '"d"', "  s", "t\n"],
           "b": {"c": None, "d": True, "e": 0, "f": {}, "g": []}, "h": [[1, [2]], {"i": [3]}]}
    assert list(yaml.safe_load_all(to_yaml([odd, {"k": 1}], "a\n\ncomment"))) == [odd, {"k": 1}]


# -- (b) what the schema does not say --------------------------------------------------------------
@pytest.mark.parametrize("dep", ["lsq_adam_star", "lsq_adam_tree", "lsq_adam_mesh"])
def test_every_pod_names_its_parents_pod(built, tmp_path, dep):
    out = tmp_path / "k8s"
    docs = generate(built / dep, out, "--port", "7100", "--name", "fit")
    svc, job = docs["Service"], docs["Job"]
    table = table_of(built / dep)
    n, ranks = len(table["roles"]), {r["role"]: r["rank"] for r in table["roles"]}
    spec, tmpl = job["spec"], job["spec"]["template"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == n
    assert spec["backoffLimit"] == 0 and tmpl["spec"]["restartPolicy"] == "Never"
    assert svc["spec"]["clusterIP"] == "None" and tmpl["spec"]["subdomain"] == svc["metadata"]["name"]
    assert svc["spec"]["selector"].items() <= tmpl["metadata"]["labels"].items()
    assert svc["metadata"].get("namespace") == job["metadata"].get("namespace")
    rule, = spec["podFailurePolicy"]["rules"]
    assert rule["onExitCodes"]["values"] == [REFUSALS["name-unresolved"][0]]
    (c,) = tmpl["spec"]["containers"]
    assert rule["onExitCodes"]["containerName"] == c["name"]
    refs = {m for a in c["command"] + c["args"] for m in re.findall(r"\$\((\w+)\)", a)}
    assert refs <= {e["name"] for e in c["env"]}
    assert c["ports"][0]["containerPort"] == svc["spec"]["ports"][0]["port"] == \
        svc["spec"]["ports"][0]["targetPort"] == 7100
    assert tmpl["spec"]["nodeSelector"]["kubernetes.io/arch"] == "amd64"
    for r in table["roles"]:
        i = r["rank"]
        env = field_env(c, pod_fields(i, "10.1.2.3", "ml", secret_of(job, bytes(32))))
        argv = [expand(a, env) for a in c["command"] + c["args"]]
        opt = dict(zip(argv[1::2], argv[2::2]))
        assert argv[0] == f"/alphac/rank/{i}" and opt["--rank"] == str(i)
        assert opt["--listen"] == "[10.1.2.3]:7100" and opt["--steps"] == str(STEPS)
        parent = ranks[r["parent"]] if r["parent"] else i        # `{}`: its parent's rank
        assert opt["--parent"].replace("{}", str(parent)) == fqdn(job, parent, "ml") + ":7100"
        if r.get("mesh"):                                         # `{}`: each owner's rank
            assert opt["--mesh"].replace("{}", str(i)) == fqdn(job, i, "ml") + ":7100"
        assert ("--mesh" in opt) == any(x.get("mesh") for x in table["roles"])
        link = out / "rank" / str(i)
        assert link.is_symlink() and os.readlink(link) == f"../roles/{r['file']}"
        assert link.read_bytes() == (built / dep / r["file"]).read_bytes()
    assert table["roles"][0]["role"] == table["root"]             # index 0's log is the state
    sums = dict(l.split("  ")[::-1] for l in (out / "SHA256SUMS").read_text().splitlines())
    assert sums == {f"roles/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in (out / "roles").iterdir()}


def tree(d: Path) -> dict:
    """Every path under d: a link's target, or a mode and the bytes (None for a directory)."""
    def what(p):
        if p.is_symlink():
            return os.readlink(p)
        return p.stat().st_mode & 0o777, p.read_bytes() if p.is_file() else None
    return {p.relative_to(d).as_posix(): what(p) for p in sorted(d.rglob("*"))}


def test_the_output_is_the_same_every_time_and_names_no_path(built, tmp_path):
    shutil.copytree(built, tmp_path / "b", symlinks=True)
    generate(built / "lsq_adam_tree", tmp_path / "one")
    generate(tmp_path / "b" / "lsq_adam_tree", tmp_path / "two")
    first = tree(tmp_path / "one")
    assert first == tree(tmp_path / "two")
    text = b"".join(v[1] for k, v in first.items()
                    if not k.startswith("roles/") and isinstance(v, tuple) and v[1])
    assert str(tmp_path).encode() not in text and str(built).encode() not in text
    assert not re.search(rb"20\d\d-\d\d-\d\d|\d\d:\d\d:\d\d", text)
    generate(built / "lsq_adam_tree", tmp_path / "one")           # its own earlier output: replaced
    assert tree(tmp_path / "one") == first


# -- (c) the pods, run as Kubernetes would run them ------------------------------------------------
def need_root():
    """chroot, a pod's user and port 53 need root: CI runs as root, so there its absence fails."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("tests/test_k8s.py needs root in CI (a chroot per pod, the cluster DNS)")
        pytest.skip("needs root (a chroot per pod, a DNS server on port 53)")


def image_root(context: Path, dest: Path) -> Path:
    """The image the Containerfile describes, as a directory: FROM scratch, then each COPY (a
    directory's contents, symbolic links kept as links, as docker and buildah copy them)."""
    dest.mkdir()
    for line in (context / "Containerfile").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        op, *rest = line.split()
        if op == "FROM":
            assert rest == ["scratch"]
        elif op == "COPY":
            src, dst = rest
            assert not src.startswith("/") and ".." not in src.split("/") and dst.startswith("/")
            target = dest / dst.lstrip("/")
            if (context / src).is_dir():
                shutil.copytree(context / src, target, symlinks=True, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(context / src, target)
        else:
            assert op == "USER" and rest == ["65532:65532"], line
    return dest


class ClusterDNS:
    """The headless Service's records, served as the cluster DNS serves them: an A record per
    pod of the Service (publishNotReadyAddresses: from the time the pod has its address),
    NXDOMAIN for any other name. Every question is kept."""

    def __init__(self, addr):
        self.records, self.asked, self.stop = {}, [], False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((addr, 53))
        self.sock.settimeout(0.05)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                data, peer = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                return
            off, labels = 12, []
            while data[off]:
                labels.append(data[off + 1:off + 1 + data[off]].decode().lower())
                off += 1 + data[off]
            qtype, = struct.unpack(">H", data[off + 1:off + 3])
            name, question = ".".join(labels), data[12:off + 5]
            self.asked.append(name)
            ip = self.records.get(name)
            answers = [b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(ip)] \
                if ip and qtype == 1 else []
            flags = 0x8180 if ip else 0x8183
            self.sock.sendto(struct.pack(">HHHHHH", struct.unpack(">H", data[:2])[0], flags, 1,
                                         len(answers), 0, 0) + question + b"".join(answers), peer)

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def listening(serial, net, port) -> bool:
    """Whether a socket listens on 127.0.net.serial:port (/proc/net/tcp, state 0A)."""
    want = socket.inet_aton(f"127.0.{net}.{serial}")[::-1].hex().upper() + f":{port:04X}"
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return any(r[1] == want and r[3] == "0A" for r in rows)


class Cluster:
    """k8s.yaml applied on this machine: the Service's DNS, and the Job's pods, each a chroot of
    the image with the kubelet's /etc/hosts and /etc/resolv.conf, its own loopback address,
    the container's command and args expanded from its env, run as the pod's user, the Job's
    claim (one directory, the pods' group's) bound at its mountPath in each. A pod that fails is
    replaced at once when the Job's podFailurePolicy ignores its exit code; else, as the Job
    controller does under backoffLimitPerIndex (maxFailedIndexes 0), its index is retried with a
    new pod (a new address, its name resolving to it once it starts) after the index's back-off
    (Kubernetes' 10 s, 20 s, ... scaled to BACKOFF s, 2 s, ...), each index in the order it
    failed, until an index fails more than its limit; without one (backoffLimit 0) the first
    failure fails the Job, and every other pod is ended."""
    BACKOFF = 1.0

    def __init__(self, context: Path, docs: dict, work: Path, ns="default"):
        self.svc, self.job, self.ns, self.work = docs["Service"], docs["Job"], ns, work
        self.key = os.urandom(32)                   # the run key's Secret, made for this run
        self.keys = {}                              # a pod given another Secret's (a stranger)
        self.image = image_root(context, work / "image")
        for _ in range(5):                          # 127.0.NET.0/24: this cluster's addresses
            self.net = random.randrange(100, 250)
            try:
                self.dns = ClusterDNS(f"127.0.{self.net}.254")
                break
            except OSError:
                continue
        self.serial, self.pods, self.exits, self.replaced = 0, {}, {}, []
        self.failed, self.due, self.mounts = {}, {}, []
        self.claim = work / "claim"                 # the PersistentVolumeClaim, if the pods mount one
        self.claim.mkdir()
        os.chown(self.claim, 0, self.job["spec"]["template"]["spec"]["securityContext"].get("fsGroup", 0))
        os.chmod(self.claim, 0o2775)                # fsGroup: the pods' group owns and may write it

    def start(self, i):
        self.serial += 1
        ip = f"127.0.{self.net}.{self.serial}"
        spec = self.job["spec"]["template"]["spec"]
        root = self.work / f"pod-{i}-{self.serial}"
        shutil.copytree(self.image, root, symlinks=True, copy_function=os.link)
        name = fqdn(self.job, i, self.ns)
        host = f"{self.job['metadata']['name']}-{i}"
        (root / "etc").mkdir()
        (root / "etc/hosts").write_text(            # the kubelet's, for a pod with a subdomain
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost "
            "ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\n"
            f"fe00::2\tip6-allrouters\n{ip}\t{name}\t{host}\n")
        (root / "etc/resolv.conf").write_text(f"search {self.ns}.svc.cluster.local svc.cluster.local "
                                              f"cluster.local\nnameserver 127.0.{self.net}.254\noptions ndots:5\n")
        c, = spec["containers"]
        for m in c.get("volumeMounts", []):
            (root / m["mountPath"].lstrip("/")).mkdir()
            subprocess.run(["mount", "--bind", self.claim, root / m["mountPath"].lstrip("/")], check=True)
            self.mounts.append(root / m["mountPath"].lstrip("/"))
        env = field_env(c, pod_fields(i, ip, self.ns, secret_of(self.job, self.keys.get(i, self.key))))
        argv = [expand(a, env) for a in c["command"] + c["args"]]
        user = spec["securityContext"]

        def enter():
            os.chroot(root)
            os.chdir("/")
            os.setgroups([])
            os.setgid(user["runAsGroup"])
            os.setuid(user["runAsUser"])
        labels = self.job["spec"]["template"]["metadata"]["labels"]
        if self.svc["spec"]["selector"].items() <= labels.items() and self.svc["spec"]["publishNotReadyAddresses"]:
            self.dns.records[name] = ip
        self.pods[i] = subprocess.Popen(argv, env={**env, "HOSTNAME": host}, preexec_fn=enter,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return self.pods[i]

    def action(self, code: int) -> str:
        for rule in self.job["spec"].get("podFailurePolicy", {}).get("rules", []):
            req = rule["onExitCodes"]
            if req["operator"] == "In" and code in req["values"]:
                return rule["action"]
        return "Count"

    def finish(self, i, p):
        out, err = p.communicate()
        self.dns.records.pop(fqdn(self.job, i, self.ns), None)
        self.exits.setdefault(i, []).append((p.returncode, err.strip()))
        return out

    def retry(self, i, code) -> None:
        """Pod i failed with `code`, counted against its index: its retry due after the index's
        back-off, or AssertionError: the Job failed."""
        spec = self.job["spec"]
        self.failed[i] = self.failed.get(i, 0) + 1
        limit = spec.get("backoffLimitPerIndex")
        if limit is None or self.failed[i] > limit:
            raise AssertionError(f"pod {i} failed the Job: {self.exits}")
        assert spec["maxFailedIndexes"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
        self.due[i] = time.monotonic() + self.BACKOFF * 2 ** (self.failed[i] - 1)

    def run(self, order, first_fail=(), root_alone=None, kill=None):
        """Start the pods in `order` (those in `first_fail` each waited for and expected to be
        replaced; with `root_alone`, a port, the first waited for until it listens there), then
        run the Job to its end; the output of each pod that completed. `kill` (an index, a path):
        that index's pod killed (SIGKILL) once the path exists."""
        order = list(order)
        outputs = {}
        for i in order:
            p = self.start(i)
            if root_alone and i == order[0]:        # it has resolved its names when it listens
                while not listening(self.serial, self.net, root_alone) and p.poll() is None:
                    time.sleep(0.01)
                self.asked_before_root_listened = list(self.dns.asked)
            if i in first_fail:
                p.wait(timeout=20)
                self.finish(i, p)
        for i in sorted(first_fail):
            assert self.action(self.exits[i][-1][0]) == "Ignore", self.exits
            self.replaced.append(i)
            self.start(i)
        end = time.monotonic() + 60
        try:
            while len(outputs) < self.job["spec"]["completions"]:
                assert time.monotonic() < end, "the Job did not finish"
                if kill and kill[1].exists():
                    self.pods[kill[0]].kill()
                    kill = None
                for i, due in sorted(self.due.items(), key=lambda x: x[1]):
                    if due <= time.monotonic():
                        del self.due[i]
                        self.replaced.append(i)
                        self.start(i)
                for i, p in list(self.pods.items()):
                    if i in outputs or i in self.due or p.poll() is None:
                        continue
                    out = self.finish(i, p)
                    if p.returncode == 0:
                        outputs[i] = out
                    elif self.action(p.returncode) == "Ignore":
                        self.replaced.append(i)
                        self.start(i)
                    else:
                        self.retry(i, p.returncode)
                time.sleep(0.001 if kill else 0.01)
        finally:
            for p in self.pods.values():
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            for m in self.mounts:
                subprocess.run(["umount", m], check=True)
            self.dns.close()
        return outputs


@pytest.mark.parametrize("dep", ["lsq_adam_star", "lsq_adam_tree", "lsq_adam_mesh"])
def test_the_pods_publish_the_interpreters_bits(built, tmp_path, dep):
    """Parents first, as a Job's pods often start: no pod waits for a name; the root never asks
    the DNS for its own name (the kubelet's /etc/hosts has it)."""
    need_root()
    docs = generate(built / dep, tmp_path / "k8s", "--deadline-ms", "20000")
    cluster = Cluster(tmp_path / "k8s", docs, tmp_path)
    n, port = docs["Job"]["spec"]["completions"], docs["Service"]["spec"]["ports"][0]["port"]
    outputs = cluster.run(range(n), root_alone=port)
    assert outputs[0] == BITS and all(outputs[i] == "" for i in range(1, n))   # the key: the Secret's
    from test_membership import forms
    written = b"".join(p.read_bytes() for p in (tmp_path / "k8s").rglob("*") if p.is_file())
    assert not any(f in written for f in forms(cluster.key))
    assert cluster.replaced == [] and cluster.asked_before_root_listened == []
    table = table_of(built / dep)
    parents = {fqdn(docs["Job"], r["rank"], "default") for r in table["roles"] if r["listens"]
               and any(c["parent"] == r["role"] for c in table["roles"])}
    mesh = sorted(r["rank"] for r in table["roles"] if r.get("mesh"))
    lower = {fqdn(docs["Job"], i, "default") for i in mesh[:-1]}   # each owner, the lower ones'
    assert set(cluster.dns.asked) == parents | lower  # each child asked for its parent's pod


def test_a_pod_with_another_runs_key_is_refused_by_name(built, tmp_path):
    """Every pod takes the run key from the Secret: a pod given another fails the Job, its
    parent refusing it `peer-unauthenticated`."""
    need_root()
    docs = generate(built / "lsq_adam_star", tmp_path / "k8s", "--deadline-ms", "5000")
    cluster = Cluster(tmp_path / "k8s", docs, tmp_path)
    cluster.keys = {2: os.urandom(32)}
    with pytest.raises(AssertionError, match="failed the Job"):
        cluster.run(range(docs["Job"]["spec"]["completions"]))
    assert (REFUSALS["peer-unauthenticated"][0], "refused: peer-unauthenticated") in cluster.exits[0]


def test_pods_that_start_before_their_parent_wait_for_its_name(built, tmp_path):
    """Children first, each before its parent's pod has an address: each asks again (the
    runtime asks for a name until its deadline) and the run completes with no pod replaced.
    A pod that never finds its parent would refuse `name-unresolved` (87) at its deadline, and
    the Job's podFailurePolicy replaces such a pod (test_the_manifests_are_what_the_api_takes)."""
    need_root()
    docs = generate(built / "lsq_adam_tree", tmp_path / "k8s", "--deadline-ms", "20000")
    cluster = Cluster(tmp_path / "k8s", docs, tmp_path)
    n = docs["Job"]["spec"]["completions"]
    outputs = cluster.run(range(n - 1, -1, -1))
    assert outputs[0] == BITS and cluster.replaced == []
    asked = sorted(cluster.dns.asked)
    assert any(asked.count(a) > 1 for a in asked)     # a name asked for before it existed, again


# -- (d) inputs refused, nothing written ---------------------------------------------------------
@pytest.mark.parametrize("case", ["nosuch", "empty", "file", "changed", "roles.json"])
def test_what_is_not_a_built_deployment_is_refused_and_nothing_written(built, tmp_path, case):
    copied = tmp_path / "b"
    shutil.copytree(built, copied, symlinks=True)
    dep = {"nosuch": tmp_path / "nosuch", "empty": tmp_path / "empty", "file": EXAMPLES / "lsq_adam.alpha"
           }.get(case, copied / "lsq_adam_star")
    (tmp_path / "empty").mkdir()
    if case == "changed":
        exe = copied / "lsq_adam_star" / "owner.2"
        data = bytearray(exe.read_bytes())
        data[len(data) // 2] ^= 1
        exe.write_bytes(bytes(data))
    if case == "roles.json":
        t = copied / "lsq_adam_star" / "roles.json"
        t.write_text(t.read_text().replace('"x86_64"', '"aarch64"', 1))
    code, out, err = alphac("k8s", dep, "-o", tmp_path / "out")
    name = "artifact-hash" if case in ("changed", "roles.json") else "launch-input"
    assert code == REFUSALS[name][0] and out == "" and err.startswith(f"refused: {name} ("), err
    assert err.count("\n") == 1 and ("owner.2" in err if case == "changed" else True)
    assert not (tmp_path / "out").exists() and not (dep / "k8s").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def fake_deployment(d: Path, targets: dict) -> Path:
    """A deployment directory of roles with these targets (their files not run)."""
    from alphac import artifacts, manifest
    roles = [{"role": r, "file": r, "rank": k, "parent": None if k == 0 else "coordinator",
              "listens": k == 0, "target": t, "samples": None} for k, (r, t) in enumerate(targets.items())]
    table = {"format": 1, "deployment": "mixed", "learner": "lsq_adam", "identity": {}, "root": "coordinator",
             "roles": roles, "batches": 1, "data": []}
    entries = {}
    data = (json.dumps(table, indent=2, sort_keys=True) + "\n").encode()
    artifacts.write_file(d / "dep" / "roles.json", data, 0o644)
    entries["dep/roles.json"] = manifest.artifact_entry(data, {"kind": "test"}, [])
    for r in targets:
        elf = b"\x7fELF" + bytes(60) + r.encode()          # a header, no program headers
        artifacts.write_file(d / "dep" / r, elf, 0o755)
        entries[f"dep/{r}"] = manifest.artifact_entry(elf, {"kind": "test"}, [])
    manifest.write(d / "MANIFEST.json", manifest.new(entries, [], {}))
    return d / "dep"


@pytest.mark.parametrize("case", ["mixed", "gpu", "aarch64"])
def test_deployments_one_job_cannot_hold_are_refused_by_name(tmp_path, case):
    targets = {"mixed": {"coordinator": "x86_64", "owner.0": "aarch64", "owner.1": "x86_64"},
               "gpu": {"coordinator": "x86_64", "owner.0": "x86_64+sm_90", "owner.1": "x86_64"},
               "aarch64": {"coordinator": "aarch64", "owner.0": "aarch64"}}[case]
    dep = fake_deployment(tmp_path, targets)
    code, out, err = alphac("k8s", dep, "-o", tmp_path / "out")
    if case == "aarch64":                          # one ISA: its nodes, its image's platform
        assert code == 0, err
        job = next(d for d in need("yaml").safe_load_all((tmp_path / "out/k8s.yaml").read_text())
                   if d["kind"] == "Job")
        assert job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"] == "arm64"
        assert "--platform linux/arm64" in err
        return
    assert code == 1 and out == "" and err.startswith("alphac k8s: error: ") and err.count("\n") == 1
    assert {"mixed": "aarch64: owner.0; x86_64: coordinator, owner.1",
            "gpu": "GPU owners owner.0 (x86_64+sm_90)"}[case] in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, says", [
    (["--name", "Fit_1"], "RFC 1035 label"),
    (["--name", "a" * 62], "longer than 63"),
    (["--namespace", "ML_team"], "--namespace"),
    (["--port", "70000"], "1 to 65535"),
    (["--cluster-domain", "bad..domain"], "--cluster-domain"),
    (["--image", "has space"], "--image"),
])
def test_options_kubernetes_would_not_take_are_refused(built, tmp_path, args, says):
    code, out, err = alphac("k8s", built / "lsq_adam_star", "-o", tmp_path / "out", *args)
    assert code == 1 and says in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_an_output_directory_of_other_files_is_left_alone(built, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    code, _, err = alphac("k8s", built / "lsq_adam_star", "-o", tmp_path / "out")
    assert code == 1 and "notes.txt" in err and "another -o" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


LOADED = """learner loaded
data x = load("x.npy")
data y = load("sub/y.npy")
param w: f64[5] = 0.0
loss(i) {
  let r = dot(w, x[i]) - y[i]
  0.5 * r^2
}
update {
  w = w - 0.05 * grad(w)
}

deployment star2 {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..5, owner[1] = 5..8
}
"""


def test_loaded_data_goes_into_the_image(tmp_path, monkeypatch):
    """The files the owners load at run time are copied into the image (checked as the owners
    check them), the pods read them from /alphac/data; a changed file is refused first."""
    import numpy as np
    from alphac.dist.execute import run_plan
    from alphac.driver import compile_deployments
    from alphac.ir.interp import format_state
    need_root()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    np.save("x.npy", np.array(oracle.X_LSQ))
    np.save("sub/y.npy", np.array(oracle.Y_LSQ))
    Path("loaded.alpha").write_text(LOADED)
    dep = build_deployment(Path("loaded.alpha"), "star2", tmp_path / "roles")
    docs = generate(dep, tmp_path / "k8s", "--deadline-ms", "20000")
    assert (tmp_path / "k8s/data/sub/y.npy").read_bytes() == Path("sub/y.npy").read_bytes()
    args = docs["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--data") + 1] == "/alphac/data"
    compiled, plans = compile_deployments("loaded.alpha")
    want = format_state(compiled.learner, run_plan(compiled.learner, plans["star2"], STEPS))
    outputs = Cluster(tmp_path / "k8s", docs, tmp_path).run(range(3))
    assert outputs[0] == want
    y = np.load("sub/y.npy")
    y[3] += 1
    np.save("sub/y.npy", y)
    code, _, err = alphac("k8s", dep, "-o", tmp_path / "k8s2")
    assert code == REFUSALS["data-hash"][0] and "sub/y.npy" in err and not (tmp_path / "k8s2").exists()


@pytest.mark.parametrize("targets, want", [
    ({"coordinator": "x86_64", "owner.0": "x86_64"}, []),
    ({"coordinator": "x86_64", "owner.0": "x86_64-v3"}, ["AVX2"]),
    ({"coordinator": "x86_64-v3", "owner.0": "x86_64-v4"},
     ["AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512VL"]),
])
def test_roles_at_a_level_ask_for_nodes_with_its_cpu(tmp_path, targets, want):
    """A level's pods land only on nodes whose CPU runs them (Node Feature Discovery's labels),
    never on one where they would refuse cpu-level; one ISA still, so one Job."""
    dep = fake_deployment(tmp_path, targets)
    code, out, err = alphac("k8s", dep, "-o", tmp_path / "out")
    assert code == 0, err
    job = next(d for d in need("yaml").safe_load_all((tmp_path / "out/k8s.yaml").read_text())
               if d["kind"] == "Job")
    sel = job["spec"]["template"]["spec"]["nodeSelector"]
    assert sel == {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                   **{f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in want}}


def test_periodic_checkpoints_go_to_a_claim_every_pod_mounts(built, tmp_path):
    """`--checkpoint-claim` mounts a PersistentVolumeClaim at /alphac-checkpoints in every pod
    (writable by the pods' group) and passes --checkpoint there, with --checkpoint-every and
    --keep; the objects still are what the API takes. Without a claim, the two are refused."""
    docs = generate(built / "lsq_adam_tree", tmp_path / "k8s", "--checkpoint-claim", "fit-ckpt",
                    "--checkpoint-every", "50", "--keep", "3")
    assert schema_problems(docs) == [] and enum_problems(docs) == []
    pod = docs["Job"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fit-ckpt"}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/alphac-checkpoints"}]
    assert pod["securityContext"]["fsGroup"] == 65532
    args = pod["containers"][0]["args"]
    assert args[args.index("--checkpoint"):args.index("--checkpoint") + 6] == \
        ["--checkpoint", "/alphac-checkpoints", "--checkpoint-every", "50", "--keep", "3"]
    for bad in (["--checkpoint-every", "50"], ["--checkpoint-claim", "Not_A_Claim"], ["--restarts", "1"],
                ["--checkpoint-claim", "fit-ckpt", "--restarts", "1"]):         # --restarts: both
        code, _, err = alphac("k8s", built / "lsq_adam_tree", "-o", tmp_path / "bad", *bad)
        assert code != 0 and ("--checkpoint-claim" in err) and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("dep,victim", [("lsq_adam_star", 2), ("lsq_adam_tree", 1), ("lsq_adam_mesh", 2)])
def test_a_pod_killed_at_a_step_is_replaced_and_every_pod_resumes(built, tmp_path, dep, victim):
    """`--restarts 1`: a pod killed after the run's checkpoint of step 100 (an owner of a star; an
    aggregator of a hierarchy, whose owners lose their parent) fails; every other pod refuses
    `peer-lost`; each index gets a new pod after its back-off, whose names resolve to the new
    addresses, and all resume from the claim's newest complete checkpoint: the root publishes the
    uninterrupted run's bits (the same membership, so under the ordered contract the same bits).
    Without --restarts the same kill fails the Job."""
    need_root()
    steps, every = 2000, 100
    want = oracle.run("lsq_adam", [(steps, oracle.REF_SPLIT, oracle.REF_TREE)])
    for restarts in (1, 0):
        out = tmp_path / f"k8s-{restarts}"
        code, _, err = alphac("k8s", built / dep, "-o", out, "--steps", steps, "--deadline-ms", "20000",
                              "--checkpoint-claim", "fit", "--checkpoint-every", every,
                              *(["--restarts", restarts] if restarts else []))
        assert code == 0, err
        docs = {d["kind"]: d for d in need("yaml").safe_load_all((out / "k8s.yaml").read_text())}
        assert schema_problems(docs) == [] and enum_problems(docs) == []
        args = docs["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert ("--resume-latest" in args) == bool(restarts) and args[args.index("--steps") + 1] == str(steps)
        work = tmp_path / f"c-{restarts}"
        work.mkdir()
        cluster = Cluster(out, docs, work)
        n = docs["Job"]["spec"]["completions"]
        if not restarts:
            with pytest.raises(AssertionError, match="failed the Job"):
                cluster.run(range(n), kill=(victim, cluster.claim / "v100" / "MANIFEST"))
            continue
        outputs = cluster.run(range(n), kill=(victim, cluster.claim / "v100" / "MANIFEST"))
        assert outputs[0] == want and all(outputs[i] == "" for i in range(1, n))
        assert cluster.exits[victim][0][0] == -9 and sorted(cluster.replaced) == list(range(n))
        # a peer killed between frames is `peer-lost`; one killed while it sent a frame leaves
        # that frame cut short, `frame-truncated` (75): either is the failure, by name
        lost = {REFUSALS["peer-lost"][0], REFUSALS["frame-truncated"][0]}
        assert all(cluster.exits[i][0][0] in lost for i in range(n) if i != victim), cluster.exits
        assert cluster.failed == {i: 1 for i in range(n)}
        assert sorted(p.name for p in cluster.claim.iterdir()) == [f"v{steps - every}", f"v{steps}"]
        shards = [p.name for p in (cluster.claim / f"v{steps}").rglob("*.npy")]    # resumed once:
        assert shards and all(f".e1.v{steps}." in s for s in shards)               # epoch 1
