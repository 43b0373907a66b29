"""Hostile input (issue 22, the compiler's side): output paths that are not files, inputs that
are not files or never end, the compiler's limits, `alphac ckpt show` on hostile records, and a
fuzzer of the whole command line that fails on any traceback or internal error."""
import os

import pytest

from conftest import ROOT, alphac, example


# -- output paths ------------------------------------------------------------------------------------
def _others(tmp_path):
    """Output targets that are neither absent nor regular files: each must be refused."""
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "outside")
    return {"dir": "a directory", "fifo": "a FIFO", "link": "a symbolic link"}


def test_build_refuses_an_output_that_is_not_a_regular_file(tmp_path):
    for name, kind in _others(tmp_path).items():
        rc, _, err = alphac("build", example("scalar_regression"), "-o", tmp_path / name)
        assert rc == 1 and err == f"alphac: error: cannot write `{tmp_path / name}`: it is {kind}, " \
                                  "not a regular file\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "link"]   # no DIR.tmp
    assert list((tmp_path / "dir").iterdir()) == [] and not (tmp_path / "outside").exists()


def test_build_never_follows_a_planted_link(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    secret = tmp_path / "secret"
    secret.write_text("keep")
    for planted in ("out.tmp", "out.manifest.json.tmp"):    # the old fixed temporary names
        (tmp_path / planted).symlink_to(secret)
    rc, _, err = alphac("build", "examples/scalar_regression.alpha", "-o", tmp_path / "out")
    assert rc == 0, err
    assert secret.read_text() == "keep" and (tmp_path / "out").read_bytes()[:4] == b"\x7fELF"
    assert not (tmp_path / "out").is_symlink() and (tmp_path / "out.manifest.json").is_file()
    rc, _, _ = alphac("build", "examples/scalar_regression.alpha", "-o", tmp_path / "out")
    assert rc == 0                                          # a regular file is replaced


@pytest.mark.parametrize("argv", [["build", "F", "-o", ""], ["check", ""], ["ckpt", "show", ""],
                                  ["launch", "D", "--checkpoint", ""], ["launch", "D", "--resume", ""],
                                  ["build-all", "--out", ""], ["verify", ""]])
def test_an_empty_path_is_a_usage_error(argv):
    rc, _, err = alphac(*argv)
    assert rc == 2 and "not a path: ''" in err, err


# -- the compiler's limits -----------------------------------------------------------------------------
def learner(tmp_path, body: str, name="t.alpha"):
    p = tmp_path / name
    p.write_text("learner t\n" + body)
    return p


def diagnostic(rc, err):
    """The one line `FILE:LINE:COL: error[CODE]: message` of a refused check."""
    assert rc == 1 and "Traceback" not in err and "internal error" not in err, err
    return err.splitlines()[0].split(": ", 1)


def test_number_literals_that_overflow_binary64(tmp_path):
    for n, lit in enumerate(["1" * 4400, "0x1p1024", "0x" + "f" * 300, "1e309"]):
        p = learner(tmp_path, f"state s: f64 = 1.0\nupdate {{\n  s = s * {lit}\n}}\n", f"{n}.alpha")
        where, what = diagnostic(*alphac("check", p)[::2])
        assert where == f"{p}:4:11" and what.startswith("error[E0004]: `") and "overflows" in what
    p = learner(tmp_path, "state s: f64[" + "0" * 5000 + "2] = 1.0\nupdate {\n  s = s\n}\n")
    assert alphac("check", p)[0] == 0                       # 5,000 leading zeros: the integer 2


STAR = ("deployment d {\n  roles coordinator, owner[2]\n  topology star(coordinator)\n"
        "  samples owner[0] = 0..1, owner[1] = 1..2\n  strategy zero2\n}\n")


def test_long_chains_compile(tmp_path):
    """Chains of operators and of lets are walked, not recursed into: no depth limit."""
    from alphac.ir.interp import format_state, run
    from alphac.driver import compile_file
    head = "data x = [1.0, 2.0]\nparam w: f64 = 0.5\n"
    for n in (328, 5000):
        p = learner(tmp_path, head + "loss(i) = " + " + ".join(["w * x[i]"] * n) +
                    "\nupdate {\n  w = w - 0.0001 * grad(w)\n}\n", f"sum{n}.alpha")
        rc, out, err = alphac("run", p, "--steps", 1)
        assert rc == 0 and out.startswith("w "), err
    assert alphac("check", learner(tmp_path, "const c = " + " + ".join(["1.0"] * 10000) +
                                   "\nstate s: f64 = c\nupdate {\n  s = s\n}\n"))[0] == 0
    rc, _, err = alphac("build", tmp_path / "sum328.alpha", "-o", tmp_path / "sum328")
    assert rc == 0, err
    # a partitioned update of 2,000 lets: the plan's per-coordinate evaluation and the lowering
    lets = "".join(f"  let b{k + 1} = b{k} * 0.5 + w\n" for k in range(2000))
    p = learner(tmp_path, "data x = [[1.0, 2.0], [0.5, 1.5]]\nparam w: f64[2] = 0.5\n"
                "loss(i) = dot(w, x[i])\nupdate {\n  let b0 = grad(w)\n" + lets +
                "  w = w - 0.1 * b2000\n}\n" + STAR, "lets.alpha")
    rc, out, err = alphac("run", p, "--deployment", "d", "--steps", 2)
    assert rc == 0 and out == format_state(compile_file(p).learner, run(compile_file(p).learner, 2)), err
    rc, _, err = alphac("build", p, "-o", tmp_path / "lets")
    assert rc == 0, err


def test_nesting_and_sizes_are_bounded_with_a_diagnostic(tmp_path):
    deep = STAR.replace("strategy zero2", "combine " + "(" * 3000 + "owner[0], owner[1]" + ")" * 3000)
    p = learner(tmp_path, "data x = [1.0, 2.0]\nparam w: f64 = 0.5\nloss(i) = w * x[i]\n"
                "update {\n  w = w - 0.1 * grad(w)\n}\n" + deep)
    where, what = diagnostic(*alphac("check", p)[::2])
    assert where == f"{p}:12:111" and what == "error[E0012]: combine tree nested more than 100 levels deep"
    for dims, count in (("100000000000", 100000000000), ("100000000", 100000000), ("1024, 1025", 1049600)):
        p = learner(tmp_path, f"state s: f64[{dims}] = 0.0\nupdate {{\n  s = s\n}}\n")
        where, what = diagnostic(*alphac("check", p)[::2])
        assert where == f"{p}:2:10" and what == f"error[E0044]: `s` makes the learner hold {count} " \
                                                "values; at most 1048576 (2^20) are compiled"
    p = learner(tmp_path, "state s: f64[1024, 1024] = 0.0\nstate t: f64 = 0.0\nupdate {\n  s = s\n}\n")
    where, what = diagnostic(*alphac("check", p)[::2])
    assert where == f"{p}:3:10" and "`t` makes the learner hold 1048577 values" in what


def test_inputs_must_be_bounded_regular_files(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big.alpha").write_bytes(b"learner t\n" + b"#" * (1 << 20))
    for path, why in ((tmp_path / "fifo", "it is a FIFO, not a regular file"),
                      ("/dev/zero", "it is a character device, not a regular file"),
                      (tmp_path, "it is a directory, not a regular file"),
                      (tmp_path / "big.alpha", "it is larger than 1048576 bytes")):
        rc, _, err = alphac("check", path)
        assert rc == 1 and err == f"alphac: error[E0000]: cannot read `{path}`: {why}\nalphac: 1 error\n"
    p = learner(tmp_path, 'data x = load("fifo")\nstate s: f64 = 0.0\nupdate {\n  s = s\n}\n')
    where, what = diagnostic(*alphac("check", p)[::2])
    assert where == f"{p}:2:15" and what == "error[E0060]: cannot read `fifo`: it is a FIFO, not a regular file"


# -- alphac ckpt show --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from backend import build_learner_exe, run_exe
    d = tmp_path_factory.mktemp("ckpt")
    exe = build_learner_exe("lsq_momentum", "x86_64", d)
    assert run_exe(exe, "--steps", 2, "--checkpoint", d / "ck").returncode == 0
    return d / "ck"


def _with_first_record(ck, tmp_path, **fields):
    """A copy of the checkpoint whose first record has other fields, every checksum repaired."""
    import hashlib
    import shutil
    from alphac.formats import CKPT_HEADER, CKPT_RECORD
    out = tmp_path / "ck"
    shutil.copytree(ck, out)
    data = bytearray((out / "MANIFEST").read_bytes())
    for name, value in fields.items():
        f = CKPT_RECORD.field(name)
        at = CKPT_HEADER.size + f.offset
        data[at:at + f.size] = value.ljust(f.size, b"\0")
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    (out / "MANIFEST").write_bytes(bytes(data))
    return out


def test_ckpt_show_stays_inside_the_checkpoint(checkpoint, tmp_path):
    import hashlib
    assert alphac("ckpt", "show", checkpoint)[0] == 0
    outside = tmp_path / "outside.npy"
    outside.write_bytes(b"secret")
    sha = hashlib.sha256(b"secret").digest()
    (checkpoint.parent / "inner").mkdir(exist_ok=True)
    for rel in (b"../../etc/hostname", b"/etc/hostname", b"../outside.npy", b"link.npy"):
        ck = _with_first_record(checkpoint, tmp_path / rel.hex(), path=rel, sha256=sha)
        (ck / "link.npy").symlink_to(outside)
        rc, out, err = alphac("ckpt", "show", ck)
        assert (rc, out) == (1, "") and err == f"alphac: error: {ck}: record path {rel.decode()!r} " \
                                               "is not a path inside the checkpoint\n", err


def test_ckpt_show_never_raises_on_names_that_are_not_utf8(checkpoint, tmp_path):
    ck = _with_first_record(checkpoint, tmp_path / "path", path=b"\xff\xfe.npy")
    rc, out, err = alphac("ckpt", "show", ck)
    assert (rc, out) == (1, "") and err == f"alphac: error: {ck / 'MANIFEST'}: record 0: its path is not UTF-8\n"
    ck = _with_first_record(checkpoint, tmp_path / "state", state=b"w\xff")
    rc, out, err = alphac("ckpt", "show", ck)
    assert rc == 0 and "  shard w\\xff[0..5) by owner 0" in out, err


# -- the command line, fuzzed --------------------------------------------------------------------------
FUZZ_RUNS = int(os.environ.get("ALPHAC_CLI_FUZZ", "100"))    # `make cli-fuzz CLI_COUNT=N` for more


@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    """What a diverging learner (tests/test_hostile_runs.py) leaves: its source, its built
    deployment, the records of a passing run (loss inf) and of a failed one (loss nan, state
    non-finite), and its checkpoint; the fuzzer copies them and hands them to every command."""
    import contextlib
    from test_hostile_runs import DIVERGE
    d = tmp_path_factory.mktemp("diverged")
    (d / "diverge.alpha").write_text(DIVERGE)
    with contextlib.chdir(d):
        assert alphac("build", "diverge.alpha", "--deployment", "diverge_star", "-o", "dep")[0] == 0
        assert alphac("launch", "dep", "--steps", 60, "--records", "runs", "--checkpoint", "ck")[0] == 0
        assert alphac("launch", "dep", "--steps", 120, "--records", "runs")[0] == 102
    return d


def hostile_files(d, diverged=None):
    """Inputs of every kind a user or an attacker can hand the CLI: (paths, the good ones of
    each kind, which a command may accept; every other must be refused)."""
    import json
    import random
    import shutil
    rng = random.Random(22)
    good = example("lsq_momentum").read_bytes()
    files = {"good.alpha": good, "empty": b"", "binary": bytes(rng.randrange(256) for _ in range(300)),
             "latin1.alpha": good.replace(b"momentum", b"m\xf6mentum"),
             "nested.alpha": b"learner t\nconst c = " + b"(" * 500 + b"1" + b")" * 500 + b"\n",
             "huge.alpha": b"learner t\nstate s: f64[99999999999999999999] = 0.0\nupdate {\n  s = s\n}\n",
             "manifest.json": b'{"format": 1, "artifacts": {"../x": {}}}',
             "MANIFEST": b"ALPHACK" + bytes(rng.randrange(256) for _ in range(200)),
             "deep.json": b"[" * 100000 + b"]" * 100000,
             "deep-record.json": b'{"format": 2, "kind": "launch", "roles": ' + b"[" * 5000 + b"]" * 5000 + b"}",
             "not-utf8.json": b'{"format": 2, "kind": "launch\xff"}',
             "nan.json": b'{"format": 2, "kind": "launch", "roles": [], "published": "", "passed": NaN}'}
    for k in range(12):                                    # the example, mutated byte by byte
        b = bytearray(good)
        for _ in range(rng.randrange(1, 8)):
            at = rng.randrange(len(b))
            b[at:at + rng.randrange(4)] = bytes(rng.randrange(256) for _ in range(rng.randrange(4)))
        files[f"mut{k}.alpha"] = bytes(b)
    for name, data in files.items():
        (d / name).write_bytes(data)
    with open(d / "sparse", "wb") as fh:                    # 100 MiB of holes: past every limit
        fh.truncate(100 << 20)
    os.mkfifo(d / "fifo")
    (d / "dir").mkdir()
    (d / "dir" / "MANIFEST").write_bytes(files["MANIFEST"])
    (d / "loop").symlink_to(d / "loop")
    (d / "dangling").symlink_to(d / "nowhere")
    oks = {}
    if diverged is not None:                                 # a diverging learner's own files
        shutil.copy(diverged / "diverge.alpha", d)
        for sub in ("dep", "runs", "ck"):
            shutil.copytree(diverged / sub, d / sub, symlinks=True)
        passed, failed = "runs/diverge_star-0001/record.json", "runs/diverge_star-0002/record.json"
        rec = json.loads((d / passed).read_text())
        forged = d / "runs" / "forged"
        shutil.copytree(d / "runs/diverge_star-0001", forged)
        rec["passed"], rec["published"] = True, rec["published"] + "b 0000000000000000\n"
        (forged / "record.json").write_text(json.dumps(rec))          # its MAC no longer matches
        (d / "truncated.json").write_bytes((d / failed).read_bytes()[:5000])
        shutil.copytree(d / "ck", d / "ck-nan")
        from test_hostile_runs import _first_shard_value
        _first_shard_value(d / "ck-nan", float("nan"))
        records = [passed, failed, "runs/forged/record.json"]
        oks = {"verify-record": {passed}, "plot": set(records), "trace": set(records),
               "ckpt show": {"ck", "ck-nan"}, "ckpt export": {"ck"}, "launch": {"dep"},
               "k8s": {"dep"}, "slurm": {"dep"}}
        extra = ["diverge.alpha", "truncated.json", "dep", "ck", "ck-nan", "runs"] + records
    else:
        extra = []
    paths = sorted(files) + ["fifo", "dir", "loop", "dangling", "nowhere", "sparse", "/dev/zero",
                             "/dev/null", ".", "-", "\x00", "\udcff"] + extra
    return paths, oks


def random_argv(rng, paths):
    """(argv, primary): a random command line and the path it is about (None when random words
    were put in anywhere, which can make any path the primary one)."""
    p = lambda: rng.choice(paths)
    words = ["--steps", "-1", "1e3", "x", "0" * 16 + "1", "--deployment", "nope", "--target",
             "aarch64", "x86_64+sm_90", "sparc", "--emit", "asm", "rt", "lir", "ptx", "calls",
             "--gpu-memory", "1 XiB", "--gpu-host", "-o", "--out", "--checkpoint", "--resume", "--help",
             "--epochs", "--format", "json", "--json", "--data", "--learner"]   # no count that
    # is valid and large: a run of 10^15 steps is what was asked for, not a hang
    o = lambda ext="": "out/" + str(rng.randrange(1000)) + ext
    primary = p()
    command = rng.choice([
        ["check", primary, p()], ["run", primary], ["run", primary, "--steps", "1", "--format", "json"],
        ["run", primary, "--epochs", rng.choice(["1", "0" * 15 + "1"])],
        ["run", primary, "--deployment", "diverge_star", "--steps", "2"],
        ["plan", primary], ["build", primary, "-o", o()],
        ["build", primary, "--emit", rng.choice(["asm", "rt", "lir", "ptx"])],
        ["build", primary, "--target", "x86_64+sm_90", "--gpu-host", p()],
        ["build", primary, "--deployment", "diverge_star", "-o", o()],
        ["verify", primary], ["ckpt", "show", primary], ["ckpt", "show", primary, "--json"],
        ["ckpt", "export", primary, "-o", o(rng.choice([".npz", ".safetensors"]))],
        ["launch", primary, "--steps", rng.choice(["1", "3", "0"]), "--records", "out/runs"],
        ["launch", primary, "--steps", "2", "--records", "out/runs", "--resume", p()],
        ["slurm", primary, "--records", "out/runs", "-o", o(".sh")], ["slurm-record", primary],
        ["k8s", primary, "-o", o()], ["verify-record", primary], ["trace", primary, "-o", o(".json")],
        ["plot", primary], ["plot", primary, "-o", o(".svg")],
        ["eval", primary, "--checkpoint", p()], ["eval", "diverge.alpha", "--checkpoint", primary],
        ["eval", primary, "--steps", "1", "--data", "x=" + p()],
        ["explain", rng.choice(["E0004", "e0044", "E9999", ""])], ["build-all", "--out", primary],
        [], [primary]])
    inserted = rng.choice([0, 0, 0, 1, 2])
    for _ in range(inserted):                                 # now and then random words anywhere
        command.insert(rng.randrange(len(command) + 1), rng.choice(words + paths))
    return command, (primary if not inserted else None)


def accepted_silently(argv, primary, rc, oks) -> bool:
    """A command that exits 0 on a primary input that is not one of its good ones: a hostile
    record, checkpoint or deployment taken as real."""
    key = " ".join(argv[:2]) if argv[:1] == ["ckpt"] else (argv[0] if argv else "")
    return rc == 0 and primary is not None and key in oks and primary not in oks[key]


def memory_bound(more: int):
    """This process's address space bounded to what it holds now and `more` bytes (a command
    that reads /dev/zero whole then fails in here rather than taking the machine's memory);
    returns what lifts the bound again."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        now = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (now + more if hard == resource.RLIM_INFINITY
                                            else min(hard, now + more), hard))
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_cli_fuzzer_never_tracebacks(tmp_path, monkeypatch, capsys, diverged):
    """Random command lines of every command over hostile files (FIFOs, devices, a huge sparse
    file, truncated, deep and non-UTF-8 JSON, a diverging learner's records, checkpoints and
    deployment) through alphac.cli.main: every outcome is a diagnostic, a refusal or a usage
    message; never a traceback, an internal error (exit 4), a hang or a hostile input accepted."""
    import collections
    import random
    import re
    import signal
    from alphac.refusals import TOOL_EXITS
    monkeypatch.chdir(tmp_path)
    paths, oks = hostile_files(tmp_path, diverged)
    (tmp_path / "out").mkdir()
    rng = random.Random(int(os.environ.get("ALPHAC_CLI_FUZZ_SEED", "2022")))

    class Hang(BaseException):                              # past every handler of the CLI's
        pass

    def hang(*_):
        raise Hang()
    old = signal.signal(signal.SIGALRM, hang)
    tried, codes, refusals = 0, collections.Counter(), collections.Counter()
    memory = memory_bound(4 << 30)         # a read without a bound is a MemoryError, not an OOM
    try:
        for _ in range(FUZZ_RUNS):
            argv, primary = random_argv(rng, paths)
            signal.alarm(30)
            try:
                rc, out, err = alphac(*argv)
            except Hang:
                pytest.fail(f"hang: {argv}")
            finally:
                signal.alarm(0)
            assert "Traceback" not in out + err and "internal error" not in err, (argv, err)
            assert rc != TOOL_EXITS["internal-error"][0] and (rc in (0, 1, 2, 3) or rc >= 64), (argv, rc, err)
            assert not accepted_silently(argv, primary, rc, oks), ("accepted", argv, out, err)
            tried += 1
            codes[rc] += 1
            refusals.update(re.findall(r"^refused: ([a-z0-9-]+)", err, re.M))
    finally:
        signal.signal(signal.SIGALRM, old)
        memory()
    with capsys.disabled():
        print(f"\nCLI fuzzer: {tried} command lines, 0 tracebacks, hangs, internal errors or silent "
              f"acceptances; exit codes {sorted(codes.items())}; refusals {sorted(refusals.items())}")
    assert tried == FUZZ_RUNS and len(codes) >= 3
