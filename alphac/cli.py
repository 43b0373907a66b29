"""The `alphac` command: parsing, printing and the exit-code conventions over alphac.api.

Each command is a row of alphac.commands' table, from which `build_parser` and the help's list
of commands are made; `cmd_NAME` runs it through alphac.api and prints what comes back, and
`main` reports every failure, by its kind, in one place. Exit codes: the one table
alphac.refusals.TOOL_EXITS (shown by `alphac --help`); a run that refuses exits with its
refusal's code after printing `refused: NAME`, exactly like the executables. A bad input never
produces a Python traceback. Only what `--help` needs is imported at start.
"""
from __future__ import annotations

import argparse
import sys
import textwrap

from alphac import __version__, api
from alphac.commands import COMMANDS as TABLE, INTRO, TOP, Group, OneOf, usage
from alphac.nvdrv.host import CHOICES
from alphac.diag import CODES, BuildError, CompileError, explain
from alphac.refusals import DETAILED, REFUSALS, Refusal, exit_table, explain_run, tool_exit


def _help() -> str:
    """The introduction, every command's lines (alphac.commands) and the exit codes."""
    lines = [INTRO, "commands:"]
    for c in TABLE:
        u = usage(c)
        lines += [f"  {u:<30}  {c.summary}"] if len(u) <= 30 else [f"  {u}", " " * 34 + c.summary]
    lines.append("\nrun `alphac COMMAND --help` for a command's options.\n\nexit codes:")
    return "\n".join(lines) + "\n" + "".join(
        textwrap.fill(when, 96, initial_indent=f"  {code:<7} ", subsequent_indent=" " * 10) + "\n"
        for code, when in exit_table())


class _Version(argparse.Action):
    """--version, with the source digest computed only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        from alphac.manifest import compiler_digest
        print(f"alphac {__version__} (source sha256 {compiler_digest()[:16]})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="alphac", description=_help(), allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action=_Version, nargs=0, help="show the version and the source digest")
    for flags, how in TOP:
        ap.add_argument(*flags, **how)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for c in TABLE:
        p = sub.add_parser(c.name, description=c.description, allow_abbrev=False)  # `--step 5` is
        for item in c.options:                                                       # not `--steps 5`
            into, args = (p.add_argument_group(item.title), item.options) if isinstance(item, Group) \
                else (p.add_mutually_exclusive_group(), item) if isinstance(item, OneOf) else (p, [item])
            for flags, how in args:
                into.add_argument(*flags, **how)
    return ap


def _report(err: CompileError) -> int:
    for d in err.diagnostics:
        print(d.render(), file=sys.stderr)
    n = sum(1 for d in err.diagnostics if d.severity == "error")
    print(f"alphac: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
    return 1


def _warn(compiled):
    for d in compiled.warnings:
        print(d.render(), file=sys.stderr)
    return compiled


def _progress(args) -> bool:
    return args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())


def _emitted(text: str, output: str | None) -> int:
    """An --emit form: to OUT when -o names one (instead of the executable), else to stdout."""
    from alphac.files import write_file
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        write_file(output, text.encode(), 0o644)
    except OSError as e:
        raise OSError(e.errno, e.strerror, output) from None
    return 0


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
    if args.deployment:
        compiled, plans = api.deployments(args.file, args.deployment)
        plan = plans[args.deployment]
    else:
        compiled, plan = api.compile(args.file), None
    with _metrics(args) as metrics:
        state = api.run(_warn(compiled), args.steps, args.epochs, plan, args.deployment, metrics)
    sys.stdout.write(api.formatted(state, args.format))
    return 0


def _metrics(args):
    """--metrics FILE's stream (`-`: standard output), closed after; a null context without."""
    import contextlib
    if args.metrics is None or args.metrics == "-":
        return contextlib.nullcontext(None if args.metrics is None else sys.stdout)
    return open(args.metrics, "w", encoding="ascii")


def cmd_plan(args) -> int:
    compiled, plans = api.deployments(args.file, args.deployment)
    _warn(compiled)
    sys.stdout.write(api.plan_text(plans, args.deployment))
    return 0


def cmd_build(args) -> int:
    if args.deployment is not None:
        if args.output is None or args.emit is not None or args.sub_target or args.target:
            raise api.UsageError("--deployment NAME builds the deployment's planned targets into the "
                             "directory -o DIR; it takes no --emit or --target")
        m = api.build_deployment(args.file, args.deployment, args.output, args.fleet or None)
        roles = len(m["artifacts"]) - 1
        what = "executable" if any(e["recipe"].get("fleet") for e in m["artifacts"].values()) else "role"
        print(f"alphac: {roles} {what}{'s' * (roles != 1)}, roles.json and {args.output}/MANIFEST.json; "
              f"run it with `alphac launch {args.output}`", file=sys.stderr)
        return 0
    compiled = _warn(api.compile(args.file))
    if args.emit in ("ptx", "cubin-info"):
        return _emitted(api.emit_gpu(compiled, args.emit, args.sm), args.output)
    target = args.sub_target or args.target or "x86_64"
    if args.emit == "calls" and "+" not in target:
        raise BuildError("--emit calls needs a GPU target (x86_64+sm_90)")
    built = api.build(compiled, args.file, target, args.eval_data, args.labels, args.gpu_host,
                      {"uuid": args.gpu_uuid, "product": args.gpu_product, "memory": args.gpu_memory,
                       "driver": args.driver, "minor": args.gpu_minor, "topology": args.gpu_topology}
                      | {k: getattr(args, f"gpu_{k.replace('-', '_')}") for k in CHOICES},
                      args.ptxas)
    if args.emit is not None:
        return _emitted(api.emit(compiled, args.file, built, args.emit), args.output)
    from alphac.manifest import ManifestError
    try:
        api.write_executable(args.output or compiled.learner.name, built, compiled, args.file, target,
                             args.eval_data, args.labels)
    except ManifestError as e:
        print(f"alphac: warning: no manifest written: {e}", file=sys.stderr)
    return 0


def cmd_build_all(args) -> int:
    built, tty = [], sys.stderr.isatty()

    def show(k: int, n: int, path: str) -> None:        # off a terminal, a line per tenth
        built.append(path)
        if tty and _progress(args):
            print(f"\rbuild-all: [{k + 1}/{n}] {path}\x1b[K", end="", file=sys.stderr, flush=True)
        elif _progress(args) and (len(built) == 1 or 10 * k // n != 10 * (k - 1) // n):
            print(f"build-all: [{k + 1}/{n}] {path}", file=sys.stderr, flush=True)
    from alphac.artifacts import all_recipes, needs_ptxas
    from alphac.ptx.ptxas import PtxasMissing, find_ptxas
    gpu = [p for p, r in all_recipes() if needs_ptxas(r)]
    try:
        find_ptxas()
    except PtxasMissing as e:            # the CPU artifacts still; the GPU ones said
        if gpu:
            print(f"alphac: build-all: {e}: the {len(gpu)} GPU artifacts (cubins, GPU owners) are "
                  "not built", file=sys.stderr)
        gpu = []
    m = api.build_all(args.out, show, bool(gpu))
    if tty and _progress(args) and built:
        print(file=sys.stderr)
    print(f"alphac: {len(m['artifacts'])} artifacts ({len(built)} built, "
          f"{len(m['artifacts']) - len(built)} up to date) and {args.out}/MANIFEST.json")
    return 0


def cmd_verify(args) -> int:
    problems = api.verify(args.manifest)
    for line in problems:
        print(f"verify: {line}", file=sys.stderr)
    if problems:
        return tool_exit("differs")
    print(f"verify: {args.manifest}: every hash matches")
    return 0


def cmd_launch(args) -> int:
    import shlex
    with _metrics(args) as metrics:
        record = api.launch(args.dir, args.steps, args.epochs, deadline_ms=args.deadline_ms,
                            records=args.records, checkpoint=args.checkpoint, resume=args.resume,
                            key=args.record_key, progress=sys.stderr if _progress(args) else None,
                            data=args.data, gpu_wrapper=shlex.split(args.gpu_wrapper) if args.gpu_wrapper else None,
                            checkpoint_every=args.checkpoint_every, keep=args.keep, fail=args.fail,
                            restarts=args.restarts, shrink=args.shrink, metrics=metrics)
    _role_failures(record)
    _emulated(record)
    if any((r["refused"] or "").startswith("data-") for r in record["roles"]):
        files = ", ".join(f["path"] for f in api.table(args.dir).get("data", []))
        print(f"alphac launch: the owners read their data at run time ({files}): launch from the "
              "directory the build ran in, or give --data DIR (the load() paths relative to it); "
              "data-shape and data-hash: the file is not the one built against (docs/data.md)",
              file=sys.stderr)
    sys.stdout.write(api.formatted(record["published"], args.format))
    if args.compare and record["published"]:
        same = api.reference(args.dir, record["steps"]) == record["published"]
        print(f"equals the reference interpreter: {'yes' if same else 'NO'}", file=sys.stderr)
        if not same:
            return 1
    return _passed(record)


def _passed(record: dict) -> int:
    print(f"run record: {record['path']} ({'pass' if record['passed'] else 'FAIL'})", file=sys.stderr)
    if not record["passed"]:
        raise Refusal("run-failed")
    return 0


def _emulated(record: dict) -> None:
    """Which roles ran under an emulator here, and which (the launcher's choice: emulators)."""
    from pathlib import Path
    from alphac.tools.launch import emulators
    how = emulators({"roles": [{"target": r["isa"]} for r in record["roles"]]})
    under: dict[tuple[str, str], list[str]] = {}
    for r in record["roles"]:
        if how.get(r["isa"]):
            under.setdefault((r["isa"], Path(how[r["isa"]][0]).name), []).append(r["role"])
    for (isa, tool), roles in sorted(under.items()):
        print(f"launch: {', '.join(roles)} ran as {isa} executables under {tool} (this host is "
              f"{record['host']['machine']})", file=sys.stderr)


def _role_failures(record: dict) -> None:
    from alphac.tools.launch import failures
    for line in failures(record):
        print(line, file=sys.stderr)


def cmd_slurm(args) -> int:
    from alphac.tools.slurm import write_script
    paths = {f"--{k}": getattr(args, k) for k in ("checkpoint", "resume", "data") if getattr(args, k)}
    sbatch = args.sbatch + [f"--{k}={getattr(args, k)}" for k in ("partition", "time") if getattr(args, k)]
    script, rdir = write_script(args.dir, args.output, args.steps, args.nodes, args.port_base,
                                args.deadline_ms, sbatch, args.records, args.record_key, paths,
                                {"--checkpoint-every": args.checkpoint_every, "--keep": args.keep},
                                args.restarts)
    print(f"alphac: {script}: submit it with `sbatch {script}`; when the job is over, "
          f"`alphac slurm-record {rdir}` writes its run record", file=sys.stderr)
    return 0


def cmd_slurm_record(args) -> int:
    from alphac.tools.slurm import collect
    record = collect(args.rundir, key=args.record_key, wait=args.wait,
                     say=lambda line: print(line, file=sys.stderr))
    _role_failures(record)
    if record["slurm"]["srun_exit"] is None:
        print(f"alphac slurm-record: the job has not finished, or was killed (no "
              f"{args.rundir}/tasks/srun.exit)", file=sys.stderr)
    sys.stdout.write(api.formatted(record["published"], args.format))
    return _passed(record)


def cmd_k8s(args) -> int:
    from alphac.tools.k8s import generate
    w = generate(args.dir, args.output, image=args.image, name=args.name, namespace=args.namespace,
                 port=args.port, steps=args.steps, epochs=args.epochs, deadline_ms=args.deadline_ms,
                 cluster_domain=args.cluster_domain, active_deadline=args.active_deadline,
                 ttl=args.ttl, data=args.data, checkpoint_claim=args.checkpoint_claim,
                 checkpoint_every=args.checkpoint_every, keep=args.keep, restarts=args.restarts)
    out, name, ns = w["out"], w["name"], f" -n {w['namespace']}" if w["namespace"] else ""
    sel = f"batch.kubernetes.io/job-name={name},batch.kubernetes.io/job-completion-index={w['root']}"
    print(f"alphac: {out}/k8s.yaml (Service and Indexed Job {name}, {w['ranks']} pods, "
          f"linux/{w['arch']}) and {out}/Containerfile; then:\n"
          f"  docker build --platform linux/{w['arch']} -t {w['image']} {out}   (or podman build)\n"
          f"  docker push {w['image']}   (or kind load docker-image, minikube image load: the "
          "nodes must find it; --image names one in your registry)\n"
          f"  kubectl delete secret {name}-run-key --ignore-not-found{ns}; head -c 32 /dev/urandom | "
          f"od -An -vtx1 | tr -d ' \\n' | kubectl create secret generic {name}-run-key "
          f"--from-file=run-key=/dev/stdin{ns}   (a new run key: docs/distribution.md)\n"
          f"  kubectl apply -f {out}/k8s.yaml{ns}\n"
          f"  kubectl wait --for=condition=complete job/{name}{ns} --timeout=1h\n"
          f"  kubectl logs -l {sel}{ns}   (the root: the published state)", file=sys.stderr)
    return 0


def cmd_verify_record(args) -> int:
    if (args.replay is None) != (args.learner is None):
        raise api.UsageError("--replay STEP and --learner FILE go together")
    if args.replay is not None:
        wrong = api.replay_chain(_warn(api.compile(args.learner)).learner, args.record, args.replay)
        print(f"verify-record: {args.record}: " + (f"step {wrong}'s hash is not the interpreter's"
              if wrong else f"steps 1..{args.replay} are the interpreter's"), file=sys.stderr if wrong else sys.stdout)
        return tool_exit("differs" if wrong else "ok")
    problems = api.verify_record(args.record, key=args.record_key)
    for line in problems:
        print(f"verify-record: {line}", file=sys.stderr)
    if not problems:
        print(f"verify-record: {args.record}: an authentic pass")
    return tool_exit("differs" if problems else "ok")


def cmd_ckpt(args) -> int:
    if (args.action == "export") != (args.output is not None) or \
            (args.action != "export" and args.learner) or (args.action != "show" and args.json):
        raise api.UsageError("`show DIR [--json]`, or `export DIR -o FILE [--learner FILE]`")
    if args.action == "show":
        sys.stdout.write(api.checkpoint_show(args.dir, args.json))
        return 0
    done = api.checkpoint_export(args.dir, args.output, args.learner)
    print(f"alphac: {len(done)} tensors in {args.output}: " +
          ", ".join(f"{k} {list(v)}" for k, v in done.items()), file=sys.stderr)
    return 0


def cmd_eval(args) -> int:
    from alphac.tools.evaluate import render
    api.one_state(args.checkpoint, args.steps)
    compiled = _warn(api.compile(args.file))
    score, unnamed = api.evaluate(compiled, args.file, args.checkpoint, args.steps, args.data, args.labels)
    if unnamed:
        print("alphac: no accuracy: the loss passes no single data array to onehot; name the "
              "labels with --labels NAME", file=sys.stderr)
    sys.stdout.write(render(score, args.format))
    return 0


def cmd_trace(args) -> int:
    from alphac.tools.trace import write_trace
    n = write_trace(args.record, args.output)
    print(f"alphac: {n} trace events in {args.output} (open it in ui.perfetto.dev)", file=sys.stderr)
    return 0


def cmd_init(args) -> int:
    from alphac.tools.init import init
    written = init(args.dir)
    print(f"alphac: {len(written)} files in {args.dir}: {', '.join(written)}; next, from there: "
          f"alphac check {written[0]}", file=sys.stderr)
    return 0


def cmd_export_metrics(args) -> int:
    from alphac.tools.metrics import export_tensorboard
    path = export_tensorboard(args.record, args.tensorboard)
    print(f"alphac: {path} (tensorboard --logdir {args.tensorboard})", file=sys.stderr)
    return 0


def cmd_plot(args) -> int:
    from alphac.tools.plot import plot
    sys.stdout.write(plot(args.records, args.output, args.log))
    return 0


def cmd_explain(args) -> int:
    text = explain(args.code) or explain_run(args.code)
    if text is None:
        print(f"alphac: no diagnostic code, refusal or exit code {args.code!r}{_suggest(args.code, [*CODES, *REFUSALS])}"
              f" (diagnostic codes: {', '.join(sorted(CODES))}; refusals: docs/refusals.md)",
              file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


# every command of the table, by its handler's name: one missing fails here, at import
COMMANDS = {c.name: globals()["cmd_" + c.name.replace("-", "_")] for c in TABLE}
WRITES = {"build": "output", "slurm": "output", "trace": "output", "plot": "output", "init": "dir",
          "export-metrics": "tensorboard"}  # its OSError:
NAMED = {"k8s": "alphac k8s"}          # `cannot write` what; whose errors name their command


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


def _os_error(args, e: OSError) -> str:
    """The line for a file the machine would not read or write, as the command names it."""
    if args.command in WRITES:
        return f"alphac: error: cannot write `{e.filename or getattr(args, WRITES[args.command])}`: " \
               f"{e.strerror or e}"
    if args.command == "ckpt":
        return f"alphac: error: {e.filename or args.dir}: {e.strerror or e}"
    return f"alphac: error:{f' `{e.filename}`' if e.filename else ''} {e.strerror or e}"


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
    except CompileError as e:
        return _report(e)
    except api.UsageError as e:
        print(f"alphac {args.command}: error: {e}", file=sys.stderr)
        return tool_exit("usage")
    except Refusal as r:
        # the interpreter prints exactly what an executable prints; the tools add the detail:
        # `refused: NAME (what was wrong, and what to do)`, one line
        print(f"refused: {r.name}" if args.command == "run" and r.name not in DETAILED else str(r),
              file=sys.stderr)
        return r.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("alphac: interrupted", file=sys.stderr)
        return 130
    except OSError as e:               # the machine said no: a file, a directory, a process
        print(_os_error(args, e), file=sys.stderr)
        return 1
    except Exception as e:             # what is wrong with the input, by name; else a defect
        if isinstance(e, api.named_errors()):
            print(f"{NAMED.get(args.command, 'alphac')}: error: {e}", file=sys.stderr)
            return 1
        why = e if isinstance(e, api.Defect) else f"{type(e).__name__}: {e} (please report this input)"
        print(f"alphac: internal error: {why}", file=sys.stderr)
        return tool_exit("internal-error")
