"""The `alphac` command line as one table: every command, its summary in `alphac --help`, its
description and options, in the help's order. alphac/cli.py makes the parser and the help's
list from `COMMANDS` (one list, each line made from the command's options by `usage`: the help
cannot drift from what parses) and finds each
command's handler, `cmd_NAME`, by its name. The converters check each argument as it is parsed
(a bad one is a usage error naming it). Nothing here compiles, runs or writes.
"""
from __future__ import annotations

import argparse
from typing import NamedTuple

from alphac.nvdrv.host import CHOICES
from alphac.refusals import DECIMAL_DIGITS
from alphac.targets import LEVELS, gpu_sms, gpu_targets, names


def target(text: str) -> str:
    """An ISA or a level (x86_64-v3, x86_64-v4), or either +sm_NN for a GPU owner (checked further
    by the build: E0124)."""
    if text.partition("+")[0] not in names():
        raise argparse.ArgumentTypeError(f"unknown target {text!r} (targets: "
                                         f"{', '.join(names() + gpu_targets())})")
    return text


def path(text: str) -> str:
    """A path on the command line: never empty (`''` would name the current directory, or `/`)."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"not a path: {text!r}")
    return text


def data_arg(text: str) -> tuple[str, str]:
    name, eq, file = text.partition("=")
    if not eq or not name or not file:
        raise argparse.ArgumentTypeError(f"not NAME=PATH.npy: {text!r}")
    return name, path(file)


def count(text: str) -> int:
    """A count for an executable's command line: what its runtime takes, a decimal of 1 to
    DECIMAL_DIGITS digits (no sign, space or `_`, which Python's int() would take)."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}" +
                                         (" (must be 0 or more)" if text.startswith("-") else ""))
    if len(text) > DECIMAL_DIGITS:
        raise argparse.ArgumentTypeError(f"more than {DECIMAL_DIGITS} digits: {text!r} (the "
                                         "executables refuse it: `refused: usage`)")
    return int(text, 10)


def positive(text: str) -> int:
    n = count(text)
    if n == 0:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def port(text: str) -> int:
    n = count(text)
    if not 0 < n < 65536:
        raise argparse.ArgumentTypeError("not a port (1 to 65535)")
    return n


def word(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"not one word: {text!r}")
    return text


class Command(NamedTuple):
    name: str
    summary: str                            # what it does, in `alphac --help`
    description: str                        # `alphac NAME --help`
    options: tuple                          # A, OneOf and Group, in order


def usage(c: Command) -> str:
    """The command's line in `alphac --help`, made from its options (so it cannot claim an option
    it lacks, or call an optional one required): its positionals and required options, then
    `[OPTIONS]` when it has others."""
    words, optional = [c.name], False
    for item in c.options:
        for flags, how in item.options if isinstance(item, Group) else item if isinstance(item, OneOf) else [item]:
            if flags[0].startswith("-") and not how.get("required"):
                optional = True
                continue
            meta = (how.get("metavar") or "|".join(how.get("choices", ())) or flags[0]) + \
                ("..." if how.get("nargs") == "+" else "")
            words.append(f"{flags[0]} {meta}" if flags[0].startswith("-") else meta)
    return " ".join(words + ["[OPTIONS]"] * optional)


def A(*flags, **how) -> tuple:
    """An argument: argparse's add_argument(*flags, **how)."""
    return flags, how


class OneOf(list):
    """Arguments of which at most one may be given."""


class Group(NamedTuple):
    title: str                              # arguments under a title of their own in the help
    options: tuple


def progress(what: str) -> tuple:
    return A("--progress", choices=("auto", "always", "never"), default="auto",
             help=f"{what}, on standard error: auto (the default) when it is a terminal")


# the arguments of several commands
FILE = A("file", type=path, metavar="FILE", help="the learner (.alpha)")
DIR = A("dir", type=path, metavar="DIR", help="the built deployment")
RECORD = A("record", type=path, metavar="RECORD", help="runs/NAME-NNNN/record.json")
FORMAT = A("--format", choices=("hex", "decimal", "json"), default="hex",
           help="how the state is printed: hex (the default, `NAME[K] HEX`, what scripts read), "
                "decimal (`NAME[K] VALUE`, the shortest decimal that reads back to the same bits) "
                "or json ({\"NAME\": value or [values]})")
KEY = A("--record-key", type=path, metavar="FILE",
        help="the key records are authenticated with (default $ALPHAC_RECORD_KEY, else "
             "~/.config/alphac/record-key, made on first use)")
CHECKPOINT = A("--checkpoint", type=path, metavar="DIR", help="publish a checkpoint at the end")
RESUME = A("--resume", type=path, metavar="DIR", help="start from the checkpoint in DIR")
EVERY = A("--checkpoint-every", type=positive, metavar="K",
          help="with --checkpoint DIR: a checkpoint DIR/v<step> after every K-th step and the last")
KEEP = A("--keep", type=positive, metavar="N",
         help="with --checkpoint-every: keep the last N checkpoints (default 2)")
METRICS = A("--metrics", type=path, metavar="FILE",
            help="write each step's mean loss as a JSON line while the run goes, to FILE (`-`: "
                 "standard output): {\"step\": K, \"loss\": MEAN, \"bits\": HEX, \"n\": N}")
INTRO = """\
alphac compiles Alpha learners: a learner and its deployment become one static executable per
role (x86-64, AArch64), bit for bit equal to the reference interpreter.
"""
TOP = (A("--target", type=target, default=None,
         help="instruction set for build commands (default x86_64; x86_64-v3 adds AVX2, "
              "x86_64-v4 AVX-512)"),)

COMMANDS = (
    Command("check", "check learners and report diagnostics (exit 0 when clean)",
            "Parse and check each FILE; print every diagnostic. Exit 0 when all are clean, 1 "
            "otherwise.", (
        A("files", nargs="+", type=path, metavar="FILE", help="learners (.alpha)"),
    )),
    Command("run", "run a learner in the reference interpreter and print its state",
            "Run FILE in the reference interpreter under the numerical contract and print the "
            "state in the LEARNERS.md format.", (
        FILE,
        OneOf([
            A("--steps", type=count, default=5, metavar="N", help="training steps (default 5)"),
            A("--epochs", type=count, metavar="E",
              help="training epochs: E times the learner's batches per epoch (`batch N`)"),
        ]),
        A("--deployment", metavar="NAME", help="execute this deployment's plan"),
        FORMAT, METRICS,
    )),
    Command("plan", "print how a deployment splits the learner",
            "Check FILE's deployments and print the plan of one (or all).", (
        FILE,
        A("--deployment", metavar="NAME", help="the deployment (default: every one)"),
    )),
    Command("build", "build a static executable (or a GPU owner, or a deployment's roles)",
            "Compile FILE into a static Linux executable for --target (x86_64, aarch64, x86_64-v3: "
            "AVX2's four lanes, or x86_64-v4: AVX-512's eight; the same bits, refused on a CPU "
            "without them): `OUT [--steps N]` trains on all samples and prints the state exactly "
            "as `alphac run` does. No assembler, linker or libc is used.", (
        FILE,
        A("-o", dest="output", type=path, metavar="OUT", help="output path (default: the learner's name)"),
        A("--deployment", metavar="NAME",
          help="build this deployment's role executables, roles.json and MANIFEST.json "
               "into the directory -o names: what `alphac launch DIR` runs"),
        A("--fleet", action="store_true",
          help="with --deployment: one executable per index node (its members chosen at "
               "run time by --rank) rather than per role; always so beyond 256 roles"),
        A("--target", dest="sub_target", type=target, default=None,
          help="instruction set (default x86_64; " + ", ".join(f"{n} for {lv.extension}" for n, lv in LEVELS.items())
               + "), or for a GPU owner " + " / ".join(gpu_targets()) + " (its host part at that level)"),
        A("--emit", choices=("asm", "rt", "lir", "ptx", "cubin-info", "calls"), default=None,
          help="instead of the executable, write to OUT (-o) or else stdout: the disassembly "
               "annotated with source lines (asm; needs capstone: pip install 'alphac[listing]'), "
               "the generated runtime-language code (rt), the low-level IR (lir), every owner "
               "kernel in one PTX module that ptxas assembles (ptx), what the cubins hold "
               "(cubin-info; needs ptxas), or a GPU owner's driver conversation (calls)"),
        A("--eval-data", action="append", default=[], type=data_arg, metavar="NAME=PATH.npy",
          help="held-out data for `OUT --evaluate` (scores the state as `alphac eval` "
               "does: samples, mean loss, correct predictions); repeat it per array"),
        A("--labels", metavar="NAME", help="with --eval-data: the data array of class "
          "labels (default: the one the loss passes to onehot(NAME[i], ...))"),
        A("--sm", type=int, choices=gpu_sms(), default=90,
          help="the GPU architecture for --emit ptx and cubin-info (default 90)"),
        Group("GPU owners (docs/nvdrv.md)", (
            A("--gpu-host", type=path, metavar="FILE", help="the host description: uuid, product, memory, "
              "driver, minor"),
            A("--gpu-uuid", metavar="GPU-...", help="the card's UUID (overrides the file)"),
            A("--gpu-product", metavar="NAME", help='the product name, e.g. "NVIDIA H200"'),
            A("--gpu-memory", metavar="BYTES", help="the card's memory: bytes, or N KiB/MiB/GiB"),
            A("--driver", metavar="VERSION", help="the driver version, e.g. 580.159.04"),
            A("--gpu-minor", metavar="N", help="the card's device minor (/dev/nvidiaN; default 0)"),
            A("--gpu-topology", metavar="'G T S W'", help="GPCs, TPCs per GPC, SMs per TPC, warps "
              "per SM (--probe-identity prints them; needed when a kernel spills to local memory)"),
            *(A(f"--gpu-{key}", choices=values, help=what) for key, (values, what) in CHOICES.items()),
            A("--ptxas", type=path, metavar="PATH", help="the PTX assembler (default $ALPHAC_PTXAS or PATH)"),
        )),
    )),
    Command("build-all", "build every artifact, with a manifest",
            "Build every artifact the project knows how to build (every examples/*.alpha for every "
            "target, every deployment's roles as DIR/roles/DEPLOYMENT/ROLE, and with CUDA's ptxas "
            "the GPU code) into DIR, and write DIR/MANIFEST.json; what is up to date there is kept. "
            "Run from the project root.", (
        A("--out", type=path, default="build", metavar="DIR", help="output folder (default build)"),
        progress("each artifact as it is built"),
    )),
    Command("verify", "rebuild what a manifest lists and check every hash",
            "Check the compiler, every input and every artifact a manifest lists: each file's "
            "SHA-256, and a rebuild from its recipe. Run from the directory the build ran in. Exit "
            "0 when all match, 3 when something differs, 1 for a missing or malformed manifest.", (
        A("manifest", type=path, metavar="MANIFEST", help="a MANIFEST.json or OUT.manifest.json"),
    )),
    Command("launch", "run a built deployment on this machine, with a run record",
            "Run the role executables of a built deployment (a directory made by `make roles`, "
            "e.g. build/roles/lsq_adam_star) on loopback, after checking each one's SHA-256 "
            "against the build manifest. Prints the published state; writes a run record.", (
        DIR,
        OneOf([
            A("--steps", type=count, default=5, metavar="N",
              help="training steps every role takes (default 5)"),
            A("--epochs", type=count, metavar="E",
              help="training epochs: E times the learner's batches per epoch"),
        ]),
        FORMAT,
        A("--deadline-ms", type=count, default=10000, metavar="MS",
          help="each role's bound on any wait (default 10000)"),
        A("--records", type=path, default="runs", metavar="DIR", help="where run records go (runs/)"),
        KEY, CHECKPOINT, RESUME, EVERY, KEEP,
        A("--data", type=path, metavar="DIR",
          help="read the learner's loaded data from DIR (the load() paths, relative to "
               "it) instead of where the build read them (docs/data.md)"),
        A("--compare", action="store_true",
          help="also run the deployment in the reference interpreter and say whether the "
               "bits are equal"),
        A("--fail", action="append", default=[], metavar="ROLE@STEP[:HOW]",
          help="once ROLE has done step STEP, fail it: HOW is kill (default), stop, close (its "
               "sockets shut down) or corrupt (bytes written into its link); repeat it for more "
               "(docs/distribution.md, Failures)"),
        A("--restarts", type=count, default=0, metavar="R",
          help="restart a failed run from the newest complete checkpoint, up to R times, with the "
               "same roles (needs --checkpoint and --checkpoint-every)"),
        A("--shrink", action="store_true",
          help="with --restarts, under contract exact_sum only: go on without the failed owners, "
               "their samples given to their neighbours (the uninterrupted run's bits)"),
        METRICS,
        A("--gpu-wrapper", metavar="CMD",
          help="start each GPU owner as CMD ROLE-ARGV... (split like a shell word list): "
               "a sandbox, a CPU pinning tool, or the mock driver in the tests"),
        progress("the root's steps, steps per second and time left"),
    )),
    Command("slurm", "a built deployment as a Slurm batch script",
            "Check a built deployment's executables against its manifest, make its run directory "
            "(under --records) and write a batch script: `sbatch SCRIPT` runs one task per role "
            "with srun --multi-prog (--rank %t), the combining roles on the job's first node, the "
            "others over the rest, and keeps each role's events, exit code and output in the run "
            "directory; then `alphac slurm-record RUNDIR` writes the sealed run record. The "
            "deployment and --records must be on a file system every node sees at the same path "
            "(docs/distribution.md, Slurm).", (
        DIR,
        A("-o", dest="output", type=path, metavar="SCRIPT",
          help="the batch script to write (default RUNDIR/slurm.sh)"),
        A("--steps", type=count, default=5, metavar="N", help="training steps every role takes (default 5)"),
        A("--nodes", type=positive, metavar="N",
          help="#SBATCH --nodes (default: one for the combining roles and one per other role)"),
        A("--port-base", type=port, default=7000, metavar="P",
          help="combining role R listens on port P+R (default 7000; $ALPHAC_PORT_BASE "
               "overrides it when the job starts)"),
        A("--deadline-ms", type=count, default=30000, metavar="MS",
          help="each role's bound on any wait (default 30000: tasks start at different times)"),
        A("--partition", type=word, metavar="NAME", help="#SBATCH --partition"),
        A("--time", type=word, metavar="LIMIT", help="#SBATCH --time, e.g. 10:00"),
        A("--sbatch", action="append", default=[], metavar="OPTION",
          help="one more #SBATCH line, e.g. --sbatch=--account=proj (repeat it)"),
        A("--records", type=path, default="runs", metavar="DIR", help="where run directories go (runs/)"),
        KEY, CHECKPOINT, RESUME, EVERY, KEEP,
        A("--restarts", type=count, default=0, metavar="R",
          help="in the job: a failed srun started again from the newest complete checkpoint, up "
               "to R times (needs --checkpoint and --checkpoint-every)"),
        A("--data", type=path, metavar="DIR", help="read the learner's loaded data from DIR"),
    )),
    Command("slurm-record", "seal the run record of an `alphac slurm` job",
            "After the job of `alphac slurm` ran: read its run directory (each role's events, exit "
            "code, output and node), check the executables against the manifest again, and write "
            "RUNDIR/record.json, sealed like `alphac launch`'s (a job still in Slurm's queue: "
            "--wait). Prints the published state; "
            "refused run-failed unless the run passed.", (
        A("rundir", type=path, metavar="RUNDIR", help="the run directory `alphac slurm` made"),
        A("--wait", type=count, nargs="?", const=3600, metavar="S",
          help="wait for a job still queued or running to end, at most S seconds (default 3600); "
               "without it such a job is refused job-not-done"),
        FORMAT, KEY,
    )),
    Command("k8s", "Kubernetes manifests for a built deployment",
            "Write, for the built deployment DIR (its executables' SHA-256 checked against the "
            "build manifest first), OUT/k8s.yaml: a headless Service and an Indexed Job with one "
            "pod per rank, each running only its rank's executable; OUT/Containerfile (FROM "
            "scratch) with the executables beside it. Then: `docker build -t IMAGE OUT`, push it, "
            "`kubectl apply -f OUT/k8s.yaml`; the root's log is the published state "
            "(docs/distribution.md).", (
        DIR,
        A("-o", dest="output", type=path, metavar="OUT",
          help="the output directory (default DIR/k8s); an earlier output is replaced"),
        A("--image", metavar="IMAGE", help="the image the pods run (default "
          "localhost/alphac/NAME:TAG, TAG from the executables' hashes)"),
        A("--name", metavar="NAME", help="the Job's and the Service's name; pod I is "
          "NAME-I (default: the deployment's name, lower case, `_` as `-`)"),
        A("--namespace", metavar="NS", help="put both objects in NS (default: none, "
          "kubectl's current namespace)"),
        A("--port", type=count, default=7000, metavar="P",
          help="the port every listening role listens on, on its pod's IP (default 7000)"),
        OneOf([
            A("--steps", type=count, default=5, metavar="N",
              help="training steps every role takes (default 5)"),
            A("--epochs", type=count, metavar="E", help="training epochs instead of steps"),
        ]),
        A("--deadline-ms", type=count, default=300000, metavar="MS",
          help="each role's bound on any wait (default 300000: pods start when they are "
               "scheduled and their image is pulled)"),
        A("--cluster-domain", default="cluster.local", metavar="DOMAIN",
          help="the cluster's DNS domain, in the pods' names (default cluster.local)"),
        A("--active-deadline", type=count, default=86400, metavar="S",
          help="the Job's activeDeadlineSeconds: end every pod after S seconds (default 86400, a "
               "day; 0: no bound, and a Job whose names never resolve replaces pods forever)"),
        A("--ttl-after-finished", dest="ttl", type=count, default=86400, metavar="S",
          help="the Job's ttlSecondsAfterFinished: delete the Job, its pods and their logs (the "
               "root's is the published state) S seconds after it ends (default 86400, a day)"),
        A("--data", type=path, metavar="DIR",
          help="read the learner's loaded data from DIR (the load() paths, relative to "
               "it) instead of where the build read them; it goes into the image"),
        A("--checkpoint-claim", metavar="CLAIM",
          help="a ReadWriteMany PersistentVolumeClaim every pod mounts at /alphac-checkpoints "
               "and publishes its checkpoints into (--checkpoint there)"),
        EVERY, KEEP,
        A("--restarts", type=count, default=0, metavar="R",
          help="replace each index's failed pod up to R times, every pod then resuming from the "
               "claim's newest complete checkpoint (needs --checkpoint-claim and --checkpoint-every; "
               "backoffLimitPerIndex: Kubernetes 1.29 or later)"),
    )),
    Command("verify-record", "check a run record: authentic, and a pass?",
            "Check a run record written by `alphac launch`: its MAC and every stream's seal under "
            "the record key, and what follows from the rest (passed, exits, published state, the "
            "build's hashes). Exit 0 when it is an authentic pass, 3 otherwise. With --replay, "
            "RECORD is a GPU owner's events file from a `--shadow sampled` run: steps 1..STEP are "
            "recomputed by the reference interpreter and its chain rebuilt; exit 0 when every "
            "step's hash matches, 3 naming the first that does not (docs/gpu.md).", (
        RECORD, KEY,
        A("--replay", type=positive, metavar="STEP", help="replay a GPU owner's chain up to STEP"),
        A("--learner", type=path, metavar="FILE", help="with --replay: the learner's source (.alpha)"),
    )),
    Command("trace", "a run record as a Chrome/Perfetto trace",
            "Write a run record's event streams (each role's connect, steps with their time in "
            "frames, finish) in the trace-event format: open it in ui.perfetto.dev or "
            "chrome://tracing.", (
        RECORD,
        A("-o", dest="output", type=path, metavar="OUT", required=True,
          help="the trace file to write (JSON)"),
    )),
    Command("init", "write a small project to start from",
            "Write a project into DIR (made when absent): examples/mine.alpha, a line fitted by "
            "Adam with deployments mine_star, mine_tree and mine_mixed, and its training and "
            "held-out data as .npy files beside it. Every command of the README's \"Using it\" "
            "runs in it. Refuses a DIR that already holds one of these files.", (
        A("dir", type=path, metavar="DIR", help="the project folder"),
    )),
    Command("plot", "runs' loss curves",
            "Show the mean loss of every step of runs (their records' `loss` lists, written by "
            "`alphac launch`) as a chart in text, with each run's first, last and lowest values; "
            "-o writes an SVG figure (axes with ticks, step on x, loss on y, a legend). A record "
            "that continues another (the same learner, resumed at the other's last step) is drawn "
            "with it as one curve.", (
        A("records", nargs="+", type=path, metavar="RECORD", help="runs/NAME-NNNN/record.json"),
        A("-o", dest="output", type=path, metavar="OUT.svg", help="also write the curves as SVG"),
        A("--log", action="store_true", help="the loss on a logarithmic scale"),
    )),
    Command("export-metrics", "a run's losses as TensorBoard event files",
            "Write the mean loss of every step of a run (its record's `loss` list) as a "
            "TensorBoard event file, DIR/events.out.tfevents.0.alphac (tag `loss`, the exact "
            "binary64; written by alphac itself): `tensorboard --logdir DIR` shows it.", (
        RECORD,
        A("--tensorboard", type=path, metavar="DIR", required=True, help="the directory to write"),
    )),
    Command("ckpt", "inspect or export a checkpoint",
            "`alphac ckpt show DIR` prints the manifest tree of a checkpoint and the state its "
            "shards hold (checksums checked); `alphac ckpt export DIR -o FILE` writes the state as "
            "full named float64 tensors, a .safetensors or .npz file.", (
        A("action", choices=("show", "export"), help="show, or export"),
        A("dir", type=path, metavar="DIR", help="the checkpoint directory"),
        A("--json", action="store_true", help="show: the manifests and state as JSON"),
        A("-o", dest="output", type=path, metavar="FILE",
          help="export: the file to write, ending in .safetensors or .npz"),
        A("--learner", type=path, metavar="FILE",
          help="export: the learner's source, for each state's shape (else 1-d)"),
    )),
    Command("eval", "score a trained state on held-out data",
            "Score the state of a checkpoint (or of N steps of the reference interpreter) on "
            "held-out data, and print the sample count n, the mean loss (each sample's loss in "
            "binary64 by the reference interpreter, summed left to right from the first sample, "
            "divided by n) and, when `predict(i)` gives class scores and labels are known, the "
            "accuracy (correct / n; the predicted class is the first index of the largest score, "
            "compared by `>`, so a NaN never wins). A checkpoint that cannot be used is refused by "
            "the name its resume would give (docs/refusals.md).", (
        FILE,
        A("--checkpoint", type=path, metavar="DIR",
          help="the checkpoint to score (written by an executable's or `alphac launch`'s "
               "--checkpoint; partitioned or not)"),
        A("--steps", type=count, metavar="N",
          help="instead of a checkpoint: train N steps in the reference interpreter first"),
        A("--data", action="append", default=[], type=data_arg, metavar="NAME=PATH.npy",
          help="replace data array NAME by the held-out array in PATH.npy (rows of the "
               "same shape; one sample count for every replaced array); repeat it per "
               "array (default: the learner's own data)"),
        A("--labels", metavar="NAME",
          help="the data array of class labels (default: the one the loss passes to "
               "onehot(NAME[i], ...), if exactly one)"),
        A("--format", choices=("decimal", "json"), default="decimal",
          help="decimal (the default: the shortest decimals that read back to the same "
               "bits) or json (also the mean loss's bits as 16 hex digits)"),
    )),
    Command("explain", "explain a diagnostic code (E0050), a refusal (peer-lost) or an exit code",
            "Print what a diagnostic code (E0xxx, W0xxx), a run's refusal (`refused: NAME`: "
            "docs/refusals.md) or an exit code (an executable's or alphac's) means.", (
        A("code", metavar="CODE", help="a code such as E0050, a refusal such as nvidia-open, or "
          "an exit code such as 124"),
    )),
)
