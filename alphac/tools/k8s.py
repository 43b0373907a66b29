"""`alphac k8s DIR`: Kubernetes manifests and a container image recipe for a built deployment.

    alphac k8s build/roles/lsq_adam_tree [-o OUT] [--image IMAGE] [--name NAME] [--port P] ...

What it writes into OUT (default DIR/k8s), all of it computed and checked before anything is
written, byte for byte the same on every run (no time, no absolute path, ranks in order):
- `k8s.yaml`: a headless Service NAME (clusterIP None, selecting the Job's pods, publishing them
  before they are ready) and an Indexed Job NAME of one pod per rank (completions = parallelism =
  the ranks, backoffLimit 0, restartPolicy Never). The pod of index I has the hostname NAME-I,
  and with `subdomain: NAME` the DNS name NAME-I.NAME.<namespace>.svc.<cluster domain>. Its one
  container runs only the executable of rank I:
      /alphac/rank/$(JOB_COMPLETION_INDEX) --rank $(JOB_COMPLETION_INDEX) --steps N
          --deadline-ms MS --listen [$(POD_IP)]:P --parent NAME-{}.NAME.$(POD_NAMESPACE).svc.D:P
  (Kubernetes expands `$(VAR)` from the container's env: the index from the pod's annotation,
  POD_IP and POD_NAMESPACE from the downward API; the executable expands `{}` in --parent to its
  parent's rank, so every pod names its parent's pod). The name is fully qualified because the
  runtime's resolver uses no search list. A role without a parent (the root) ignores it. The
  runtime asks for a name until its deadline (pods start in any order); a role that then still
  refuses `name-unresolved` (its exit code from alphac.refusals) is replaced by the Job
  (podFailurePolicy Ignore): it has exchanged nothing yet; any other failure fails the Job at
  once (backoffLimit 0), unless `--restarts R` (with --checkpoint-claim and --checkpoint-every):
  then each index's failed pod is replaced up to R times (backoffLimitPerIndex R, Kubernetes
  1.29 or later; maxFailedIndexes 0: an index failing once more fails the Job), and every pod
  runs with `--resume-latest /alphac-checkpoints`, `--steps` the global steps: a lost peer makes
  every other role refuse `peer-lost`, so every index is replaced, each pod resolves its peers'
  names again and resumes from the newest complete checkpoint in the claim. The run's key (docs/distribution.md, "Membership") is the Secret
  NAME-run-key, key `run-key` (64 hex digits), which the container's ALPHAC_RUN_KEY references
  (secretKeyRef): the manifest names the Secret and never holds the key, and a pod of a Job
  whose Secret is missing does not start. Each run gets a new key by making the Secret anew
  (what `alphac k8s` prints: the bytes go from /dev/urandom to kubectl's standard input).
  `[$(POD_IP)]` is an IPv6 pod's address in brackets, and the runtime
  takes `[A.B.C.D]:P` as well. Each pod requests and is limited to `memory` (the largest
  executable's segments, a stack, the kernel's share); the Job ends its pods after
  activeDeadlineSeconds (--active-deadline, default a day; 0: no bound) and is deleted with its
  pods and their logs ttlSecondsAfterFinished after it ends (--ttl-after-finished, default a day).
- `Containerfile`: FROM scratch, the executables as /alphac/roles/FILE, and /alphac/rank/N, a
  relative symbolic link to the file serving rank N (one copy of each executable however many
  ranks it serves; the kernel follows the link at exec, no shell needed); `roles/`, `rank/` and
  `SHA256SUMS` beside it, and `data/` when the learner loads data at run time (then the pods get
  `--data /alphac/data`; each owner checks its rows' digests as it reads them).

Refused before anything is written: what `alphac launch` refuses (`launch-input`, and
`artifact-hash`: each executable's SHA-256 against the build manifest, checked on the bytes that
are copied), and, as K8sError, GPU owners (each is built for one card on one host), roles of
more than one ISA (one Job has one pod template, so one nodeSelector; roles at a level, x86_64-v3
or -v4, ask for nodes with its CPU flags by Node Feature Discovery's labels), names Kubernetes would
not take, more ranks than an Indexed Job may have, and an OUT that holds anything else.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

from alphac.elf.writer import PT_LOAD
from alphac.encode import Unencodable, yaml_comment, yaml_scalar
from alphac.files import open_regular, read_regular, write_file
from alphac.manifest import MAX_FILE
from alphac.refusals import DECIMAL_DIGITS, Refusal, exit_code
from alphac.tools.table import check_hashes, load_table

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}        # the ISA -> kubernetes.io/arch
LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")   # an RFC 1035 label (Service names)
MAX_INDEXED = 100000                                    # an Indexed Job's completions, at most
PREFIX = "alphac"                                      # the annotations' key prefix
NAME_UNRESOLVED = exit_code("name-unresolved")
OURS = {"k8s.yaml", "Containerfile", "SHA256SUMS", "roles", "rank", "data"}
HEADER = "# alphac k8s:"
USER = 65532                                            # the pods' user and group (not root)
INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
RUN_KEY = "run-key"                                     # the Secret NAME-run-key's key
CHECKPOINTS = "/alphac-checkpoints"     # where a --checkpoint-claim is mounted in every pod
STACK = 8 << 20                                         # the kernel's default stack limit
KERNEL = 8 << 20                                        # socket buffers, page tables


class K8sError(Exception):
    """A deployment or an option that the manifests cannot express (exit 1, nothing written)."""


def default_name(deployment: str) -> str:
    """The deployment's name as a label: `lsq_adam_star` -> `lsq-adam-star`."""
    name = re.sub(r"[^a-z0-9]+", "-", deployment.lower()).strip("-")
    return name if name[:1].isalpha() else f"alphac-{name}".rstrip("-")


def literal(text: str) -> str:
    """`text` as Kubernetes passes it on after expanding $(VAR): every `$` doubled."""
    return text.replace("$", "$$")


def rank_files(table: dict) -> list[str]:
    """The file serving each rank, in rank order: rank N's executable is rank_files(t)[N]. Each
    role of roles.json serves its `rank`, its position in the table; one file may serve many."""
    for i, r in enumerate(table["roles"]):
        if r.get("rank") != i:
            raise Refusal("launch-input", f"roles.json: role {r['role']} has rank "
                                          f"{r.get('rank')!r}, not its position {i} (rebuild it)")
    return [r["file"] for r in table["roles"]]


def arch_of(table: dict) -> str:
    """The one kubernetes.io/arch every role runs on; K8sError for GPU owners or mixed ISAs."""
    gpu = [f"{r['role']} ({r['target']})" for r in table["roles"] if "+" in r["target"]]
    if gpu:
        raise K8sError(f"GPU owners {', '.join(gpu)}: each is built for one card (its UUID) on one "
                       "host, which a pod cannot be pinned to; run it with `alphac launch`")
    isas: dict[str, list[str]] = {}
    for r in table["roles"]:
        isas.setdefault(r["target"].partition("-")[0], []).append(r["role"])   # x86_64-v3: x86_64
    unknown = sorted(set(isas) - set(ARCH))
    if unknown:
        raise K8sError(f"roles of target {', '.join(unknown)}: no Kubernetes architecture known")
    if len(isas) > 1:
        said = "; ".join(f"{isa}: {', '.join(names)}" for isa, names in sorted(isas.items()))
        raise K8sError(f"the deployment mixes ISAs ({said}): an Indexed Job has one pod template, "
                       "so one nodeSelector for every rank; build it for one ISA (`target`)")
    return ARCH[next(iter(isas))]


def cpu_labels(table: dict) -> dict[str, str]:
    """Node Feature Discovery's labels for the CPU flags the roles' levels need (x86_64-v4:
    feature.node.kubernetes.io/cpu-cpuid.AVX512F and the rest), so that no pod of a level lands
    on a node whose CPU would have it refuse `cpu-level`; none at a backend's baseline."""
    from alphac.targets import LEVELS
    flags = sorted({f for r in table["roles"] if r["target"] in LEVELS for f in LEVELS[r["target"]].flags})
    return {f"feature.node.kubernetes.io/cpu-cpuid.{f.upper()}": "true" for f in flags}


def check_names(name: str, namespace: str | None, n: int, port: int, domain: str) -> str:
    """The parent address every pod is given; K8sError unless Kubernetes and the runtime take
    each name: RFC 1035 labels, pod hostnames NAME-I of at most 63, the address under 256."""
    if not LABEL.match(name) or len(name) > 63:
        raise K8sError(f"--name {name!r}: a Service name is a lower-case RFC 1035 label (a-z, "
                       "0-9 and '-', starting with a letter), at most 63 characters")
    if len(f"{name}-{n - 1}") > 63:
        raise K8sError(f"--name {name!r}: the pod hostname {name}-{n - 1} would be longer than "
                       f"63 characters; give a name of at most {62 - len(str(n - 1))}")
    if namespace is not None and (not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", namespace)
                                  or len(namespace) > 63):
        raise K8sError(f"--namespace {namespace!r}: not an RFC 1123 label of at most 63 characters")
    if not all(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", p) for p in domain.split(".")):
        raise K8sError(f"--cluster-domain {domain!r}: not a DNS name")
    if not 0 < port < 65536:
        raise K8sError(f"--port {port}: a port is 1 to 65535")
    if n > MAX_INDEXED:
        raise K8sError(f"{n} ranks: an Indexed Job has at most {MAX_INDEXED} completions")
    longest = f"{name}-{n - 1}.{name}.{namespace or 'n' * 63}.svc.{domain}"   # the runtime's
    if len(longest) > 253 or len(f"{longest}:{port}") > 255:                  # bounds on names
        raise K8sError(f"the pods' names would be longer than 253 characters ({longest}); give "
                       "a shorter --name or --namespace")
    return f"{name}-{{}}.{name}.$(POD_NAMESPACE).svc.{domain}:{port}"


def memory(blobs: dict[str, bytes]) -> str:
    """The memory every pod requests and is limited to, in MiB: the largest executable's loaded
    segments (their p_memsz: every buffer the runtime has is one of them, the plan's demand for
    the learner's values included; there is no allocator), a stack of STACK bytes and KERNEL bytes
    for what the kernel charges the pod (socket buffers, page tables)."""
    most = 0
    for f, data in sorted(blobs.items()):
        try:
            phoff, = struct.unpack_from("<Q", data, 32)
            size, count = struct.unpack_from("<HH", data, 54)
            most = max(most, sum(struct.unpack_from("<Q", data, phoff + i * size + 40)[0]
                                 for i in range(count)
                                 if struct.unpack_from("<I", data, phoff + i * size)[0] == PT_LOAD))
        except struct.error:
            raise Refusal("launch-input", f"{f}: not an ELF executable (its program headers)")
    return f"{-(-(most + STACK + KERNEL) // (1 << 20))}Mi"


def objects(table: dict, *, name: str, image: str, arch: str, namespace: str | None, port: int,
            run_args: list[str], domain: str, active_deadline: int, ttl: int,
            mem: str, claim: str | None = None, restarts: int = 0) -> list[dict]:
    """The Service and the Job, as the dictionaries the API takes; with `claim`, every pod mounts
    that PersistentVolumeClaim at CHECKPOINTS (writable, group USER) for its checkpoints; with
    `restarts`, each index's pod is replaced up to that many times (backoffLimitPerIndex) and the
    first index to fail once more fails the Job (maxFailedIndexes 0)."""
    n = len(table["roles"])
    parent = check_names(name, namespace, n, port, domain)
    labels = {"app.kubernetes.io/instance": name, "app.kubernetes.io/name": "alphac"}
    meta = {"name": name, **({"namespace": namespace} if namespace else {}), "labels": labels,
            "annotations": {f"{PREFIX}/deployment": table["deployment"], f"{PREFIX}/learner": table["learner"]}}
    args = ["--rank", "$(JOB_COMPLETION_INDEX)", *map(literal, run_args)]
    if any(r["listens"] for r in table["roles"]):        # bracketed: an IPv6 pod's address too
        args += ["--listen", f"[$(POD_IP)]:{port}"]
    if any(r["parent"] for r in table["roles"]):
        args += ["--parent", parent]
    if any(r.get("mesh") for r in table["roles"]):     # owner j at its pod's name, `{}` = j's rank
        args += ["--mesh", parent]
    field = lambda var, path: {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
    container = {
        "name": "role", "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ["/alphac/rank/$(JOB_COMPLETION_INDEX)"], "args": args,
        "env": [field("JOB_COMPLETION_INDEX", INDEX), field("POD_IP", "status.podIP"),
                field("POD_NAMESPACE", "metadata.namespace"),
                {"name": "ALPHAC_RUN_KEY", "valueFrom": {"secretKeyRef": {"name": f"{name}-{RUN_KEY}",
                                                                          "key": RUN_KEY}}}],
        "ports": [{"name": "alphac", "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": {"memory": mem}, "limits": {"memory": mem}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        **({"volumeMounts": [{"name": "checkpoints", "mountPath": CHECKPOINTS}]} if claim else {})}
    pod = {"subdomain": name, "restartPolicy": "Never", "automountServiceAccountToken": False,
           "enableServiceLinks": False,
           "nodeSelector": {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux", **cpu_labels(table)},
           "securityContext": {"runAsNonRoot": True, "runAsUser": USER, "runAsGroup": USER,
                               "seccompProfile": {"type": "RuntimeDefault"},
                               **({"fsGroup": USER} if claim else {})},
           "containers": [container],
           **({"volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}}]}
              if claim else {})}
    limit = {"backoffLimitPerIndex": restarts, "maxFailedIndexes": 0} if restarts else {"backoffLimit": 0}
    spec = {"completionMode": "Indexed", "completions": n, "parallelism": n, **limit,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {  # an empty
                "containerName": "role", "operator": "In", "values": [NAME_UNRESOLVED]},  # list:
                "onPodConditions": []}]},                   # 1.28's schema requires the field
            **({"activeDeadlineSeconds": active_deadline} if active_deadline else {}),
            "ttlSecondsAfterFinished": ttl,
            "template": {"metadata": {"labels": labels}, "spec": pod}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                        "selector": labels, "ports": [{"name": "alphac", "port": port,
                                                       "targetPort": port, "protocol": "TCP"}]}}
    return [service, {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}]


# -- YAML: block style, every string that YAML could read as anything else double-quoted --------
# (alphac.encode.yaml_scalar: printable ASCII, so that it reads back as exactly the string)
PLAIN = re.compile(r"[A-Za-z/][A-Za-z0-9_./-]*\Z")
WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _scalar(v) -> str:
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v if PLAIN.match(v) and v.lower() not in WORDS else yaml_scalar(v)
    if v in ({}, []):
        return json.dumps(v)
    raise TypeError(f"no YAML for {type(v).__name__}")


def _block(v, ind: int) -> list[str]:
    sp, out = " " * ind, []
    for k, x in (v.items() if isinstance(v, dict) else ((None, x) for x in v)):
        head = f"{sp}{_scalar(k)}:" if isinstance(v, dict) else f"{sp}-"
        if isinstance(x, (dict, list)) and x:
            if isinstance(v, dict):
                out += [head] + _block(x, ind + 2)
            else:
                sub = _block(x, ind + 2)
                out += [f"{head} {sub[0][ind + 2:]}"] + sub[1:]
        else:
            out.append(f"{head} {_scalar(x)}")
    return out


def to_yaml(docs: list[dict], comment: str) -> str:
    body = "---\n".join("\n".join(_block(d, 0)) + "\n" for d in docs)
    return yaml_comment(comment) + body


# -- the output directory ------------------------------------------------------------------------
def role_bytes(dep_dir: Path, table: dict, manifest: dict, mpath: Path) -> dict[str, bytes]:
    """Each role file's bytes, checked against the manifest (check_hashes, then the bytes read)."""
    files = sorted({r["file"] for r in table["roles"]})
    hashes = check_hashes(dep_dir, files, manifest, mpath)
    out = {}
    for f in files:
        data = read_regular(dep_dir / f, MAX_FILE)
        if hashlib.sha256(data).hexdigest() != hashes[f]:
            raise Refusal("artifact-hash", f"{f} changed while it was read")
        out[f] = data
    return out


def data_files(table: dict, data: str | None) -> list[tuple[str, str]]:
    """(source path, path under data/) of each file the owners load, checked like the owners
    check them (the chunks' root); K8sError for a `load` path that leaves its directory."""
    from alphac.npy import NpyError, scan
    out = []
    for f in table.get("data", []):
        rel = f["load"]
        if rel.startswith("/") or ".." in rel.split("/"):
            raise K8sError(f"the learner loads {rel}, outside its directory: copy it into the "
                           "image yourself and give the pods --data")
        src = str(Path(data) / rel) if data else f["path"]
        try:
            same = scan(src).root == f["root"]
        except (OSError, NpyError) as e:
            raise Refusal("data-missing", f"{src}: {getattr(e, 'strerror', None) or e}")
        if not same:
            raise Refusal("data-hash", f"{src} is not the file the build read")
        out.append((src, rel))
    return out


def starts_with(path: Path, head: bytes) -> bool:
    """Whether the regular file `path` starts with `head` (only that much is read)."""
    try:
        fd, _ = open_regular(path)
    except OSError:
        return False
    try:
        return os.read(fd, len(head)) == head
    finally:
        os.close(fd)


def output_dir(out: Path) -> None:
    """K8sError unless `out` is absent, empty, or an earlier output of alphac k8s."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_dir():
        raise K8sError(f"{out} exists and is not a directory; remove it or give another -o")
    names = {p.name for p in out.iterdir()}
    cf = out / "Containerfile"
    ours = names <= OURS and (not names or (cf.is_file() and not cf.is_symlink()
                                            and starts_with(cf, HEADER.encode())))
    if not ours:
        other = sorted(names - OURS) or ["Containerfile"]
        raise K8sError(f"{out} holds other files ({', '.join(other[:4])}{', ...' * (len(other) > 4)}); "
                       "alphac k8s replaces only its own output: remove it or give another -o")


def generate(dep_dir: str | Path, out: str | Path | None = None, *, image: str | None = None,
             name: str | None = None, namespace: str | None = None, port: int = 7000,
             steps: int = 5, epochs: int | None = None, deadline_ms: int = 300000,
             cluster_domain: str = "cluster.local", active_deadline: int = 86400,
             ttl: int = 86400, data: str | None = None, checkpoint_claim: str | None = None,
             checkpoint_every: int | None = None, keep: int | None = None, restarts: int = 0) -> dict:
    """Write the manifests, the Containerfile and the image's files for the deployment in
    `dep_dir` into `out`; returns what the CLI prints (the image, the Job, the commands).
    `checkpoint_claim`: a ReadWriteMany PersistentVolumeClaim every pod mounts at CHECKPOINTS and
    publishes its checkpoints into (`--checkpoint`, with `checkpoint_every` and `keep` passed on);
    `restarts` (with both): a failed pod's index retried up to that many times, every pod started
    with `--resume-latest` there, so a Job's pods all start again from the newest checkpoint."""
    dep_dir = Path(dep_dir)
    table, manifest, mpath = load_table(dep_dir)
    out = Path(out) if out is not None else dep_dir / "k8s"
    name = default_name(table["deployment"]) if name is None else name
    for flag, v, low in (("--steps", steps, 0), ("--epochs", epochs, 0), ("--deadline-ms", deadline_ms, 1),
                         ("--active-deadline", active_deadline, 0), ("--ttl-after-finished", ttl, 0)):
        if v is not None and not low <= v < 10 ** DECIMAL_DIGITS:     # what the executables take
            raise K8sError(f"{flag} {v}: a whole number from {low} to {DECIMAL_DIGITS} digits")
    ranks = rank_files(table)
    blobs = role_bytes(dep_dir, table, manifest, mpath)
    loaded = data_files(table, data)
    arch = arch_of(table)
    sums = "".join(f"{hashlib.sha256(b).hexdigest()}  roles/{f}\n" for f, b in sorted(blobs.items()))
    links = "".join(f"rank/{i} -> roles/{f}\n" for i, f in enumerate(ranks))
    if image is None:                    # tagged by what the image holds: a rebuild, a new tag
        image = f"localhost/alphac/{name}:{hashlib.sha256((sums + links).encode()).hexdigest()[:12]}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*", image) or len(image) > 255:
        raise K8sError(f"--image {image!r}: not an image reference")
    run_args = ["--steps", str(steps)] if epochs is None else ["--epochs", str(epochs)]
    run_args += ["--deadline-ms", str(deadline_ms)] + (["--data", "/alphac/data"] if loaded else [])
    if (checkpoint_every or keep) and not checkpoint_claim:
        raise K8sError("--checkpoint-every and --keep need --checkpoint-claim CLAIM")
    if restarts and not checkpoint_every:
        raise K8sError("--restarts needs --checkpoint-claim CLAIM and --checkpoint-every K")
    if not 0 <= restarts < 2 ** 31:                     # backoffLimitPerIndex is an int32
        raise K8sError(f"--restarts {restarts}: a whole number below 2147483648")
    if checkpoint_claim is not None:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", checkpoint_claim):
            raise K8sError(f"--checkpoint-claim {checkpoint_claim!r}: not a claim's name (RFC 1123)")
        run_args += ["--checkpoint", CHECKPOINTS] + [a for f, n in (("--checkpoint-every", checkpoint_every),
                                                                  ("--keep", keep)) if n for a in (f, str(n))]
        run_args += ["--resume-latest", CHECKPOINTS] if restarts else []
    docs = objects(table, name=name, image=image, arch=arch, namespace=namespace, port=port,
                   run_args=run_args, domain=cluster_domain, active_deadline=active_deadline,
                   ttl=ttl, mem=memory(blobs), claim=checkpoint_claim, restarts=restarts)
    n, root = len(ranks), next(r["rank"] for r in table["roles"] if r["role"] == table["root"])
    try:                                 # the learner as the YAML below writes it: one line
        learner = _scalar(table["learner"])
    except Unencodable as e:
        raise Refusal("launch-input", f"roles.json: {e}")
    comment = (f"alphac k8s: deployment {table['deployment']} of learner {learner}, "
               f"{n} ranks, one pod each (kubernetes.io/arch {arch}).\n"
               f"The root is rank {root}: its pod's log is the published state.\n"
               f"Image {image}: `docker build --platform linux/{arch} -t {image} .` in this directory.")
    containerfile = (f"{HEADER} the image of deployment {table['deployment']} ({n} ranks, linux/{arch}).\n"
                     "# /alphac/rank/N is a relative symbolic link to /alphac/roles/FILE, the executable\n"
                     "# serving rank N: the Job's pods run /alphac/rank/$(JOB_COMPLETION_INDEX).\n"
                     "FROM scratch\nCOPY SHA256SUMS /alphac/SHA256SUMS\nCOPY roles/ /alphac/roles/\n"
                     "COPY rank/ /alphac/rank/\n" + ("COPY data/ /alphac/data/\n" if loaded else "")
                     + f"USER {USER}:{USER}\n")
    try:
        yaml = to_yaml(docs, comment)
    except Unencodable as e:
        raise Refusal("launch-input", f"roles.json: {e}")
    output_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for d in ["roles", "rank"] + (["data"] if loaded else []):
            (tmp / d).mkdir()
        for f, b in blobs.items():
            write_file(tmp / "roles" / f, b, 0o755)
        for i, f in enumerate(ranks):
            os.symlink(f"../roles/{f}", tmp / "rank" / str(i))
        for src, rel in loaded:
            (tmp / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
            os.chmod(shutil.copyfile(src, tmp / "data" / rel), 0o644)
        for d in [tmp, *(p for p in tmp.rglob("*") if p.is_dir() and not p.is_symlink())]:
            os.chmod(d, 0o755)
        write_file(tmp / "SHA256SUMS", sums.encode(), 0o644)
        write_file(tmp / "Containerfile", containerfile.encode(), 0o644)
        write_file(tmp / "k8s.yaml", yaml.encode(), 0o644)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.rename(out, old / "out")
        os.rename(tmp, out)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": out, "image": image, "name": name, "arch": arch, "ranks": n, "root": root,
            "namespace": namespace}
