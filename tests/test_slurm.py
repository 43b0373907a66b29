"""`alphac slurm` on a real Slurm (issue 20): a slurmctld and three slurmd (n1, n2, n3: this
slurmd runs several daemons on one machine, `-N NAME`, each on its own port and loopback address)
started here from a slurm.conf of the test's own (auth/none, cred/none, proctrack/pgid,
select/linear, one CPU a node, so that the tasks' layout is the script's and not the CPUs').
The batch script runs the roles with srun --multi-prog; the sealed record of the job has the
interpreter's bits, verifies, and shows the combining roles on the first node and the others
on the rest; a wrong-rank mapping is refused by name in the record. Needs root (the daemons run
as SlurmUser root): skipped otherwise, failed in CI."""
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import oracle
from backend import build_deployment
from conftest import EXAMPLES, alphac, require_tool

from alphac.refusals import exit_code
from alphac.tools.launch import free_port

NODES = ("n1", "n2", "n3")
ADDR = {n: f"127.0.1.{k + 1}" for k, n in enumerate(NODES)}


def need_root():
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("tests/test_slurm.py needs root in CI (slurmctld and slurmd as SlurmUser root)")
        pytest.skip("needs root (slurmctld and slurmd as SlurmUser root)")


def until(what, test, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if test():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Cluster:
    """slurmctld and one slurmd per node name, in the background; `close` ends them and
    whatever they started (the processes whose environment names this cluster's slurm.conf)."""

    def __init__(self, d: Path):
        self.d, self.procs = d, []
        taken: set[int] = set()
        ctld, ports = free_port(taken), {n: free_port(taken) for n in NODES}
        for sub in ("state", "log", *(f"spool/{n}" for n in NODES)):
            (d / sub).mkdir(parents=True)
        host = socket.gethostname().split(".")[0]
        nodes = "".join(f"NodeName={n} NodeAddr={ADDR[n]} NodeHostname={host} Port={ports[n]} CPUs=1 "
                        "State=UNKNOWN\n" for n in NODES)
        self.conf = d / "slurm.conf"
        self.conf.write_text(f"""ClusterName=alphac
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld}
SlurmdPort={ports[NODES[0]]}
AuthType=auth/none
CredType=cred/none
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MessageTimeout=5
{nodes}PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")
        (d / "hosts").write_text("".join(f"{ADDR[n]} {n}\n" for n in NODES))
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), ALPHAC_HOSTS=str(d / "hosts"))
        for k in [k for k in self.env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            del self.env[k]
        try:
            self.start("slurmctld", ["slurmctld", "-D"])
            until("slurmctld", lambda: "UP" in self.ctl(["scontrol", "ping"]).stdout, 20)
            for n in NODES:
                self.start(f"slurmd.{n}", ["slurmd", "-D", "-N", n])
            until("three idle nodes", lambda: self.ctl(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split()
                  == [w for n in NODES for w in (n, "idle")], 30)
        except BaseException:
            self.close()
            raise

    def start(self, name, argv):
        log = open(self.d / "log" / f"{name}.out", "wb")
        self.procs.append(subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))
        log.close()

    def ctl(self, argv, timeout=15):
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)

    def logs(self) -> str:
        return "".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                       for f in sorted((self.d / "log").iterdir()))

    def ours(self) -> list[int]:
        """The processes (other than ours) whose environment holds this cluster's SLURM_CONF."""
        mark, pids = f"SLURM_CONF={self.conf}".encode(), []
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and int(p.name) != os.getpid() and \
                        mark in (p / "environ").read_bytes().split(b"\0"):
                    pids.append(int(p.name))
            except OSError:
                pass
        return pids

    def close(self):
        try:
            self.ctl(["scancel", "--partition=debug"], timeout=10)
        except (OSError, subprocess.SubprocessError):
            pass
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pid in self.ours():              # a slurmstepd or a task left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    need_root()
    for tool in ("slurmctld", "slurmd", "sbatch", "srun", "scontrol"):
        require_tool(tool)
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    yield c
    c.close()


TREE = "lsq_adam_tree"          # 7 roles: root, agg1.0, agg1.1 (ranks 0-2 combine), owner.0-3
STAR = "lsq_adam_star"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The star one executable per role; the hierarchy as a fleet, one executable per index node
    (root; agg1.0-2 for ranks 1-2; owner.0-4 for ranks 3-6): multi-prog lines of rank ranges."""
    from alphac.artifacts import build_deployment as build_fleet
    d = tmp_path_factory.mktemp("slurm-build")
    src = d / "lsq_adam.alpha"
    src.write_text((EXAMPLES / "lsq_adam.alpha").read_text())
    cwd = os.getcwd()
    os.chdir(d)
    try:
        build_fleet("lsq_adam.alpha", TREE, "fleet", fleet=True)
    finally:
        os.chdir(cwd)
    return {TREE: d / "fleet", STAR: build_deployment(src, STAR, d / "build")}


def submit(cluster, script: Path, timeout=40):
    """sbatch the script and wait for its job to end (polled: faster than sbatch --wait's
    backoff); the job's exit code, and what Slurm said of it."""
    p = cluster.ctl(["sbatch", "--parsable", str(script)])
    assert p.returncode == 0, p.stderr
    job, facts = p.stdout.strip().split(";")[0], {}
    def ended():
        facts.update(w.partition("=")[::2] for w in
                     cluster.ctl(["scontrol", "-o", "show", "job", job]).stdout.split())
        return facts.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
    until(f"job {job}", ended, timeout)
    return int(facts["ExitCode"].split(":")[0]), facts


def test_a_deployment_runs_as_a_slurm_job_and_its_record_verifies(cluster, built, tmp_path):
    runs = tmp_path / "runs"
    code, _, err = alphac("slurm", built[TREE], "--steps", 3, "--nodes", 3, "--records", runs,
                          "--deadline-ms", 10000, "--port-base", free_port(), "--time", "2:00",
                          "--partition", "debug")
    assert code == 0, err
    rdir = runs / f"{TREE}-0001"
    script = rdir / "slurm.sh"
    text = script.read_text()
    assert "--multi-prog" in text and "#SBATCH --time=2:00" in text
    assert [l.split()[0] for l in text.split("<<END\n")[-1].splitlines()[:3]] == ["0", "1-2", "3-6"]
    assert (rdir / "run-key").stat().st_mode & 0o777 == 0o600          # the run key: not in the script
    assert bytes.fromhex((rdir / "run-key").read_text()).hex().encode() not in script.read_bytes()
    rc, out = submit(cluster, script)
    assert rc == 0, (out, next(rdir.glob("slurm-*.out")).read_text(), cluster.logs())
    code, published, err = alphac("slurm-record", rdir)
    assert code == 0, err
    _, want, _ = alphac("run", EXAMPLES / "lsq_adam.alpha", "--deployment", TREE, "--steps", 3)
    assert published == want == oracle.run("lsq_adam", [(3, oracle.REF_SPLIT, oracle.REF_TREE)])
    assert alphac("verify-record", rdir / "record.json")[0] == 0
    rec = json.loads((rdir / "record.json").read_text())
    nodes = {r["role"]: r["node"] for r in rec["roles"]}
    assert rec["passed"] and rec["slurm"]["nodes"] == list(NODES) and rec["slurm"]["srun_exit"] == 0
    assert {nodes[r] for r in ("root", "agg1.0", "agg1.1")} == {"n1"}       # every parent's node
    assert [nodes[f"owner.{k}"] for k in range(4)] == ["n2", "n3", "n2", "n3"]
    assert not (rdir / "keys").exists() and not (rdir / "run-key").exists()
    assert all(b"\nconnected authenticated @" in f.read_bytes() for f in (rdir / "events").iterdir())
    code, _, err = alphac("slurm-record", rdir, "--record-key", tmp_path / "other-key")
    assert code == 105 and err.startswith("refused: record-key")


def test_a_wrong_rank_mapping_is_refused_by_name_in_the_record(cluster, built, tmp_path):
    runs = tmp_path / "runs"
    code, _, err = alphac("slurm", built[STAR], "--steps", 2, "--nodes", 2, "--records", runs,
                          "--deadline-ms", 1500, "--port-base", free_port())
    assert code == 0, err
    rdir = runs / f"{STAR}-0001"
    script = rdir / "slurm.sh"
    text = script.read_text()                # task 1 (owner.0's) starts owner.1's executable
    assert text.count(f"{built[STAR]}/owner.0 ") == 1
    script.write_text(text.replace(f"{built[STAR]}/owner.0 ", f"{built[STAR]}/owner.1 "))
    rc, out = submit(cluster, script)
    assert rc != 0, out
    code, published, err = alphac("slurm-record", rdir)
    assert code == 102 and published == "" and "owner.0: refused: rank-out-of-range" in err, err
    rec = json.loads((rdir / "record.json").read_text())
    refused = {r["role"]: r["refused"] for r in rec["roles"]}
    assert refused["owner.0"] == "rank-out-of-range"          # the others: a peer missing
    assert [r for r in refused if refused[r] == "rank-out-of-range"] == ["owner.0"]
    assert not rec["passed"] and {r["node"] for r in rec["roles"]} == {"n1", "n2"}
    code, _, err = alphac("verify-record", rdir / "record.json")
    assert code == 3 and "owner.0: exited 88 (refused: rank-out-of-range)" in err, err
    again = subprocess.run(["bash", script], env=dict(cluster.env, SLURM_JOB_NODELIST="n1"),
                           capture_output=True, text=True, timeout=20)      # a script runs once
    assert again.returncode == 104 and again.stderr.startswith("refused: records-dir"), again.stderr


def test_slurm_record_right_after_sbatch_says_the_job_is_queued_then_waits_for_it(cluster, built, tmp_path,
                                                                                   monkeypatch):
    """Before the job has run, slurm-record refuses job-not-done, naming the job, its state and
    --wait, and writes nothing; with --wait it waits for the job and seals its record."""
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))           # the squeue alphac runs
    runs = tmp_path / "runs"
    code, _, err = alphac("slurm", built[STAR], "--steps", 2, "--nodes", 2, "--records", runs,
                          "--deadline-ms", 10000, "--port-base", free_port())
    assert code == 0, err
    rdir = runs / f"{STAR}-0001"
    p = cluster.ctl(["sbatch", "--parsable", "--hold", str(rdir / "slurm.sh")])    # held: queued
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    code, published, err = alphac("slurm-record", rdir)
    assert (code, published) == (exit_code("job-not-done"), "") and err.startswith(f"refused: job-not-done (job {job} is pending; "
                                                             f"`alphac slurm-record {rdir} --wait`"), err
    assert not (rdir / "record.json").exists()
    assert cluster.ctl(["scontrol", "release", job]).returncode == 0
    code, published, err = alphac("slurm-record", rdir, "--wait", 60)
    assert code == 0 and f"alphac slurm-record: job {job} is " in err, err
    assert published == alphac("run", EXAMPLES / "lsq_adam.alpha", "--deployment", STAR, "--steps", 2)[1]


def test_slurm_refuses_by_name_before_writing_anything(built, tmp_path):
    """Checked on this machine, no cluster needed: a changed executable, a missing build."""
    code, _, err = alphac("slurm", tmp_path / "nosuch", "--records", tmp_path / "runs")
    assert code == 103 and err.startswith("refused: launch-input") and err.count("\n") == 1
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(built[STAR].parent, copy)
    (copy / STAR / "owner.2").write_bytes(b"\x7fELF altered")
    code, _, err = alphac("slurm", copy / STAR, "--records", tmp_path / "runs")
    assert code == 100 and err.startswith("refused: artifact-hash") and "owner.2" in err
    code, _, err = alphac("slurm-record", tmp_path)
    assert code == 103 and "not a run directory of `alphac slurm`" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("nodes", [["a"], ["a", "b"], ["a", "b", "c", "d", "e", "f"]])
def test_the_script_places_the_combining_roles_on_the_first_node(built, tmp_path, nodes):
    """The script's layout for any node count, with stand-ins for scontrol and srun (no cluster
    needed): ranks 0-2 on the first node; the owners in turn on the others, or on it alone."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "scontrol").write_text("#!/bin/bash\nprintf '%s\\n' " + " ".join(nodes) + "\n")
    (bin_ / "srun").write_text("#!/bin/bash\nexit 0\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    code, _, err = alphac("slurm", built[TREE], "--records", tmp_path / "runs")
    assert code == 0, err
    rdir = tmp_path / "runs" / f"{TREE}-0001"
    assert "#SBATCH --nodes=5\n" in (rdir / "slurm.sh").read_text()      # 1 + the 4 owners
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", SLURM_JOB_NODELIST="x", SLURM_JOB_ID="7")
    p = subprocess.run(["bash", rdir / "slurm.sh"], env=env, capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    rest = nodes[1:] or nodes
    want = [nodes[0]] * 3 + [rest[k % len(rest)] for k in range(4)]
    assert (rdir / "tasks" / "hostfile").read_text().split() == want
    conf = (rdir / "tasks" / "multi-prog.conf").read_text().splitlines()
    assert [l.split()[0] for l in conf] == ["0", "1-2", "3-6"]
    assert [l.split()[4].rpartition("/")[2] for l in conf] == ["root", "agg1.0-2", "owner.0-4"]
    assert all(f"--rank %t" in l and f"--parent {nodes[0]}:7000+{{}}" in l for l in conf[1:])


def test_the_tasks_checkpoint_periodically_with_what_the_script_passes(built, tmp_path):
    """--checkpoint-every and --keep reach every task's command line (no cluster needed); without
    --checkpoint they are refused by name, nothing written."""
    ck = tmp_path / "ck"
    code, _, err = alphac("slurm", built[STAR], "--records", tmp_path / "runs", "--checkpoint", ck,
                          "--checkpoint-every", 25, "--keep", 3)
    assert code == 0, err
    lines = [l for l in (tmp_path / "runs" / f"{STAR}-0001" / "slurm.sh").read_text().splitlines()
             if "task.sh" in l and "--rank" in l]
    assert lines and all(f"--checkpoint {ck} --checkpoint-every 25 --keep 3" in l for l in lines)
    code, _, err = alphac("slurm", built[STAR], "--records", tmp_path / "r2", "--checkpoint-every", 25)
    assert code == 103 and err.startswith("refused: launch-input") and not (tmp_path / "r2").exists()


def test_the_scripts_restart_picks_the_checkpoint_the_runtime_would(tmp_path):
    """The restart loop's own line (the `v=$(ls ...)` of the script, run by bash) picks the same
    checkpoint as alphac.tools.ckpt.newest, the rule --resume-latest follows: a leading zero (which
    bash's arithmetic would read as octal), v0, 16 digits or a missing MANIFEST are never picked."""
    from alphac.tools.ckpt import newest
    from alphac.tools.slurm import SCRIPT
    line = next(l for l in SCRIPT.splitlines() if l.lstrip().startswith("v=$(ls @CK@"))
    body = SCRIPT.splitlines()[SCRIPT.splitlines().index(line) + 1]
    ck = tmp_path / "ck"
    for name, complete in [("v40", True), ("v080", True), ("v0", True), ("v1234567890123456", True),
                           ("v90", False), ("v7", True), ("w99", True)]:
        (ck / name).mkdir(parents=True)
        if complete:
            (ck / name / "MANIFEST").write_text("")
    picked = subprocess.run(["bash", "-c", (line + "\n" + body + "\necho \"$v\"").replace("@CK@", str(ck))],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert newest(ck) == (ck / "v40", 40) and picked == "40"


def test_a_failed_srun_is_started_again_from_the_newest_checkpoint(cluster, built, tmp_path):
    """--restarts 1 with periodic checkpoints: owner.2's process killed once it has said step 600
    (of 4000: a run long enough that the kill lands before it ends, even on a loaded machine);
    the script runs srun again from the newest complete checkpoint, and the record (one failure,
    the checkpoint resumed, both attempts' streams verified) publishes the uninterrupted bits."""
    runs, ck = tmp_path / "runs", tmp_path / "ck"
    code, _, err = alphac("slurm", built[STAR], "--steps", 4000, "--nodes", 2, "--records", runs,
                          "--deadline-ms", 3000, "--port-base", free_port(), "--checkpoint", ck,
                          "--checkpoint-every", 400, "--restarts", 1)
    assert code == 0, err
    rdir = runs / f"{STAR}-0001"
    killed = []

    def kill_owner2():
        events = rdir / "events" / "owner.2.log"
        until("owner.2 at step 600", lambda: events.exists() and b"\nstep 600 " in events.read_bytes(), 30)
        for pid in os.listdir("/proc"):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError):
                continue
            if cmd and cmd[0] == str(built[STAR] / "owner.2").encode():
                os.kill(int(pid), signal.SIGKILL)
                killed.append(pid)
    import threading
    t = threading.Thread(target=kill_owner2)
    t.start()
    rc, out = submit(cluster, rdir / "slurm.sh", timeout=90)
    t.join()
    assert killed and rc == 0, (out, next(rdir.glob("slurm-*.out")).read_text())
    code, published, err = alphac("slurm-record", rdir)
    assert code == 0, err
    assert published == oracle.run("lsq_adam", [(4000, oracle.REF_SPLIT, oracle.REF_TREE)])
    assert alphac("verify-record", rdir / "record.json")[0] == 0
    rec = json.loads((rdir / "record.json").read_text())
    [f] = rec["failures"]
    assert f["failed"] == ["owner.2"] and f["resumed_from"]["step"] % 400 == 0 and f["resumed_from"]["step"] >= 400
    assert [e["step"] for e in rec["loss"]] == list(range(1, 4001)) and rec["steps"] == 4000
