"""`alphac init DIR` (issue 46): a project a pip user starts from: the same bytes every time, a
learner that checks clean and trains on its `.npy` data, and a folder that already holds one of
its files refused with nothing written. (The README's commands run in it from the wheel:
tests/test_wheel.py.)"""
import hashlib

from conftest import alphac


def digests(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_init_writes_the_same_project_every_time_and_it_trains(tmp_path, monkeypatch):
    code, _, err = alphac("init", tmp_path / "a")
    assert code == 0 and "5 files in " in err, err
    code, _, err = alphac("init", tmp_path / "b")
    assert code == 0 and digests(tmp_path / "a") == digests(tmp_path / "b")
    assert sorted(digests(tmp_path / "a")) == ["examples/mine.alpha", "examples/mine_test_x.npy",
                                               "examples/mine_test_y.npy", "examples/mine_x.npy",
                                               "examples/mine_y.npy"]
    monkeypatch.chdir(tmp_path / "a")
    assert alphac("check", "examples/mine.alpha")[0] == 0
    code, out, err = alphac("run", "examples/mine.alpha", "--steps", "20", "--deployment", "mine_mixed")
    assert code == 0 and out.startswith("w[0] "), err
    code, out, err = alphac("plan", "examples/mine.alpha")
    assert code == 0 and all(d in out for d in ("mine_star", "mine_tree", "mine_mixed")), out


def test_init_refuses_a_folder_that_holds_its_files_and_writes_nothing(tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "mine_y.npy").write_bytes(b"mine")
    code, out, err = alphac("init", tmp_path)
    assert code == 1 and err.startswith("alphac: error: ") and "examples/mine_y.npy" in err, err
    assert digests(tmp_path) == {"examples/mine_y.npy": hashlib.sha256(b"mine").hexdigest()}
    code, _, err = alphac("init", tmp_path / "examples" / "mine_y.npy")   # a file, not a folder
    assert code == 1 and "Traceback" not in err and err.startswith("alphac: error: "), err
