"""`alphac slurm`: a built deployment as one Slurm batch job, and the job's sealed run record.

    alphac slurm DIR [-o SCRIPT] [--steps N] [--nodes N] [--port-base P] [--partition P] ...
    sbatch SCRIPT                          # one task per role, on the job's nodes
    alphac slurm-record RUNDIR             # on the submitting machine: RUNDIR/record.json

`write_script` checks roles.json and every executable against the build manifest (as `alphac
launch` does), makes the run's directory RUNDIR (records/NAME-NNNN, its nonce in slurm.json, each
rank's role and events key in `keys` and the run's key in `run-key`, both mode 0600: the script
never holds a key) and writes the batch script. Only the script
(bash, scontrol, srun, coreutils) and the role executables run on the nodes; DIR and RUNDIR must
be on a file system every node sees at the same path. The script, in the job:
1. refuses to run twice (RUNDIR/tasks exists) and checks the executables' SHA-256 (sha256sum);
2. places the tasks: rank r on line r of a hostfile (SLURM_HOSTFILE, `srun --distribution=
   arbitrary`). The combining roles are ranks 0..C-1 (the root first; roles.json lists them
   so, checked here), all on the job's first node FIRST, where every `--parent FIRST:P+{}`
   points; the others in turn over the other nodes (all on FIRST when the job has one). Slurm
   then starts exactly that layout whatever the nodes' CPU counts (`--overcommit`: the roles
   mostly wait on the network), rather than a block or cyclic layout that would put a
   combining role on another node when the first has fewer CPUs than C;
3. starts every task with `srun --multi-prog`: a line per range of ranks that one executable
   serves (one role's, or an index node's in a --fleet build), `--rank %t` checked by the executable against its compiled
   rank (`rank-out-of-range`), through a bash wrapper (RUNDIR/tasks/task.sh) that puts the
   role's events key and the run key in its environment (never on a command line; the role
   clears the run key from it at start) and keeps its node, exit
   code, stdout and stderr in RUNDIR/tasks/RANK.*; events go to RUNDIR/events/ROLE.log.
4. with `--restarts R`, runs srun again when it fails, up to R times, each task resumed from the
   newest checkpoint directory DIR/v<step> with a root manifest (RUNDIR/tasks/resume, read by
   task.sh), the failed attempt's task files and events moved to RUNDIR/attempts/N/.
`collect` then makes the record with record.py's make_record and seal: kind `launch`, each role's
`node`, the job's `slurm` facts, the failed attempts (`attempts`); `alphac verify-record` checks
it like any launch record.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from alphac.encode import Unencodable, json_text, shell_word
from alphac.files import LIMITS, read_json, read_regular, write_file
from alphac.refusals import Refusal
from alphac.tools.record import (events_key, is_count, key_id, make_record, new_record_dir, record_key,
                                 reserve_record, run_key, seal, space_needed, write_record)
from alphac.tools.launch import failed_roles, resume_point
from alphac.tools.supervise import RoleRun
from alphac.tools.table import artifact_key, load_build

NOT_CARRIED = "\x00-\x1f\x7f\ud800-\udfff"       # controls, DEL, lone surrogates (not UTF-8)
SAFE = re.compile(f"/[^'\"\\\\$`%\\s{NOT_CARRIED}]*\\Z")   # a path multi-prog and #SBATCH carry as is
OPTION = re.compile(f"[^\\s{NOT_CARRIED}]+\\Z")                # one #SBATCH option

SCRIPT = r"""#!/bin/bash
# alphac slurm: deployment @DEPLOYMENT@ of @LEARNER@, @TASKS@ roles (ranks 0-@LAST_COMBINING@ combine), @STEPS@ steps.
# Submit it with `sbatch @SCRIPT@`; then, on the submitting machine: alphac slurm-record @RUN@
# (@DEP@ and @RUN@ must be seen by every node at the same path.)
#SBATCH --job-name=alphac-@DEPLOYMENT@
#SBATCH --nodes=@NODES@
#SBATCH --ntasks=@TASKS@
#SBATCH --overcommit
#SBATCH --output=@RUN@/slurm-%j.out
@SBATCH@set -u
umask 077
RUN=@RUN@
DEP=@DEP@
TASKS=@TASKS@
COMBINING=@COMBINING@
PORT=${ALPHAC_PORT_BASE:-@PORT@}
[ -n "${SLURM_JOB_NODELIST:-}" ] || { echo "refused: launch-input (not in a Slurm job: submit this script with sbatch)" >&2; exit 103; }
if ! mkdir "$RUN/tasks" 2>/dev/null; then
  echo "refused: records-dir ($RUN/tasks exists: this script has run; write another with alphac slurm)" >&2
  exit 104
fi
echo "$SLURM_JOB_ID" > "$RUN/tasks/job"
echo "$PORT" > "$RUN/tasks/port"
if ! (cd "$DEP" && sha256sum --quiet --strict -c "$RUN/sha256") >&2; then
  echo "refused: artifact-hash (an executable in $DEP is not the one this script was written for)" >&2
  echo 100 > "$RUN/tasks/srun.exit"
  exit 100
fi
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
FIRST=${NODES[0]}
N=${#NODES[@]}
printf '%s\n' "${NODES[@]}" > "$RUN/tasks/nodes"
# rank r runs on line r: the combining roles on the first node, the others in turn on the rest
for ((r = 0; r < TASKS; r++)); do
  if ((r < COMBINING || N == 1)); then echo "$FIRST"; else echo "${NODES[1 + (r - COMBINING) % (N - 1)]}"; fi
done > "$RUN/tasks/hostfile"
cat > "$RUN/tasks/task.sh" <<'END'
#!/bin/bash
# RUN/tasks/task.sh RANK EXECUTABLE ARGS...: one role, its keys in its environment only
run=${0%/tasks/task.sh} rank=$1
shift
role= key= runkey=
while read -r r n k; do if [ "$r" = "$rank" ]; then role=$n key=$k; break; fi; done < "$run/keys"
read -r runkey < "$run/run-key"
t=$run/tasks/$rank
echo "${SLURMD_NODENAME:-?} $(uname -n) $(uname -s) $(uname -r) $(uname -m)" > "$t.node"
[ -n "$role" ] || { echo "refused: rank-out-of-range" > "$t.err"; echo 88 > "$t.exit"; exit 88; }
if [ -f "$run/tasks/resume" ]; then      # a restart: from the newest complete checkpoint
  read -r from left < "$run/tasks/resume"
  args=()
  while (($#)); do case $1 in --steps|--resume) shift 2;; *) args+=("$1"); shift;; esac; done
  set -- "${args[@]}" --steps "$left" --resume "$from"
fi
ALPHAC_EVENTS_KEY=$key ALPHAC_RUN_KEY=$runkey "$@" --events "$run/events/$role.log" < /dev/null > "$t.out" 2> "$t.err"
rc=$?
echo "$rc" > "$t.exit"
exit "$rc"
END
cat > "$RUN/tasks/multi-prog.conf" <<END
@MULTIPROG@END
export SLURM_HOSTFILE="$RUN/tasks/hostfile"
attempt=0                  # --restarts: a failed srun again from the newest complete checkpoint
while :; do
  srun --ntasks="$TASKS" --distribution=arbitrary --overcommit --multi-prog "$RUN/tasks/multi-prog.conf"
  rc=$?
  if [ "$rc" = 0 ] || [ "$attempt" -ge @RESTARTS@ ]; then break; fi
  attempt=$((attempt + 1))
  mkdir -p "$RUN/attempts/$attempt" && mv "$RUN/events" "$RUN/attempts/$attempt/" && mkdir "$RUN/events"
  mv "$RUN"/tasks/[0-9]*.* "$RUN/attempts/$attempt/"
  v=$(ls @CK@ 2>/dev/null | sed -n 's/^v\([1-9][0-9]\{0,14\}\)$/\1/p' | sort -rn | while read -r v; do
        if [ -f @CK@/v$v/MANIFEST ]; then echo "$v"; break; fi; done)
  if [ -n "$v" ]; then echo @CK@/v$v $((@END@ - v)) > "$RUN/tasks/resume"; else rm -f "$RUN/tasks/resume"; fi
  echo "$rc ${v:+v$v}" > "$RUN/attempts/$attempt/resumed"
  echo "alphac slurm: srun exited $rc; restart $attempt of @RESTARTS@ from ${v:+@CK@/v$v}" >&2
done
echo "$rc" > "$RUN/tasks/srun.exit"
echo "alphac slurm: srun exited $rc; the run record: alphac slurm-record $RUN" >&2
exit "$rc"
"""


def safe_path(p: str | Path, what: str) -> str:
    s = str(p) if "\0" in str(p) else str(Path(p).resolve())
    if not SAFE.match(s):
        raise Refusal("launch-input", f"{what} {s!r} holds a space, a quote, `$`, `%`, `\\`, a "
                                      "control character or bytes that are not UTF-8, which the "
                                      "batch script and srun's --multi-prog file cannot carry")
    return s


def rank_ranges(roles: list[dict]) -> list[tuple[int, int, dict]]:
    """(first, last, role) per run of consecutive ranks one executable file serves."""
    out: list[tuple[int, int, dict]] = []
    for i, r in enumerate(roles):
        if out and out[-1][2]["file"] == r["file"]:
            out[-1] = (out[-1][0], i, out[-1][2])
        else:
            out.append((i, i, r))
    return out


def check_layout(table: dict) -> int:
    """C, the number of combining roles, when they are ranks 0..C-1 and one ISA runs them all."""
    roles = table["roles"]
    if any(r.get("mesh") for r in roles):
        raise Refusal("launch-input", "a mesh's owners connect to each other's hosts, which one "
                                      "Slurm command line does not name: launch it with `alphac "
                                      "launch` or as a Kubernetes Job (`alphac k8s`)")
    if any(r.get("rank", i) != i for i, r in enumerate(roles)):
        raise Refusal("launch-input", "roles.json: a role's rank is not its position")
    c = sum(r["listens"] for r in roles)
    if not all(r["listens"] for r in roles[:c]) or roles[0]["role"] != table["root"]:
        raise Refusal("launch-input", "roles.json: the combining roles are not ranks 0..C-1, root first")
    isas = sorted({r["target"].partition("+")[0] for r in roles})
    if len(isas) != 1:
        raise Refusal("launch-input", f"the roles are built for {' and '.join(isas)}: one Slurm job "
                                      "runs one ISA (build the deployment for one target)")
    return c


def write_script(dep_dir: str | Path, out: str | Path | None = None, steps: int = 5,
                 nodes: int | None = None, port_base: int = 7000, deadline_ms: int = 30000,
                 sbatch: list[str] | None = None, records: str | Path = "runs",
                 key: str | Path | None = None, paths: dict[str, str | Path] | None = None,
                 counts: dict[str, int | None] | None = None, restarts: int = 0) -> tuple[Path, Path]:
    """Write the batch script for the built deployment `dep_dir`; (the script, the run directory).
    `sbatch`: extra #SBATCH options; `paths`: --data, --checkpoint or --resume for every role;
    `counts`: --checkpoint-every and --keep for every role (with --checkpoint); `restarts` R: a
    failed srun started again from the newest complete checkpoint, up to R times."""
    dep_dir = Path(dep_dir)
    table, manifest, mpath, hashes = load_build(dep_dir)
    combining = check_layout(table)
    roles = table["roles"]
    dep = safe_path(dep_dir, "the deployment")
    resume, start = resume_point((paths or {}).get("--resume"))     # a directory: its newest
    paths = {**(paths or {}), **({"--resume": resume} if resume else {})}
    extra = []
    for flag, p in paths.items():
        extra += [flag, safe_path(p, flag)]
    for flag, n in (counts or {}).items():
        if n and "--checkpoint" not in paths:
            raise Refusal("launch-input", f"{flag} needs --checkpoint DIR")
        extra += [flag, str(int(n))] if n else []
    if restarts and not (counts or {}).get("--checkpoint-every"):
        raise Refusal("launch-input", "--restarts needs --checkpoint DIR --checkpoint-every K")
    for o in sbatch or []:
        if not OPTION.match(o) or not o.startswith("-"):
            raise Refusal("launch-input", f"--sbatch {o!r} is not one sbatch option")
    records = Path(safe_path(records, "--records"))

    def multiprog(run: str) -> str:
        lines = []
        for lo, hi, r in rank_ranges(roles):
            argv = ["/bin/bash", f"{run}/tasks/task.sh", "%t", f"{dep}/{r['file']}",
                    "--rank", "%t", "--steps", str(steps), "--deadline-ms", str(deadline_ms)]
            argv += ["--listen", "0.0.0.0:$PORT+{}"] if r["listens"] else []
            argv += ["--parent", "$FIRST:$PORT+{}"] if r["parent"] else []
            lines.append(" ".join([str(lo) if lo == hi else f"{lo}-{hi}"] + argv + extra) + "\n")
            if len(lines[-1]) > 16000:           # srun reads lines of less than 16 KiB
                raise Refusal("launch-input", "the paths make a --multi-prog line longer than srun reads")
        return "".join(lines)
    multiprog(f"{records}/{table['deployment']}-99999")      # refused before anything is made
    script = Path(out).absolute() if out is not None else None
    try:                                  # every string of the script, as one bash word
        learner = shell_word(table["learner"], "roles.json's learner")
        script_word = shell_word(str(script), "-o") if script is not None else None
    except Unencodable as e:
        raise Refusal("launch-input", str(e))
    secret = record_key(key)
    nonce = os.urandom(16).hex()
    k = run_key(secret, nonce)
    rdir = new_record_dir(records, table["deployment"])
    reserve_record(rdir, *space_needed(table, steps, mpath))   # slurm-record's room, held now
    run = str(rdir)
    if script is None:
        script = rdir / "slurm.sh"
        script_word = shell_word(str(script))
    try:
        job = {"format": 1, "deployment": dep, "steps": start + steps, "deadline_ms": deadline_ms,
               "port_base": port_base, "nonce": nonce, "key_id": key_id(secret), "script": str(script)}
        write_file(rdir / "slurm.json", (json_text(job, indent=2) + "\n").encode(), 0o644)
        write_file(rdir / "keys", "".join(f"{i} {r['role']} {events_key(k, r['role']).hex()}\n"
                                          for i, r in enumerate(roles)).encode(), 0o600)
        write_file(rdir / "run-key", os.urandom(32).hex().encode() + b"\n", 0o600)   # getrandom(2)
        write_file(rdir / "sha256", "".join(f"{hashes[f]}  {f}\n" for f in dict.fromkeys(
            r["file"] for r in roles)).encode(), 0o644)
        fields = {"DEPLOYMENT": table["deployment"], "LEARNER": learner, "TASKS": str(len(roles)),
                  "LAST_COMBINING": str(combining - 1), "STEPS": str(steps), "SCRIPT": script_word,
                  "RUN": shell_word(run), "DEP": shell_word(dep), "COMBINING": str(combining),
                  "NODES": str(nodes or 1 + len(roles) - combining), "PORT": str(port_base),
                  "RESTARTS": str(restarts), "END": str(start + steps),
                  "CK": shell_word(safe_path(paths["--checkpoint"], "--checkpoint")) if restarts else "''",
                  "SBATCH": "".join(f"#SBATCH {o}\n" for o in sbatch or []), "MULTIPROG": multiprog(run)}
        text = re.sub(r"@([A-Z_]+)@", lambda m: fields[m[1]], SCRIPT)
        write_file(script, text.encode(), 0o700)
    except BaseException:                # nothing half-made is left behind
        shutil.rmtree(rdir, ignore_errors=True)
        raise
    return script, rdir


def read_text(path: Path) -> str | None:
    try:
        return read_regular(path, LIMITS["slurm-task"][0]).decode(errors="replace")
    except OSError:
        return None


def task_exit(text: str | None, stderr: str) -> int | None:
    """A task's exit as launch records it: the code, or minus the signal that ended it (bash
    says 128+N; a refusal's code above 128 comes with its `refused:` line)."""
    if text is None or not is_count(text.strip()):
        return None
    code = int(text)
    if code > 128 and "refused: " not in stderr and code - 128 in signal.valid_signals():
        return 128 - code
    return code


def task_runs(tasks: Path, table: dict, hashes: dict, dep_dir: Path, mpath: Path) -> list[RoleRun]:
    """Each task's RoleRun from the files task.sh left in `tasks` (RANK.out, .err, .exit)."""
    runs = []
    for i, r in enumerate(table["roles"]):
        out, err = read_text(tasks / f"{i}.out") or "", read_text(tasks / f"{i}.err") or ""
        code = task_exit(read_text(tasks / f"{i}.exit"), err)
        if code is None:
            err += "slurm: no exit code: the task did not start or was killed\n"
        runs.append(RoleRun(r["role"], r["target"], hashes[r["file"]],
                            artifact_key(dep_dir, mpath, r["file"]), [], exit=code, stdout=out, stderr=err))
    return runs


def attempts(rdir: Path, table: dict, hashes: dict, dep_dir: Path, mpath: Path, manifest: dict,
             steps: int) -> list[dict]:
    """A restarted job's failed attempts (RUNDIR/attempts/N: the tasks' files, events/, resumed),
    each as launch's record has it, with its loss curve under `loss`."""
    out = []
    for n in range(1, len(list((rdir / "attempts").glob("*/resumed"))) + 1):
        a = rdir / "attempts" / str(n)
        runs = task_runs(a, table, hashes, dep_dir, mpath)
        gone = make_record(table, runs, steps, manifest, mpath, a)
        for r in gone["roles"]:
            r["stream"]["file"] = f"attempts/{n}/events/{r['role']}.log"
        v = ((read_text(a / "resumed") or "").split() + [""])[1]
        out.append({"attempt": n, "failed": failed_roles(runs, []), "roles": gone["roles"], "faults": [],
                    "resumed_from": {"checkpoint": v or None, "step": int(v[1:]) if v else 0},
                    "membership": [r["role"] for r in table["roles"]], "loss": gone["loss"]})
    return out


def job_in_queue(script: str) -> tuple[str, str] | None:
    """(job id, state) of the Slurm job whose batch script is `script`, as squeue shows it (its
    command, relative to its working directory); None when it shows none or there is no squeue."""
    sq = shutil.which("squeue")
    try:
        out = subprocess.run([sq, "-h", "-o", "%i|%T|%Z|%o"], capture_output=True, text=True,
                             timeout=30).stdout if sq else ""
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        job, state, cwd, cmd = (line.split("|", 3) + ["", "", ""])[:4]
        if cmd and os.path.normpath(os.path.join(cwd, cmd)) == os.path.normpath(os.path.abspath(script)):
            return job, state
    return None


def await_job(rdir: Path, script: str, wait: int | None, say) -> None:
    """Return once the job of `rdir` is over (RUNDIR/tasks/srun.exit written) or not in Slurm's
    queue. A job still queued or running is refused `job-not-done` with how to wait; with `wait`
    (seconds), waited for, polled each second, and refused so only if it outlasts the wait."""
    end = None if wait is None else time.monotonic() + wait
    told = None
    while not (rdir / "tasks" / "srun.exit").exists():
        found = job_in_queue(script)
        if found is None:
            return
        if end is None or time.monotonic() > end:
            raise Refusal("job-not-done", f"job {found[0]} is {found[1].lower()}; "
                          f"`alphac slurm-record {rdir} --wait` waits for it (or squeue -j {found[0]})")
        if found != told:
            say(f"alphac slurm-record: job {found[0]} is {found[1].lower()}; waiting (at most {wait} s)")
            told = found
        time.sleep(1)


def collect(rundir: str | Path, key: str | Path | None = None, wait: int | None = None,
            say=lambda line: None) -> dict:
    """The sealed run record of the job that ran in `rundir` (also written there); a job still in
    Slurm's queue is waited for `wait` seconds (await_job), each change of its state `say`id."""
    rdir = Path(rundir)
    try:
        job = read_json(rdir / "slurm.json", "slurm-job")
        dep_dir, steps, nonce = Path(job["deployment"]), int(job["steps"]), str(job["nonce"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Refusal("launch-input", f"{rdir} is not a run directory of `alphac slurm` "
                                      f"(slurm.json: {getattr(e, 'strerror', None) or e})")
    tasks = rdir / "tasks"
    await_job(rdir, str(job.get("script")), wait, say)
    if not tasks.is_dir():
        raise Refusal("launch-input", f"the job has not run in {rdir} and is not in Slurm's queue: "
                                      f"submit {job.get('script')} with sbatch first")
    table, manifest, mpath, hashes = load_build(dep_dir)
    secret = record_key(key, create=False)
    if key_id(secret) != job.get("key_id"):
        raise Refusal("record-key", "the run was set up under another record key")
    runs = task_runs(tasks, table, hashes, dep_dir, mpath)
    nodes = [(read_text(tasks / f"{i}.node") or "").split() for i in range(len(table["roles"]))]
    record = make_record(table, runs, steps, manifest, mpath, rdir)
    failures = attempts(rdir, table, hashes, dep_dir, mpath, manifest, steps)
    if failures:                         # as launch writes them (no recover_ms: no common clock)
        record["failures"], curve = failures, [e for f in failures for e in f.pop("loss")]
        record["loss"] = sorted({e["step"]: e for e in curve + record["loss"]}.values(), key=lambda e: e["step"])
    for role, node in zip(record["roles"], nodes):
        role["node"] = node[0] if node else None
        role["hostname"] = node[1] if len(node) > 1 else None
    if len(nodes[0]) == 5:                # the root's node, as the nodes' uname says
        record["host"] = dict(zip(("system", "release", "machine"), nodes[0][2:]))
    srun, port = read_text(tasks / "srun.exit"), read_text(tasks / "port")
    record["slurm"] = {"job": (read_text(tasks / "job") or "").strip() or None,
                       "nodes": (read_text(tasks / "nodes") or "").split(),
                       "srun_exit": int(srun) if srun and is_count(srun.strip()) else None,
                       "port_base": int(port) if port and is_count(port.strip()) else None}
    record["path"] = str(write_record(rdir, seal(record, rdir, secret, nonce)))
    for f in ("keys", "run-key"):              # the job is over: its keys are not needed
        if srun is not None and (rdir / f).exists():
            (rdir / f).unlink()
    return record
