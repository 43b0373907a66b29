"""What alphac writes reads back as what it was given (issue 45): every string that reaches a
bash script, a YAML or a JSON document goes through one encoder per language (alphac.encode),
and arbitrary Unicode (controls, NUL, CR, NEL, U+2028/2029, quotes, `$`, backticks, lone
surrogates) either reads back exactly, parsed by real bash and PyYAML, or is refused by name.
The writers are tried the same way: `alphac slurm` (its script's comment, -o and --records
words) and `alphac k8s` (k8s.yaml), with a learner name in roles.json that the build manifest
was made to list (a rehashed MANIFEST.json)."""
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import alphac, example

from alphac.encode import Unencodable, json_text, shell_word, yaml_comment, yaml_scalar

yaml = pytest.importorskip("yaml")      # a test extra (pyproject.toml)

HOSTILE = list("\n\r\0\t\x0b\x0c\x1b\x7f\x85\u2028\u2029\ufeff'\"\\$`!*?~#;&|<>(){}% =x") + \
    ["\ud800", "\udcff", "\U0001f600", "\u00e9"]
PIECES = st.one_of(st.sampled_from(HOSTILE), st.characters(exclude_categories=()),
                   st.sampled_from(["$(id)", "`id`", "${X}", "\\x41", "\\u00e9", "'\\''"]))
TEXT = st.lists(PIECES, max_size=12).map("".join)
SURROGATE = re.compile("[\ud800-\udfff]")
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def bash_value(word: str) -> bytes:
    """What bash makes of `word` (run with no locale: the C locale)."""
    p = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, env={}, timeout=10)
    assert p.returncode == 0 and p.stderr == b"", (word, p.stderr)
    return p.stdout


@FAST
@given(TEXT)
def test_a_shell_word_reads_back_in_bash_or_is_refused_by_name(s):
    try:
        w = shell_word(s, "the name")
    except Unencodable as e:
        assert "\0" in s or SURROGATE.search(s)
        assert str(e).startswith("the name ") and ("NUL" in str(e) or "surrogate" in str(e))
        return
    assert all(0x20 <= ord(c) < 0x7F for c in w)          # one line: safe in a comment too
    assert bash_value(w) == s.encode()


@FAST
@given(TEXT)
def test_a_yaml_scalar_reads_back_in_pyyaml_or_is_refused_by_name(s):
    try:
        y = yaml_scalar(s, "the name")
    except Unencodable as e:
        assert SURROGATE.search(s) and "surrogate" in str(e)
        return
    assert all(0x20 <= ord(c) < 0x7F for c in y)
    assert yaml.safe_load(f"a: {y}\nb: [1]\n") == {"a": s, "b": [1]}
    comment = yaml_comment(f"x\n{s}\ny")
    assert yaml.safe_load(comment + "a: 1\n") == {"a": 1}    # the comment stays a comment
    assert comment.count("\n") == 3 + s.count("\n")     # a line per line of the text, no more


@FAST
@given(TEXT)
def test_json_text_is_ascii_and_reads_back(s):
    from alphac.files import loads
    j = json_text({"s": s, "k": [s]})
    assert j.isascii() and "\n" not in j
    assert json.loads(j) == loads(j) == {"s": s, "k": [s]}


def test_json_text_refuses_what_is_not_json():
    for v in (float("nan"), float("inf")):
        with pytest.raises(Unencodable, match="not JSON"):
            json_text({"x": v})


# -- the writers -----------------------------------------------------------------------------------
DEP = "lsq_adam_star"


@pytest.fixture(scope="module")
def star(tmp_path_factory):
    from backend import build_deployment
    d = tmp_path_factory.mktemp("encode")
    return build_deployment(example("lsq_adam"), DEP, d / "build")


def with_learner(star: Path, where: Path, learner: str) -> Path:
    """A copy of the deployment whose roles.json names `learner`, the manifest rehashed."""
    shutil.copytree(star.parent, where)
    dep = where / DEP
    t = json.loads((dep / "roles.json").read_text())
    t["learner"] = learner
    data = json.dumps(t).encode()                # ensure_ascii: any string, surrogates too
    (dep / "roles.json").write_bytes(data)
    m = json.loads((where / "MANIFEST.json").read_text())
    m["artifacts"][f"{DEP}/roles.json"].update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    (where / "MANIFEST.json").write_text(json.dumps(m))
    return dep


def fresh(tmp_path: Path) -> Path:
    n = 0
    while (tmp_path / f"t{n}").exists():
        n += 1
    (tmp_path / f"t{n}").mkdir()
    return tmp_path / f"t{n}"


def refused_by_name(err: str, what: str) -> bool:
    return err.startswith("refused: launch-input (") and what in err and err.count("\n") == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(learner=TEXT, name=TEXT.filter(lambda s: s and "/" not in s and s not in (".", "..")))
def test_the_slurm_script_carries_any_learner_and_path_or_refuses_it(star, tmp_path, learner, name):
    """The script's comment names the learner and -o as bash words: bash reads them back; the
    script parses (bash -n) and has the template's lines; RUN= and DEP= read back in bash."""
    t = fresh(tmp_path)
    dep = with_learner(star, t / "b", learner)
    if "\0" in name or SURROGATE.search(name):
        return                                    # no file name holds them
    out = t / name / "job.sh"
    code, _, err = alphac("slurm", dep, "-o", out, "--records", t / "runs")
    if "\0" in learner or SURROGATE.search(learner):
        assert code == 103 and refused_by_name(err, "roles.json's learner"), err
        return
    assert code == 0, err
    text = out.read_text()
    assert subprocess.run(["bash", "-n", out], capture_output=True, timeout=10).returncode == 0
    plain = with_learner(star, t / "p", "lsq_adam")
    assert alphac("slurm", plain, "--records", t / "plain")[0] == 0
    assert text.count("\n") == (t / "plain" / f"{DEP}-0001" / "slurm.sh").read_text().count("\n")
    lines = text.split("\n")
    head = f"# alphac slurm: deployment {DEP} of "
    tail = ", 5 roles (ranks 0-0 combine), 5 steps."
    assert lines[1].startswith(head) and lines[1].endswith(tail)
    assert bash_value(lines[1][len(head):-len(tail)]) == learner.encode()
    word = lines[2].removeprefix("# Submit it with `sbatch ").partition("`; then")[0]
    assert bash_value(word) == str(out.absolute()).encode()
    assigned = "\n".join(l for l in lines if l.startswith(("RUN=", "DEP="))) + \
        '\nprintf "%s\\n" "$RUN" "$DEP"'
    got = subprocess.run(["bash", "-c", assigned], capture_output=True, text=True, env={}, timeout=10)
    assert got.stdout == f"{(t / 'runs').resolve() / f'{DEP}-0001'}\n{dep.resolve()}\n"


@pytest.mark.parametrize("case", ["newline", "control", "surrogate", "dollar"])
def test_slurm_refuses_a_records_path_it_cannot_carry_by_name(star, tmp_path, case):
    bad = {"newline": "r\nid", "control": "r\x01", "surrogate": "r\udcff", "dollar": "r$(id)"}[case]
    code, _, err = alphac("slurm", star, "--records", tmp_path / bad)
    assert code == 103 and refused_by_name(err, "--records"), err
    if case != "dollar":                 # #SBATCH lines are read by sbatch, which expands no `$`
        code, _, err = alphac("slurm", star, "--records", tmp_path / "r", "--partition", f"a{bad}")
        assert (code == 2 and "--partition: not one word" in err) or \
            (code == 103 and refused_by_name(err, "--sbatch")), err
    if case == "surrogate":             # a script path that is not UTF-8: no bash word holds it
        code, _, err = alphac("slurm", star, "-o", tmp_path / f"s{bad}", "--records", tmp_path / "r")
        assert code == 103 and refused_by_name(err, "-o '"), err
    assert not (tmp_path / "r").exists()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(learner=TEXT)
def test_the_k8s_yaml_carries_any_learner_or_refuses_it(star, tmp_path, learner):
    """k8s.yaml parses (PyYAML) as exactly the two objects, the learner's annotation reads back."""
    t = fresh(tmp_path)
    dep = with_learner(star, t / "b", learner)
    code, _, err = alphac("k8s", dep, "-o", t / "k8s")
    if SURROGATE.search(learner):
        assert code == 103 and refused_by_name(err, "surrogate") and not (t / "k8s").exists(), err
        return
    assert code == 0, err
    text = (t / "k8s" / "k8s.yaml").read_text()
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    from alphac.tools.k8s import PREFIX
    assert [d["metadata"]["annotations"][f"{PREFIX}/learner"] for d in docs] == [learner, learner]
    head = text.split("\napiVersion:")[0].split("\n")
    assert all(l.startswith("#") for l in head) and len(head) == 3


YAML_WORDS = st.sampled_from(["null", "Null", "~", "", "y", "N", "yes", "Off", "true", "FALSE", "5",
                              "-1", "+2", "0x1F", "0o17", "1_000", "1e3", ".inf", "-.Inf", ".NaN",
                              "2001-12-14", "12:30:00", "- a", "a: b", "#c", "[x]", "{y}", "&a", "*a",
                              "!t", "%p", "@q", "|", ">", "? k", "<<", "=", "a #b", " lead", "trail "])
YTEXT = st.one_of(TEXT, YAML_WORDS, st.lists(st.one_of(YAML_WORDS, PIECES), max_size=4).map("".join))
DOC = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 64, 2 ** 64) | YTEXT,
                   lambda kids: st.lists(kids, max_size=4) | st.dictionaries(YTEXT, kids, max_size=4),
                   max_leaves=16)


@FAST
@given(st.lists(st.dictionaries(YTEXT, DOC, min_size=1, max_size=5), min_size=1, max_size=3), TEXT)
def test_the_k8s_yaml_writer_reads_back_as_any_objects_or_refuses_them(docs, comment):
    """alphac.tools.k8s.to_yaml, the writer of k8s.yaml (its objects: strings as keys and values,
    numbers, booleans, null, nested lists and maps, empty ones too): PyYAML reads exactly the
    objects back, under any comment, or it refuses by name (a lone surrogate: no UTF-8 holds it)."""
    from alphac.tools.k8s import to_yaml
    try:
        text = to_yaml(docs, comment)
    except Unencodable as e:
        assert SURROGATE.search(json.dumps(docs, ensure_ascii=False) + comment) and "surrogate" in str(e)
        return
    assert text.isascii() and list(yaml.safe_load_all(text)) == docs


def test_no_writer_lets_raw_unicode_into_json():
    """Every JSON alphac writes is ASCII (json_text, or json.dumps's default ensure_ascii)."""
    from conftest import ROOT
    raw = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "alphac").rglob("*.py"))
           for n, line in enumerate(p.read_text().splitlines(), 1) if "ensure_ascii=False" in line]
    assert raw == []
