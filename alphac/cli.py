"""The `alphac` command: argument parsing and the exit-code conventions, nothing else.

Exit codes: the one table alphac.refusals.TOOL_EXITS (0 success; 1 an input's errors or a file
that cannot be read or written; 2 a wrong command line; 3 `verify` or `verify-record` found a
difference; 4 a defect of alphac's, `alphac: internal error: ...`), shown by `alphac --help`; a run
that refuses exits with its refusal's code (`alphac.refusals`, 64 and up) after printing
`refused: NAME` on stderr, exactly like the executables.
A bad input never produces a Python traceback.
"""
from __future__ import annotations

import argparse
import sys

from alphac import __version__
from alphac.diag import CODES, CompileError, explain
from alphac.refusals import Refusal, tool_exit

def _target(text: str) -> str:
    """An ISA or a level (x86_64-v3, x86_64-v4), or ISA+sm_NN for a GPU owner (checked further by the
    build: E0124)."""
    from alphac.targets import gpu_targets, names
    if text.partition("+")[0] not in names():
        known = ", ".join(names() + gpu_targets())
        raise argparse.ArgumentTypeError(f"unknown target {text!r} (targets: {known})")
    return text

HELP = """\
alphac compiles Alpha learners: a learner and its deployment become one static executable per
role (x86-64, AArch64), bit for bit equal to the reference interpreter.

commands:
  check FILE...           check learners; print diagnostics; exit 0 when clean
  run FILE [--steps N | --epochs E] [--deployment NAME]
                          run a learner in the reference interpreter (default 5 steps) and
                          print its state, one `NAME[K] HEX` line per coordinate; with a
                          deployment, every role's projected program, in turn
  plan FILE [--deployment NAME]
                          print how a deployment splits the learner: roles, holdings, the
                          combine tree, each role's messages per step, memory per role
  build FILE [-o OUT] [--target ISA] [--emit asm|rt|lir|ptx|cubin-info]
                          build a static executable (x86_64, x86_64-v3 with AVX2, x86_64-v4
                          with AVX-512, or aarch64)
                          that trains on all samples and prints its state; writes
                          OUT.manifest.json beside OUT; --emit FORM writes that form
                          instead, to OUT with -o, else to stdout
                          (ptx: one module holding every owner kernel, as ptxas assembles it)
  build FILE --target x86_64+sm_90 --gpu-host HOST [-o OUT] [--emit calls|...]
                          a GPU owner: the same learner with its owner compute on one NVIDIA
                          GPU, for the host described in HOST (docs/nvdrv.md)
  build-all [--out DIR]   build every artifact the project knows (every example, every target)
                          into DIR (default build/all) with DIR/MANIFEST.json
  verify MANIFEST         rebuild what a manifest lists and check every hash; exit 0 when all
                          match, 3 when something differs (one line each), 1 for a bad manifest
  launch DIR [--steps N]  run a built deployment (build/roles/NAME, from `make roles`): check
                          every executable's SHA-256, start the roles on loopback, print the
                          published state, write a run record (authenticated with the
                          record key, --record-key FILE)
  slurm DIR [--nodes N] [--steps N] [-o SCRIPT]
                          write a Slurm batch script that runs a built deployment, one task
                          per role (`sbatch SCRIPT`); `slurm-record RUNDIR` then seals its
                          run record, which verify-record checks
  k8s DIR [-o OUT] [--image IMAGE] [--name NAME] [--port P]
                          Kubernetes manifests for a built deployment: a headless Service and
                          an Indexed Job (a pod per rank), and a Containerfile for its image
  verify-record RECORD    check a run record: its MAC, its streams, what follows from them;
                          exit 0 when it is an authentic pass, 3 otherwise (one line a problem)
  plot RECORD [-o OUT.svg]
                          a run's loss curve: the mean loss of every step, as a chart in text
  ckpt show DIR           print a checkpoint's manifests and the state it holds
  eval FILE --checkpoint DIR [--data NAME=PATH.npy ...]
                          score a trained state on held-out data: the sample count, the mean
                          loss and, when predict gives class scores, the accuracy
  explain CODE            explain a diagnostic code such as E0050

run `alphac COMMAND --help` for a command's options.
"""


def _help() -> str:
    """HELP and the exit codes (alphac.refusals' table)."""
    from alphac.refusals import exit_table
    import textwrap
    return HELP + "\nexit codes:\n" + "".join(
        textwrap.fill(when, 96, initial_indent=f"  {code:<7} ", subsequent_indent=" " * 10) + "\n"
        for code, when in exit_table())


class UsageError(Exception):
    """A command line that parses but asks for what nothing can do: `alphac COMMAND: error:
    ...`, exit 2, as argparse's own usage errors."""


def _path(text: str) -> str:
    """A path on the command line: never empty (`''` would name the current directory, or `/`)."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"not a path: {text!r}")
    return text


def _data_arg(text: str) -> tuple[str, str]:
    name, eq, path = text.partition("=")
    if not eq or not name or not path:
        raise argparse.ArgumentTypeError(f"not NAME=PATH.npy: {text!r}")
    return name, _path(path)


def _steps(text: str) -> int:
    """A count for an executable's command line: what its runtime takes, a decimal of 1 to
    DECIMAL_DIGITS digits (no sign, space or `_`, which Python's int() would take)."""
    from alphac.refusals import DECIMAL_DIGITS
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}" +
                                         (" (must be 0 or more)" if text.startswith("-") else ""))
    if len(text) > DECIMAL_DIGITS:
        raise argparse.ArgumentTypeError(f"more than {DECIMAL_DIGITS} digits: {text!r} (the "
                                         "executables refuse it: `refused: usage`)")
    return int(text, 10)


def _positive(text: str) -> int:
    n = _steps(text)
    if n == 0:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def _port(text: str) -> int:
    n = _steps(text)
    if not 0 < n < 65536:
        raise argparse.ArgumentTypeError("not a port (1 to 65535)")
    return n


def _word(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"not one word: {text!r}")
    return text


FORMATS = ("hex", "decimal", "json")
FORMAT_HELP = ("how the state is printed: hex (the default, `NAME[K] HEX`, what scripts read), "
               "decimal (`NAME[K] VALUE`, the shortest decimal that reads back to the same bits) "
               "or json ({\"NAME\": value or [values]})")
KEY_HELP = ("the key records are authenticated with (default $ALPHAC_RECORD_KEY, else "
            "~/.config/alphac/record-key, made on first use)")


def _progress_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help=f"{what}, on standard error: auto (the default) when it is a terminal")


def _progress(args) -> bool:
    return args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())


def build_parser() -> argparse.ArgumentParser:
    from alphac.manifest import compiler_digest
    ap = argparse.ArgumentParser(prog="alphac", description=_help(), allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version",
                    version=f"alphac {__version__} (source sha256 {compiler_digest()[:16]})")
    ap.add_argument("--target", type=_target, default=None,
                    help="instruction set for build commands (default x86_64; x86_64-v3 adds AVX2, "
                         "x86_64-v4 AVX-512)")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("check", help="check learners and report diagnostics",
                       description="Parse and check each FILE; print every diagnostic. Exit 0 "
                                   "when all are clean, 1 otherwise.")
    p.add_argument("files", nargs="+", type=_path, metavar="FILE", help="learners (.alpha)")

    p = sub.add_parser("run", help="run a learner in the reference interpreter",
                       description="Run FILE in the reference interpreter under the numerical "
                                   "contract and print the state in the LEARNERS.md format.")
    p.add_argument("file", type=_path, metavar="FILE", help="the learner (.alpha)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=_steps, default=5, metavar="N", help="training steps (default 5)")
    g.add_argument("--epochs", type=_steps, metavar="E",
                   help="training epochs: E times the learner's batches per epoch (`batch N`)")
    p.add_argument("--deployment", metavar="NAME", help="execute this deployment's plan")
    p.add_argument("--format", choices=FORMATS, default="hex", help=FORMAT_HELP)

    p = sub.add_parser("plan", help="print a deployment's plan",
                       description="Check FILE's deployments and print the plan of one (or all).")
    p.add_argument("file", type=_path, metavar="FILE", help="the learner (.alpha)")
    p.add_argument("--deployment", metavar="NAME", help="the deployment (default: every one)")

    p = sub.add_parser("build", help="build a static executable",
                       description="Compile FILE into a static Linux executable for --target "
                                   "(x86_64, aarch64, x86_64-v3: AVX2's four lanes, or x86_64-v4: "
                                   "AVX-512's eight; the same bits, refused on a CPU without them): "
                                   "`OUT [--steps N]` trains on all samples "
                                   "and prints the state exactly as `alphac run` does. No "
                                   "assembler, linker or libc is used.")
    p.add_argument("file", type=_path, metavar="FILE", help="the learner (.alpha)")
    p.add_argument("-o", dest="output", type=_path, metavar="OUT", help="output path (default: the learner's name)")
    p.add_argument("--deployment", metavar="NAME",
                   help="build this deployment's role executables, roles.json and MANIFEST.json "
                        "into the directory -o names: what `alphac launch DIR` runs")
    p.add_argument("--fleet", action="store_true",
                   help="with --deployment: one executable per index node (its members chosen at "
                        "run time by --rank) rather than per role; always so beyond 256 roles")
    p.add_argument("--target", dest="sub_target", type=_target, default=None,
                   help="instruction set (default x86_64; x86_64-v3 for AVX2, x86_64-v4 for AVX-512), or x86_64+sm_86 / x86_64+sm_90 for a "
                        "GPU owner")
    p.add_argument("--emit", choices=("asm", "rt", "lir", "ptx", "cubin-info", "calls"), default=None,
                   help="instead of the executable, write to OUT (-o) or else stdout: the "
                        "disassembly annotated with source lines (asm; needs capstone: pip "
                        "install 'alphac[listing]'), the generated runtime-language code (rt), "
                        "the low-level IR (lir), every owner kernel in one PTX module that ptxas "
                        "assembles (ptx), what the cubins hold (cubin-info; needs ptxas), or a "
                        "GPU owner's driver conversation (calls)")
    p.add_argument("--eval-data", action="append", default=[], type=_data_arg, metavar="NAME=PATH.npy",
                   help="held-out data for `OUT --evaluate` (scores the state as `alphac eval` "
                        "does: samples, mean loss, correct predictions); repeat it per array")
    p.add_argument("--labels", metavar="NAME", help="with --eval-data: the data array of class "
                   "labels (default: the one the loss passes to onehot(NAME[i], ...))")
    p.add_argument("--sm", type=int, choices=(86, 90), default=90,
                   help="the GPU architecture for --emit ptx and cubin-info (default 90)")
    g = p.add_argument_group("GPU owners (docs/nvdrv.md)")
    g.add_argument("--gpu-host", type=_path, metavar="FILE", help="the host description: uuid, product, memory, "
                   "driver, minor")
    g.add_argument("--gpu-uuid", metavar="GPU-...", help="the card's UUID (overrides the file)")
    g.add_argument("--gpu-product", metavar="NAME", help='the product name, e.g. "NVIDIA H200"')
    g.add_argument("--gpu-memory", metavar="BYTES", help="the card's memory: bytes, or N KiB/MiB/GiB")
    g.add_argument("--driver", metavar="VERSION", help="the driver version, e.g. 580.159.04")
    g.add_argument("--gpu-minor", metavar="N", help="the card's device minor (/dev/nvidiaN; default 0)")
    g.add_argument("--gpu-topology", metavar="'G T S W'", help="GPCs, TPCs per GPC, SMs per TPC, warps "
                   "per SM (--probe-identity prints them; needed when a kernel spills to local memory)")
    g.add_argument("--ptxas", type=_path, metavar="PATH", help="the PTX assembler (default $ALPHAC_PTXAS or PATH)")

    p = sub.add_parser("build-all", help="build every artifact, with a manifest",
                       description="Build every artifact the project knows how to build (every "
                                   "examples/*.alpha for every target) into DIR, and write "
                                   "DIR/MANIFEST.json. Run from the project root.")
    p.add_argument("--out", type=_path, default="build/all", metavar="DIR", help="output folder (default build/all)")
    _progress_option(p, "each artifact as it is built")

    p = sub.add_parser("verify", help="rebuild what a manifest lists and check every hash",
                       description="Check the compiler, every input and every artifact a manifest "
                                   "lists: each file's SHA-256, and a rebuild from its recipe. "
                                   "Run from the directory the build ran in. Exit 0 when all "
                                   "match, 3 when something differs, 1 for a missing or malformed "
                                   "manifest.")
    p.add_argument("manifest", type=_path, metavar="MANIFEST", help="a MANIFEST.json or OUT.manifest.json")

    p = sub.add_parser("launch", help="run a built deployment on this machine",
                       description="Run the role executables of a built deployment (a directory "
                                   "made by `make roles`, e.g. build/roles/lsq_adam_star) on "
                                   "loopback, after checking each one's SHA-256 against the build "
                                   "manifest. Prints the published state; writes a run record.")
    p.add_argument("dir", type=_path, metavar="DIR", help="the built deployment")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=_steps, default=5, metavar="N",
                   help="training steps every role takes (default 5)")
    g.add_argument("--epochs", type=_steps, metavar="E",
                   help="training epochs: E times the learner's batches per epoch")
    p.add_argument("--format", choices=FORMATS, default="hex", help=FORMAT_HELP)
    p.add_argument("--deadline-ms", type=_steps, default=10000, metavar="MS",
                   help="each role's bound on any wait (default 10000)")
    p.add_argument("--records", type=_path, default="runs", metavar="DIR", help="where run records go (runs/)")
    p.add_argument("--record-key", type=_path, metavar="FILE", help=KEY_HELP)
    p.add_argument("--checkpoint", type=_path, metavar="DIR", help="publish a checkpoint at the end")
    p.add_argument("--resume", type=_path, metavar="DIR", help="start from the checkpoint in DIR")
    p.add_argument("--data", type=_path, metavar="DIR",
                   help="read the learner's loaded data from DIR (the load() paths, relative to "
                        "it) instead of where the build read them (docs/data.md)")
    p.add_argument("--compare", action="store_true",
                   help="also run the deployment in the reference interpreter and say whether the "
                        "bits are equal")
    p.add_argument("--gpu-wrapper", metavar="CMD",
                   help="start each GPU owner as CMD ROLE-ARGV... (split like a shell word list): "
                        "a sandbox, a CPU pinning tool, or the mock driver in the tests")
    _progress_option(p, "the root's steps, steps per second and time left")

    p = sub.add_parser("slurm", help="a built deployment as a Slurm batch script",
                       description="Check a built deployment's executables against its manifest, "
                                   "make its run directory (under --records) and write a batch "
                                   "script: `sbatch SCRIPT` runs one task per role with srun "
                                   "--multi-prog (--rank %t), the combining roles on the job's "
                                   "first node, the others over the rest, and keeps each role's "
                                   "events, exit code and output in the run directory; then "
                                   "`alphac slurm-record RUNDIR` writes the sealed run record. The "
                                   "deployment and --records must be on a file system every node "
                                   "sees at the same path (docs/distribution.md, Slurm).")
    p.add_argument("dir", type=_path, metavar="DIR", help="the built deployment")
    p.add_argument("-o", dest="output", type=_path, metavar="SCRIPT",
                   help="the batch script to write (default RUNDIR/slurm.sh)")
    p.add_argument("--steps", type=_steps, default=5, metavar="N", help="training steps every role takes (default 5)")
    p.add_argument("--nodes", type=_positive, metavar="N",
                   help="#SBATCH --nodes (default: one for the combining roles and one per other role)")
    p.add_argument("--port-base", type=_port, default=7000, metavar="P",
                   help="combining role R listens on port P+R (default 7000; $ALPHAC_PORT_BASE "
                        "overrides it when the job starts)")
    p.add_argument("--deadline-ms", type=_steps, default=30000, metavar="MS",
                   help="each role's bound on any wait (default 30000: tasks start at different times)")
    p.add_argument("--partition", type=_word, metavar="NAME", help="#SBATCH --partition")
    p.add_argument("--time", type=_word, metavar="LIMIT", help="#SBATCH --time, e.g. 10:00")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                   help="one more #SBATCH line, e.g. --sbatch=--account=proj (repeat it)")
    p.add_argument("--records", type=_path, default="runs", metavar="DIR", help="where run directories go (runs/)")
    p.add_argument("--record-key", type=_path, metavar="FILE", help=KEY_HELP)
    p.add_argument("--checkpoint", type=_path, metavar="DIR", help="publish a checkpoint at the end")
    p.add_argument("--resume", type=_path, metavar="DIR", help="start from the checkpoint in DIR")
    p.add_argument("--data", type=_path, metavar="DIR", help="read the learner's loaded data from DIR")

    p = sub.add_parser("slurm-record", help="seal the run record of an `alphac slurm` job",
                       description="After the job of `alphac slurm` ran: read its run directory "
                                   "(each role's events, exit code, output and node), check the "
                                   "executables against the manifest again, and write RUNDIR/"
                                   "record.json, sealed like `alphac launch`'s. Prints the "
                                   "published state; refused run-failed unless the run passed.")
    p.add_argument("rundir", type=_path, metavar="RUNDIR", help="the run directory `alphac slurm` made")
    p.add_argument("--format", choices=FORMATS, default="hex", help=FORMAT_HELP)
    p.add_argument("--record-key", type=_path, metavar="FILE", help=KEY_HELP)
    p = sub.add_parser("k8s", help="Kubernetes manifests for a built deployment",
                       description="Write, for the built deployment DIR (its executables' SHA-256 "
                                   "checked against the build manifest first), OUT/k8s.yaml: a "
                                   "headless Service and an Indexed Job with one pod per rank, "
                                   "each running only its rank's executable; OUT/Containerfile "
                                   "(FROM scratch) with the executables beside it. Then: `docker "
                                   "build -t IMAGE OUT`, push it, `kubectl apply -f OUT/k8s.yaml`; "
                                   "the root's log is the published state (docs/distribution.md).")
    p.add_argument("dir", type=_path, metavar="DIR", help="the built deployment")
    p.add_argument("-o", dest="output", type=_path, metavar="OUT",
                   help="the output directory (default DIR/k8s); an earlier output is replaced")
    p.add_argument("--image", metavar="IMAGE", help="the image the pods run (default "
                   "localhost/alphac/NAME:TAG, TAG from the executables' hashes)")
    p.add_argument("--name", metavar="NAME", help="the Job's and the Service's name; pod I is "
                   "NAME-I (default: the deployment's name, lower case, `_` as `-`)")
    p.add_argument("--namespace", metavar="NS", help="put both objects in NS (default: none, "
                   "kubectl's current namespace)")
    p.add_argument("--port", type=_steps, default=7000, metavar="P",
                   help="the port every listening role listens on, on its pod's IP (default 7000)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=_steps, default=5, metavar="N",
                   help="training steps every role takes (default 5)")
    g.add_argument("--epochs", type=_steps, metavar="E", help="training epochs instead of steps")
    p.add_argument("--deadline-ms", type=_steps, default=300000, metavar="MS",
                   help="each role's bound on any wait (default 300000: pods start when they are "
                        "scheduled and their image is pulled)")
    p.add_argument("--cluster-domain", default="cluster.local", metavar="DOMAIN",
                   help="the cluster's DNS domain, in the pods' names (default cluster.local)")
    p.add_argument("--active-deadline", type=_steps, metavar="S",
                   help="the Job's activeDeadlineSeconds: end every pod after S seconds (default: "
                        "no bound)")
    p.add_argument("--data", type=_path, metavar="DIR",
                   help="read the learner's loaded data from DIR (the load() paths, relative to "
                        "it) instead of where the build read them; it goes into the image")

    p = sub.add_parser("verify-record", help="check a run record",
                       description="Check a run record written by `alphac launch`: its MAC and "
                                   "every stream's seal under the record key, and what follows "
                                   "from the rest (passed, exits, published state, the build's "
                                   "hashes). Exit 0 when it is an authentic pass, 3 otherwise.")
    p.add_argument("record", type=_path, metavar="RECORD", help="runs/NAME-NNNN/record.json")
    p.add_argument("--record-key", type=_path, metavar="FILE", help=KEY_HELP)

    p = sub.add_parser("trace", help="a run record as a Chrome/Perfetto trace",
                       description="Write a run record's event streams (each role's connect, "
                                   "steps with their time in frames, finish) in the trace-event "
                                   "format: open it in ui.perfetto.dev or chrome://tracing.")
    p.add_argument("record", type=_path, metavar="RECORD", help="runs/NAME-NNNN/record.json")
    p.add_argument("-o", dest="output", type=_path, metavar="OUT", required=True,
                   help="the trace file to write (JSON)")

    p = sub.add_parser("plot", help="a run's loss curve",
                       description="Show the mean loss of every step of a run (its record's "
                                   "`loss` list, written by `alphac launch`) as a chart in text, "
                                   "with the first, last and lowest values; -o writes an SVG.")
    p.add_argument("record", type=_path, metavar="RECORD", help="runs/NAME-NNNN/record.json")
    p.add_argument("-o", dest="output", type=_path, metavar="OUT.svg", help="also write the curve as SVG")

    p = sub.add_parser("ckpt", help="inspect or export a checkpoint",
                       description="`alphac ckpt show DIR` prints the manifest tree of a checkpoint "
                                   "and the state its shards hold (checksums checked); `alphac ckpt "
                                   "export DIR -o FILE` writes the state as full named float64 "
                                   "tensors, a .safetensors or .npz file.")
    p.add_argument("action", choices=("show", "export"), help="show, or export")
    p.add_argument("dir", type=_path, metavar="DIR", help="the checkpoint directory")
    p.add_argument("--json", action="store_true", help="show: the manifests and state as JSON")
    p.add_argument("-o", dest="output", type=_path, metavar="FILE",
                   help="export: the file to write, ending in .safetensors or .npz")
    p.add_argument("--learner", type=_path, metavar="FILE",
                   help="export: the learner's source, for each state's shape (else 1-d)")

    p = sub.add_parser("eval", help="score a trained state on held-out data",
                       description="Score the state of a checkpoint (or of N steps of the "
                                   "reference interpreter) on held-out data, and print the sample "
                                   "count n, the mean loss (each sample's loss in binary64 by the "
                                   "reference interpreter, summed left to right from the first "
                                   "sample, divided by n) and, when `predict(i)` gives class "
                                   "scores and labels are known, the accuracy (correct / n; the "
                                   "predicted class is the first index of the largest score, "
                                   "compared by `>`, so a NaN never wins). A "
                                   "checkpoint that cannot be used is refused by the name its "
                                   "resume would give (docs/refusals.md).")
    p.add_argument("file", type=_path, metavar="FILE", help="the learner (.alpha)")
    p.add_argument("--checkpoint", type=_path, metavar="DIR",
                   help="the checkpoint to score (written by an executable's or `alphac launch`'s "
                        "--checkpoint; partitioned or not)")
    p.add_argument("--steps", type=_steps, metavar="N",
                   help="instead of a checkpoint: train N steps in the reference interpreter first")
    p.add_argument("--data", action="append", default=[], type=_data_arg, metavar="NAME=PATH.npy",
                   help="replace data array NAME by the held-out array in PATH.npy (rows of the "
                        "same shape; one sample count for every replaced array); repeat it per "
                        "array (default: the learner's own data)")
    p.add_argument("--labels", metavar="NAME",
                   help="the data array of class labels (default: the one the loss passes to "
                        "onehot(NAME[i], ...), if exactly one)")
    p.add_argument("--format", choices=("decimal", "json"), default="decimal",
                   help="decimal (the default: the shortest decimals that read back to the same "
                        "bits) or json (also the mean loss's bits as 16 hex digits)")

    p = sub.add_parser("explain", help="explain a diagnostic code",
                       description="Print the explanation of a diagnostic code (E0xxx, W0xxx).")
    p.add_argument("code", metavar="CODE", help="a code such as E0050")
    for p in sub.choices.values():
        p.allow_abbrev = False              # `--step 5` is not `--steps 5`
    return ap


def _report(err: CompileError) -> int:
    for d in err.diagnostics:
        print(d.render(), file=sys.stderr)
    n = sum(1 for d in err.diagnostics if d.severity == "error")
    print(f"alphac: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
    return 1


def _warn(compiled) -> None:
    for d in compiled.warnings:
        print(d.render(), file=sys.stderr)


def cmd_check(args) -> int:
    from alphac.driver import compile_deployments
    status = 0
    for path in args.files:
        try:
            _warn(compile_deployments(path)[0])
        except CompileError as e:
            status = _report(e)
    return status


def cmd_run(args) -> int:
    from alphac.ir.interp import format_state, run
    if args.deployment:
        plans = _plans(args)
        if isinstance(plans, int):
            return plans
        compiled, plan = plans
        from alphac.dist.execute import PlanError, run_plan
        lr = compiled.learner
        try:
            state = run_plan(lr, plan[args.deployment], _step_count(args, lr))
        except PlanError as e:           # the checked plan cannot run: a defect of alphac's
            print(f"alphac: internal error: deployment `{args.deployment}`: {e} (please report "
                  "this learner)", file=sys.stderr)
            return tool_exit("internal-error")
        sys.stdout.write(formatted(format_state(lr, state), args.format))
        return 0
    compiled = _compiled(args.file)
    if isinstance(compiled, int):
        return compiled
    lr = compiled.learner
    state = run(lr, _step_count(args, lr))
    sys.stdout.write(formatted(format_state(lr, state), args.format))
    return 0


def _compiled(path: str):
    """The compiled learner in `path`, its warnings shown; or the exit code after its errors."""
    from alphac.driver import compile_file
    try:
        compiled = compile_file(path)
    except CompileError as e:
        return _report(e)
    _warn(compiled)
    return compiled


def _step_count(args, lr) -> int:
    """--steps N, or --epochs E: E times the learner's batches per epoch."""
    return args.steps if getattr(args, "epochs", None) is None else \
        _epoch_steps(args.epochs, lr.batches)


def _epoch_steps(epochs: int, batches: int) -> int:
    """E epochs of B batches as a step count, refused as a usage error (exit 2) where it has
    more digits than an executable takes (what `--steps` refuses, _steps)."""
    from alphac.refusals import DECIMAL_DIGITS
    steps = epochs * batches
    if len(str(steps)) > DECIMAL_DIGITS:
        raise UsageError(f"--epochs {epochs}: {steps} steps ({batches} per epoch) has more than "
                         f"{DECIMAL_DIGITS} digits, which the executables refuse")
    return steps


def formatted(state_text: str, fmt: str) -> str:
    """The printed state (`NAME[K] HEX` lines, the machine contract) in another format."""
    import json
    import struct
    if fmt == "hex":
        return state_text
    values: dict[str, list] = {}
    lines = []
    for line in state_text.splitlines():
        label, bits = line.split(" ")
        v = struct.unpack("<d", int(bits, 16).to_bytes(8, "little"))[0]
        lines.append(f"{label} {v!r}")
        name, _, index = label.partition("[")
        values.setdefault(name, []).append(v if index else None)
        if not index:
            values[name] = v
    if fmt == "decimal":
        return "".join(l + "\n" for l in lines)
    return json.dumps(values) + "\n"


def _plans(args):
    """(compiled, {name: plan}) for FILE, or an exit code after reporting."""
    from alphac.diag import Diagnostic
    from alphac.driver import compile_deployments
    try:
        compiled, plans = compile_deployments(args.file)
    except CompileError as e:
        return _report(e)
    _warn(compiled)
    if args.deployment and args.deployment not in plans:
        known = ", ".join(sorted(plans)) or "none"
        return _report(CompileError([Diagnostic("E0100", None, f"no deployment `{args.deployment}` "
                                                f"in {args.file}", f"deployments: {known}")]))
    return compiled, plans


def cmd_plan(args) -> int:
    from alphac.dist.plan import render
    plans = _plans(args)
    if isinstance(plans, int):
        return plans
    _, plans = plans
    names = [args.deployment] if args.deployment else sorted(plans)
    sys.stdout.write("\n".join(render(plans[n]) for n in names))
    return 0


def cmd_build(args) -> int:
    from pathlib import Path
    from alphac import manifest
    from alphac.artifacts import gpu_recipe, learner_inputs, learner_recipe, ptxas_tool, write_file
    from alphac.build import BuildError, build_learner
    from alphac.driver import compile_file
    from alphac.tools.evaluate import evaluation_for
    from alphac.tools.listing import CapstoneMissing, disassemble, lir
    if args.deployment is not None:
        return _build_deployment(args)
    try:
        compiled = compile_file(args.file)
    except CompileError as e:
        return _report(e)
    _warn(compiled)
    if args.emit in ("ptx", "cubin-info"):
        text = _emit_gpu(compiled.learner, args)
        return text if isinstance(text, int) else _emitted(text, args.output)
    target = args.sub_target or args.target or "x86_64"
    gpu = None
    try:
        if "+" in target:
            gpu = _build_gpu(compiled, target, args)
            image = gpu.image
        else:
            if args.emit == "calls":
                raise BuildError("--emit calls needs a GPU target (x86_64+sm_90)")
            image = build_learner(compiled.learner, target,
                                  evaluation_for(compiled.learner, args.eval_data, args.labels,
                                                 args.file))
    except BuildError as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    except CompileError as e:
        return _report(e)
    if args.emit == "asm":
        try:
            return _emitted(disassemble(image, compiled.source.text.split("\n"),
                                        Path(args.file).name), args.output)
        except CapstoneMissing as e:
            print(f"alphac: error: {e}", file=sys.stderr)
            return 1
    if args.emit == "calls":
        return _emitted(gpu.conversation.listing(), args.output)
    if args.emit == "rt":
        return _emitted(image.rt_source, args.output)
    if args.emit == "lir":
        return _emitted(lir(image.program), args.output)
    out = Path(args.output or compiled.learner.name)
    side = out.with_name(out.name + manifest.SUFFIX) if out.name else out
    try:
        write_file(out, image.elf, 0o755)
        try:
            recipe, tools = learner_recipe(args.file, target, args.eval_data, args.labels), {}
            if gpu is not None:
                recipe, tools = gpu_recipe(args.file, target, gpu.conversation.host), ptxas_tool(gpu.ptxas)
            entry = manifest.artifact_entry(image.elf, recipe, learner_inputs(args.file, compiled)
                                            + [manifest.input_path(p) for _, p in args.eval_data])
            m = manifest.new({out.name: entry}, entry["inputs"], tools)
        except manifest.ManifestError as e:
            print(f"alphac: warning: no manifest written: {e}", file=sys.stderr)
            return 0
        manifest.write(side, m)
    except OSError as e:
        print(f"alphac: error: cannot write `{e.filename or out}`: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


def _build_deployment(args) -> int:
    from alphac.artifacts import RecipeError, build_deployment
    from alphac.build import BuildError
    from alphac.manifest import ManifestError
    if args.output is None or args.emit is not None or args.sub_target or args.target:
        print("alphac build: error: --deployment NAME builds the deployment's planned targets into "
              "the directory -o DIR; it takes no --emit or --target", file=sys.stderr)
        return 2
    try:
        m = build_deployment(args.file, args.deployment, args.output, args.fleet or None)
    except CompileError as e:
        return _report(e)
    except (BuildError, RecipeError, ManifestError) as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"alphac: error: cannot write `{e.filename}`: {e.strerror or e}", file=sys.stderr)
        return 1
    roles = len(m["artifacts"]) - 1
    fleet = any(e["recipe"].get("fleet") for e in m["artifacts"].values())
    what = "executable" if fleet else "role"
    print(f"alphac: {roles} {what}{'s' * (roles != 1)}, roles.json and {args.output}/MANIFEST.json; "
          f"run it with `alphac launch {args.output}`", file=sys.stderr)
    return 0


def _emitted(text: str, output: str | None) -> int:
    """An --emit form: to OUT when -o names one (instead of the executable), else to stdout."""
    from alphac.files import write_file
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        write_file(output, text.encode(), 0o644)
    except OSError as e:
        print(f"alphac: error: cannot write `{output}`: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


def _build_gpu(compiled, target: str, args):
    """A GPU owner for the host the options describe (CompileError E0120-E0124)."""
    from alphac.build import build_gpu_owner, load_gpu_host
    host = load_gpu_host(args.gpu_host, {"uuid": args.gpu_uuid, "product": args.gpu_product,
                                         "memory": args.gpu_memory, "driver": args.driver,
                                         "minor": args.gpu_minor, "topology": args.gpu_topology})
    return build_gpu_owner(compiled.learner, target, host, args.ptxas)


def cmd_build_all(args) -> int:
    from alphac.artifacts import RecipeError, build_all
    from alphac.build import BuildError
    from alphac.manifest import ManifestError
    from alphac.ptx.ptxas import PtxasFailed, PtxasMissing
    def show(k: int, n: int, path: str) -> None:
        print(f"\rbuild-all: [{k + 1}/{n}] {path}\x1b[K", end="", file=sys.stderr, flush=True)
    shown = _progress(args)
    try:
        m = build_all(args.out, show if shown else None)
        if shown:
            print(file=sys.stderr)
    except CompileError as e:
        return _report(e)
    except (BuildError, RecipeError, ManifestError, PtxasMissing, PtxasFailed) as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    print(f"alphac: {len(m['artifacts'])} artifacts and {args.out}/MANIFEST.json")
    return 0


def cmd_verify(args) -> int:
    from alphac.manifest import ManifestError
    from alphac.tools.verify import verify
    try:
        problems = verify(args.manifest)
    except ManifestError as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    for line in problems:
        print(f"verify: {line}", file=sys.stderr)
    if problems:
        return tool_exit("differs")
    print(f"verify: {args.manifest}: every hash matches")
    return 0


def cmd_launch(args) -> int:
    from pathlib import Path
    from alphac.tools.launch import launch
    from alphac.tools.table import load_table
    if args.epochs is not None:          # E epochs: E times the batches per epoch roles.json says
        batches = load_table(Path(args.dir))[0].get("batches", 1)
        args.steps = _epoch_steps(args.epochs, batches if type(batches) is int and batches > 0 else 1)
    record = launch(args.dir, steps=args.steps, deadline_ms=args.deadline_ms, records=args.records,
                    checkpoint=args.checkpoint, resume=args.resume, key=args.record_key,
                    progress=sys.stderr if _progress(args) else None, data=args.data,
                    gpu_wrapper=__import__("shlex").split(args.gpu_wrapper) if args.gpu_wrapper else None)
    _role_failures(record)
    if any((r["refused"] or "").startswith("data-") for r in record["roles"]):
        files = ", ".join(f["path"] for f in load_table(Path(args.dir))[0].get("data", []))
        print(f"alphac launch: the owners read their data at run time ({files}): launch from the "
              "directory the build ran in, or give --data DIR (the load() paths relative to it); "
              "data-shape and data-hash: the file is not the one built against (docs/data.md)",
              file=sys.stderr)
    sys.stdout.write(formatted(record["published"], args.format))
    if args.compare and record["published"]:
        from alphac.dist.execute import run_plan
        from alphac.driver import compile_deployments
        from alphac.ir.interp import format_state
        table = load_table(Path(args.dir))[0]
        compiled, plans = compile_deployments(table["source"])
        want = format_state(compiled.learner, run_plan(compiled.learner, plans[table["deployment"]], args.steps))
        same = want == record["published"]
        print(f"equals the reference interpreter: {'yes' if same else 'NO'}", file=sys.stderr)
        if not same:
            return 1
    print(f"run record: {record['path']} ({'pass' if record['passed'] else 'FAIL'})", file=sys.stderr)
    if not record["passed"]:
        raise Refusal("run-failed")
    return 0


def _role_failures(record: dict) -> None:
    for r in record["roles"]:
        if r["exit"] != 0:
            why = f"refused: {r['refused']}" if r["refused"] else f"exit {r['exit']}"
            print(f"{r['role']}: {why}", file=sys.stderr)


def cmd_slurm(args) -> int:
    from alphac.tools.slurm import write_script
    paths = {f"--{k}": getattr(args, k) for k in ("checkpoint", "resume", "data") if getattr(args, k)}
    sbatch = args.sbatch + [f"--{k}={getattr(args, k)}" for k in ("partition", "time") if getattr(args, k)]
    try:
        script, rdir = write_script(args.dir, args.output, args.steps, args.nodes, args.port_base,
                                    args.deadline_ms, sbatch, args.records, args.record_key, paths)
    except OSError as e:
        print(f"alphac: error: cannot write `{e.filename}`: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"alphac: {script}: submit it with `sbatch {script}`; when the job is over, "
          f"`alphac slurm-record {rdir}` writes its run record", file=sys.stderr)
    return 0


def cmd_slurm_record(args) -> int:
    from alphac.tools.slurm import collect
    record = collect(args.rundir, key=args.record_key)
    _role_failures(record)
    if record["slurm"]["srun_exit"] is None:
        print(f"alphac slurm-record: the job has not finished, or was killed (no "
              f"{args.rundir}/tasks/srun.exit)", file=sys.stderr)
    sys.stdout.write(formatted(record["published"], args.format))
    print(f"run record: {record['path']} ({'pass' if record['passed'] else 'FAIL'})", file=sys.stderr)
    if not record["passed"]:
        raise Refusal("run-failed")
    return 0


def cmd_k8s(args) -> int:
    from alphac.tools.k8s import K8sError, generate
    try:
        w = generate(args.dir, args.output, image=args.image, name=args.name,
                     namespace=args.namespace, port=args.port, steps=args.steps,
                     epochs=args.epochs, deadline_ms=args.deadline_ms,
                     cluster_domain=args.cluster_domain, active_deadline=args.active_deadline,
                     data=args.data)
    except K8sError as e:
        print(f"alphac k8s: error: {e}", file=sys.stderr)
        return 1
    out, name, ns = w["out"], w["name"], f" -n {w['namespace']}" if w["namespace"] else ""
    sel = f"batch.kubernetes.io/job-name={name},batch.kubernetes.io/job-completion-index={w['root']}"
    print(f"alphac: {out}/k8s.yaml (Service and Indexed Job {name}, {w['ranks']} pods, "
          f"linux/{w['arch']}) and {out}/Containerfile; then:\n"
          f"  docker build --platform linux/{w['arch']} -t {w['image']} {out}   (or podman build)\n"
          f"  docker push {w['image']}   (or kind load docker-image, minikube image load: the "
          "nodes must find it; --image names one in your registry)\n"
          f"  kubectl apply -f {out}/k8s.yaml{ns}\n"
          f"  kubectl wait --for=condition=complete job/{name}{ns} --timeout=1h\n"
          f"  kubectl logs -l {sel}{ns}   (the root: the published state)", file=sys.stderr)
    return 0


def cmd_verify_record(args) -> int:
    from alphac.tools.record import verify_record
    problems = verify_record(args.record, key=args.record_key)
    for line in problems:
        print(f"verify-record: {line}", file=sys.stderr)
    if not problems:
        print(f"verify-record: {args.record}: an authentic pass")
    return tool_exit("differs" if problems else "ok")


def cmd_ckpt(args) -> int:
    from alphac.tools.ckpt import CheckpointError, show, show_json
    from alphac.tools.export import export, learner_shapes
    if (args.action == "export") != (args.output is not None) or \
            (args.action != "export" and args.learner) or (args.action != "show" and args.json):
        print("alphac ckpt: error: `show DIR [--json]`, or `export DIR -o FILE [--learner FILE]`",
              file=sys.stderr)
        return 2
    try:
        if args.action == "show":
            sys.stdout.write(show_json(args.dir) if args.json else show(args.dir))
            return 0
        shapes = None
        if args.learner:
            from alphac.driver import compile_file
            try:
                shapes = learner_shapes(compile_file(args.learner).learner)
            except CompileError as e:
                return _report(e)
        try:
            done = export(args.dir, args.output, shapes)
        except CheckpointError as e:      # what resume and `alphac eval` refuse, by their name
            raise Refusal(e.refusal, str(e))
        print(f"alphac: {len(done)} tensors in {args.output}: " +
              ", ".join(f"{k} {list(v)}" for k, v in done.items()), file=sys.stderr)
    except (CheckpointError, ValueError) as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"alphac: error: {e.filename or args.dir}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


def cmd_eval(args) -> int:
    from alphac.ir.interp import run
    from alphac.tools.evaluate import (EvalError, checkpoint_state, evaluate_learner, held_out,
                                       labels_for, render)
    if (args.checkpoint is None) == (args.steps is None):
        print("alphac eval: error: give one of --checkpoint DIR (a trained state) and --steps N "
              "(train in the reference interpreter first)", file=sys.stderr)
        return 2
    compiled = _compiled(args.file)
    if isinstance(compiled, int):
        return compiled
    lr = compiled.learner
    try:
        test = held_out(lr, args.data)
        labels = labels_for(test, args.labels, args.file)
        if test.loss is None and labels is None:
            raise EvalError(f"nothing to score: {args.file} has no loss, and no predict with labels")
        if args.checkpoint is not None:
            state, step = checkpoint_state(lr, args.checkpoint)
        else:
            state, step = run(lr, args.steps), args.steps
    except EvalError as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    if labels is None and test.predict is not None and test.predict.shape:
        print("alphac: no accuracy: the loss passes no single data array to onehot; name the "
              "labels with --labels NAME", file=sys.stderr)
    sys.stdout.write(render(evaluate_learner(test, state, step, labels), args.format))
    return 0


def cmd_trace(args) -> int:
    from alphac.tools.trace import write_trace
    try:
        n = write_trace(args.record, args.output)
    except OSError as e:
        print(f"alphac: error: cannot write `{e.filename or args.output}`: {e.strerror or e}",
              file=sys.stderr)
        return 1
    print(f"alphac: {n} trace events in {args.output} (open it in ui.perfetto.dev)", file=sys.stderr)
    return 0


def cmd_plot(args) -> int:
    from alphac.tools.plot import plot
    try:
        sys.stdout.write(plot(args.record, args.output))
    except OSError as e:
        print(f"alphac: error: cannot write `{e.filename or args.output}`: {e.strerror or e}",
              file=sys.stderr)
        return 1
    return 0


def _emit_gpu(lr, args) -> str | int:
    """The text of --emit ptx (one module holding every kernel) or cubin-info, or an exit code."""
    from alphac.diag import BuildError
    from alphac.ptx.kernels import kernels, module
    try:
        kernels(lr, args.sm)           # BuildError for what the GPU kernels cannot do
    except BuildError as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    if args.emit == "ptx":
        return module(lr, args.sm)
    from alphac.ptx import build
    from alphac.ptx.cubin import cubin_info
    from alphac.ptx.ptxas import PtxasMissing
    try:
        built = build(lr, args.sm)
    except PtxasMissing as e:
        print(f"alphac: error: {e}", file=sys.stderr)
        return 1
    return "\n".join(cubin_info(b.cubin) for b in built)


def cmd_explain(args) -> int:
    text = explain(args.code)
    if text is None:
        print(f"alphac: no diagnostic code {args.code!r}; known codes: {', '.join(sorted(CODES))}",
              file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


COMMANDS = {"check": cmd_check, "run": cmd_run, "plan": cmd_plan, "build": cmd_build,
            "build-all": cmd_build_all, "verify": cmd_verify, "launch": cmd_launch,
            "slurm": cmd_slurm, "slurm-record": cmd_slurm_record,
            "verify-record": cmd_verify_record, "trace": cmd_trace, "plot": cmd_plot,
            "k8s": cmd_k8s, "verify-record": cmd_verify_record, "trace": cmd_trace, "plot": cmd_plot,
            "ckpt": cmd_ckpt,
            "eval": cmd_eval, "explain": cmd_explain}


def _suggest(word: str, known) -> str:
    import difflib
    near = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean `{near[0]}`?" if near else ""


def _parse(ap: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """argparse's parse, with a suggestion for a mistyped command, and a mistyped option reported
    by the command's own usage (with a suggestion) rather than the top level's."""
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is not None and first not in COMMANDS and argv.index(first) == 0:
        ap.error(f"unknown command `{first}`{_suggest(first, COMMANDS)} (commands: "
                 f"{', '.join(COMMANDS)})")
    args, extra = ap.parse_known_args(argv)
    if extra:
        sub = ap._subparsers._group_actions[0].choices.get(args.command, ap) if args.command else ap
        flags = [o for a in sub._actions for o in a.option_strings]
        bad = extra[0].split("=")[0]
        sub.error(f"unrecognized argument `{extra[0]}`" +
                  (_suggest(bad, flags) if bad.startswith("-") else ""))
    return args


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    try:
        args = _parse(ap, sys.argv[1:] if argv is None else list(argv))
    except SystemExit as e:            # --help, --version and usage errors
        return int(e.code or 0)
    if args.command is None:
        ap.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"alphac {args.command}: error: {e}", file=sys.stderr)
        return tool_exit("usage")
    except Refusal as r:
        # the interpreter prints exactly what an executable prints; the tools add the detail:
        # `refused: NAME (what was wrong, and what to do)`, one line
        print(f"refused: {r.name}" if args.command == "run" else str(r), file=sys.stderr)
        return r.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("alphac: interrupted", file=sys.stderr)
        return 130
    except OSError as e:               # the machine said no: a file, a directory, a process
        where = f" `{e.filename}`" if e.filename else ""
        print(f"alphac: error:{where} {e.strerror or e}", file=sys.stderr)
        return 1
    except Exception as e:             # a defect of alphac's, reported without a traceback
        print(f"alphac: internal error: {type(e).__name__}: {e} (please report this input)",
              file=sys.stderr)
        return tool_exit("internal-error")
