"""alphac.api, the Python API under the command line (docs/api.md): what it returns is what the
CLI prints, its errors are the named ones, and the CLI's one table of commands is what both the
parser and `alphac --help` read."""
import pytest

from conftest import alphac, example

from alphac import api
from alphac.diag import CompileError


def test_run_is_what_the_cli_prints():
    compiled = api.compile(example("lsq_adam"))
    code, out, _ = alphac("run", example("lsq_adam"), "--steps", "3", "--format", "decimal")
    assert code == 0 and api.formatted(api.run(compiled, 3), "decimal") == out


def test_a_deployment_the_file_lacks_is_E0100():
    with pytest.raises(CompileError) as e:
        api.deployments(example("lsq_adam"), "nope")
    assert [d.code for d in e.value.diagnostics if d.severity == "error"] == ["E0100"]


def test_epochs_past_what_an_executable_takes_are_a_usage_error():
    with pytest.raises(api.UsageError):
        api.epoch_steps(10 ** 19, 10)


def test_a_launch_publishes_the_reference_state_and_its_record_verifies(example_roles, tmp_path):
    dep = example_roles / "lsq_adam_star"
    record = api.launch(dep, steps=3, records=tmp_path / "runs", key=tmp_path / "key")
    assert record["passed"] and api.reference(dep, 3) == record["published"]
    assert api.verify_record(record["path"], key=tmp_path / "key") == []


def test_the_help_lists_every_command_the_parser_takes_in_the_tables_order():
    """One list: the help's commands and the parser's are both alphac.commands' table (the
    hand-written list beside the parser had drifted: trace and slurm-record were missing)."""
    from alphac.cli import COMMANDS, build_parser
    from alphac.commands import COMMANDS as TABLE
    ap = build_parser()
    parsed = list(ap._subparsers._group_actions[0].choices)
    helped = [line.split()[0] for line in ap.description.split("commands:\n")[1].split("\n\n")[0]
              .splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert parsed == list(dict.fromkeys(helped)) == [c.name for c in TABLE] == list(COMMANDS)


def test_each_help_line_is_what_its_command_parses():
    """A command's line in `alphac --help` is made from its options: what it shows outside
    brackets is exactly what the command requires (the hand-written lines had `eval FILE
    --checkpoint DIR`, an optional option shown as required), and `[OPTIONS]` appears exactly
    when the command has optional ones."""
    from alphac.cli import build_parser
    from alphac.commands import COMMANDS as TABLE
    ap = build_parser()
    lines = ap.description.split("commands:\n")[1].split("\n\n")[0]
    for c in TABLE:
        line = next(l for l in lines.splitlines() if l.split()[:1] == [c.name]).split("  ")[1].strip()
        sub = ap._subparsers._group_actions[0].choices[c.name]
        actions = [a for a in sub._actions if a.dest != "help"]
        shown = line.removesuffix(" [OPTIONS]").split()[1:]
        required = [w for a in actions if a.required for w in
                    ([a.option_strings[0], a.metavar] if a.option_strings else
                     ["|".join(a.choices) if a.choices else a.metavar + "..." * (a.nargs == "+")])]
        assert (shown, line.endswith("[OPTIONS]")) == (
            required, any(not a.required for a in actions)), c.name
