#!/usr/bin/env python3
"""Rebuild every artifact twice under varied conditions and compare them byte for byte.

What it does
    Copies the source tree this script sits in (the files git knows, tracked or not ignored,
    and the examples' data, examples/data/*.npy, which `make data` writes and git ignores; a
    plain copy without build outputs where there is no git) into two temporary directories,
    then runs `python -m alphac build-all --out build/repro` in each, both at once, build A
    under one set of conditions and build B under another, and compares the two MANIFEST.json files and every
    artifact's bytes and mode. What is varied (as far as the machine allows; Debian's reprotest
    varies the same things):

        build path      two directories of different lengths and depths
        file order      files copied in sorted order for A, reversed for B; B's tree is also
                        seen through disorderfs (shuffled directory listings) where it mounts
        environment     A a minimal one; B with junk variables and a junk PATH entry
        time zone       TZ=UTC / TZ=GMT-14
        locale          C.UTF-8 / fr_CH.UTF-8 (LC_ALL=C where fr_CH is not installed)
        umask           022 / 002
        HOME            an empty directory / a path that does not exist
        PYTHONHASHSEED  0 / 2463534242
        SOURCE_DATE_EPOCH  unset / set
        clock           B runs under `faketime -f +397d` where faketime is installed
        host name       B in its own UTS namespace with another host name (unshare --uts)
        kernel, ASLR    B reports a 2.6 kernel (setarch --uname-2.6); A runs without ASLR
        CPUs            B is pinned to one CPU where there are several

    and it says which of these it could not vary on this machine. Never varied: the user and
    group (both builds run as the caller) and the compiler's own source (that is the point).

    On a difference it names the artifact, and for an ELF file the section and the first
    differing offset (outside the build-id note, which is a content hash and so follows every
    other difference), then every section that differs.

Exit codes: 0 every artifact identical; 1 a difference (reported); 2 a build failed or the
check could not run. Options: --keep (keep the temporary trees), --tree DIR (check another
copy of the project), --copy-a DIR (after a pass, build A's artifacts and manifest copied to DIR:
what `alphac build-all` writes, which tests/test_repro.py reads instead of building it again).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = "build/repro"
MANIFEST = "MANIFEST.json"
DATA = "examples/data"   # the examples' .npy files: ignored by git (`make data` writes them), copied
SKIP = {".git", ".venv", "build", "__pycache__", ".pytest_cache", ".hypothesis", "runs"}
BUILD_ID = ".note.gnu.build-id"


def say(*lines: str) -> None:
    for line in lines:
        print(f"repro: {line}", flush=True)


# ---- the trees ---------------------------------------------------------------------------------
def source_files(tree: Path) -> tuple[list[str], str]:
    """The files to copy (sorted, relative) and how they were found."""
    try:
        r = subprocess.run(["git", "-C", str(tree), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, check=True)
        files = {f for f in r.stdout.decode().split("\0") if f and (tree / f).is_file()}
        files |= {str(p.relative_to(tree)) for p in (tree / DATA).glob("*.npy")}
        files = sorted(files)
        if files:
            return files, "git ls-files"
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d not in SKIP and not d.endswith(".egg-info")]
        files += [os.path.relpath(os.path.join(dirpath, f), tree) for f in filenames
                  if not f.endswith(".pyc")]
    return sorted(files), "a plain copy (no git)"


def copy_tree(tree: Path, files: list[str], dest: Path) -> None:
    """Copy `files` in the order given: the order the file system sees them created."""
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / rel, target)
        shutil.copymode(tree / rel, target)


def works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def installed_locale(name: str) -> bool:
    try:
        out = subprocess.run(["locale", "-a"], capture_output=True, text=True).stdout
    except OSError:
        return False
    norm = lambda s: s.lower().replace("-", "")
    return norm(name) in {norm(x) for x in out.split()}


# ---- the conditions ----------------------------------------------------------------------------
class Build:
    def __init__(self, label: str, cwd: Path, env: dict, umask: int, wrap: list[str],
                 cpus: set | None = None):
        self.label, self.cwd, self.env, self.umask, self.wrap, self.cpus = \
            label, cwd, env, umask, wrap, cpus

    def start(self) -> subprocess.Popen:
        def setup():
            os.umask(self.umask)
            if self.cpus:
                os.sched_setaffinity(0, self.cpus)
        cmd = self.wrap + [sys.executable, "-m", "alphac", "build-all", "--out", OUT]
        return subprocess.Popen(cmd, cwd=self.cwd, env=self.env, preexec_fn=setup, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def run_both(builds) -> list[tuple[int, str]]:
    """Both builds at once (each is one process; on a machine of two CPUs or more they share
    it, which is one more condition that must not matter): their exit codes and output."""
    procs = [b.start() for b in builds]
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            results.append((124, out + "\n(timed out after 600 s)"))
            continue
        results.append((p.returncode, out))
    return results


def plan(tmp: Path, tree: Path, files: list[str]):
    """(build A, build B, varied, not varied, cleanup actions)."""
    varied, not_varied, cleanup = [], [], []
    a_tree = tmp / "a" / "src"
    b_src = tmp / "b-second-build-with-a-longer-path" / "deeper" / "src"
    copy_tree(tree, files, a_tree)
    copy_tree(tree, list(reversed(files)), b_src)
    varied.append(f"build path: {a_tree} ({len(str(a_tree))} chars) / "
                  f"{b_src} ({len(str(b_src))} chars)")
    varied.append("file creation order: sorted / reversed")

    b_tree = b_src
    mnt = tmp / "b-second-build-with-a-longer-path" / "mounted" / "src"
    unmount = next(([f, "-u"] for f in ("fusermount", "fusermount3") if shutil.which(f)),
                   ["umount"])
    if shutil.which("disorderfs"):
        mnt.mkdir(parents=True)
        if works(["disorderfs", "-q", "--shuffle-dirents=yes", str(b_src), str(mnt)]):
            b_tree = mnt
            cleanup.append(unmount + [str(mnt)])
            varied.append(f"directory listing order: B through disorderfs (shuffled) at {mnt}")
        else:
            not_varied.append("directory listing order: disorderfs would not mount (no FUSE?); "
                              "only the creation order differs")
    else:
        not_varied.append("directory listing order: disorderfs is not installed; only the "
                          "creation order differs (apt-get install disorderfs)")

    path = os.environ.get("PATH", "/usr/bin:/bin")
    home_a = tmp / "home-a"
    home_a.mkdir()
    env_a = {"PATH": path, "HOME": str(home_a), "TZ": "UTC", "LANG": "C.UTF-8",
             "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    b_locale = "fr_CH.UTF-8" if installed_locale("fr_CH.UTF-8") else "C"
    env_b = {"PATH": str(tmp / "junk-bin") + os.pathsep + path,
             "HOME": "/nonexistent/second-build", "TZ": "GMT-14", "LANG": "fr_CH.UTF-8",
             "LANGUAGE": "fr_CH:fr", "LC_ALL": b_locale, "PYTHONHASHSEED": "2463534242",
             "SOURCE_DATE_EPOCH": "1234567890", "CAPTURE_ENVIRONMENT": "i_capture_the_environment",
             "ALPHAC_REPRO_JUNK": "a value nobody should read", "COLUMNS": "37", "USER": "repro-b",
             "LOGNAME": "repro-b", "TMPDIR": str(tmp)}
    if os.environ.get("ALPHAC_PTXAS"):       # the pinned build tool is an input, not a variation
        env_a["ALPHAC_PTXAS"] = env_b["ALPHAC_PTXAS"] = os.environ["ALPHAC_PTXAS"]
    varied += ["environment: minimal / junk variables (CAPTURE_ENVIRONMENT, ALPHAC_REPRO_JUNK, "
               "COLUMNS, USER, LOGNAME, TMPDIR) and a junk PATH entry",
               "time zone: TZ=UTC / TZ=GMT-14",
               "HOME: an empty directory / /nonexistent/second-build",
               "PYTHONHASHSEED: 0 / 2463534242",
               "SOURCE_DATE_EPOCH: unset / 1234567890",
               "umask: 022 / 002"]
    if b_locale == "C":
        varied.append("locale: LC_ALL=C.UTF-8 / LC_ALL=C with LANG=fr_CH.UTF-8")
        not_varied.append("a foreign locale: fr_CH.UTF-8 is not installed, so B uses C (ASCII)")
    else:
        varied.append("locale: C.UTF-8 / fr_CH.UTF-8")

    wrap_a, wrap_b = [], []
    if works(["unshare", "--uts", "sh", "-c", "hostname repro-b-host"]):
        wrap_b += ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', "repro-b-host"]
        varied.append("host name: this host's / repro-b-host (unshare --uts)")
    else:
        not_varied.append("host name: `unshare --uts` is not permitted here")
    if shutil.which("faketime") and works(["faketime", "-f", "+397d", "true"]):
        wrap_b += ["faketime", "-f", "+397d"]
        varied.append("clock: now / 397 days ahead (faketime)")
    else:
        not_varied.append("clock: faketime is not installed (apt-get install faketime); B only "
                          "runs later than A")
    if works(["setarch", "--uname-2.6", "true"]):
        wrap_b += ["setarch", "--uname-2.6"]
        varied.append("kernel version reported by uname: this kernel's / 2.6 (setarch)")
    else:
        not_varied.append("kernel version: setarch --uname-2.6 does not work here")
    if works(["setarch", "-R", "true"]):
        wrap_a += ["setarch", "-R"]
        varied.append("address-space randomization: off / on (setarch -R)")
    else:
        not_varied.append("address-space randomization: setarch -R does not work here")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    one_cpu = {cpus[0]} if len(cpus) > 1 else None
    if one_cpu:
        varied.append(f"CPUs: {len(cpus)} / 1")
    else:
        not_varied.append("CPU count: this machine offers one CPU")
    not_varied.append("user and group: both builds run as the caller")

    a = Build("A", a_tree, env_a, 0o022, wrap_a)
    b = Build("B", b_tree, env_b, 0o002, wrap_b, one_cpu)
    return a, b, varied, not_varied, cleanup


# ---- comparing ---------------------------------------------------------------------------------
def elf_regions(data: bytes) -> list[tuple[str, int, int]] | None:
    """(name, file offset, size) of the ELF headers and every section with bytes in the file;
    None when `data` is not ELF. pyelftools reads it where installed, else a small reader."""
    if data[:4] != b"\x7fELF":
        return None
    try:
        import io
        from elftools.elf.elffile import ELFFile
        f = ELFFile(io.BytesIO(data))
        h = f.header
        out = [("ELF header", 0, h.e_ehsize),
               ("program headers", h.e_phoff, h.e_phnum * h.e_phentsize),
               ("section headers", h.e_shoff, h.e_shnum * h.e_shentsize)]
        out += [(s.name, s["sh_offset"], s["sh_size"]) for s in f.iter_sections()
                if s["sh_type"] not in ("SHT_NULL", "SHT_NOBITS")]
        return out
    except ImportError:
        pass
    except Exception:
        return None
    if data[4] != 2 or data[5] != 1:                     # ELF64 little-endian only
        return None
    try:
        phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
        ehsize, phentsize, phnum, shentsize, shnum, shstrndx = \
            struct.unpack_from("<HHHHHH", data, 0x34)
        out = [("ELF header", 0, ehsize), ("program headers", phoff, phnum * phentsize),
               ("section headers", shoff, shnum * shentsize)]
        heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                 for i in range(shnum)]
        strtab_off = heads[shstrndx][4]
        for name, typ, _, _, off, size, *_ in heads:
            if typ in (0, 8):                            # SHT_NULL, SHT_NOBITS
                continue
            start = strtab_off + name
            out.append((data[start:data.index(b"\0", start)].decode(), off, size))
        return out
    except (struct.error, ValueError, IndexError):
        return None


def first_difference(a: bytes, b: bytes, start: int = 0, end: int | None = None) -> int | None:
    end = max(len(a), len(b)) if end is None else end
    for i in range(start, end):
        if i >= len(a) or i >= len(b) or a[i] != b[i]:
            return i
    return None


def where(regions, offset: int) -> str:
    for name, off, size in regions or ():
        if off <= offset < off + size:
            return f"{name} + {offset - off:#x}"
    return "no section" if regions is not None else "not ELF"


def explain(name: str, a: bytes, b: bytes) -> list[str]:
    """Report lines for an artifact whose bytes differ between the builds."""
    ra, rb = elf_regions(a), elf_regions(b)
    lines = []
    if len(a) != len(b):
        lines.append(f"  sizes differ: A {len(a)} bytes, B {len(b)} bytes")
    diffs = []                                           # (first offset, region name, count)
    if ra is not None and rb is not None:
        secs_b = {n: (o, s) for n, o, s in rb}
        for n, off, size in ra:
            if n not in secs_b:
                diffs.append((off, n, None))
                continue
            ob, sb = secs_b[n]
            xa, xb = a[off:off + size], b[ob:ob + sb]
            i = first_difference(xa, xb)
            if i is not None:
                count = sum(1 for k in range(max(len(xa), len(xb)))
                            if k >= len(xa) or k >= len(xb) or xa[k] != xb[k])
                diffs.append((off + i, n, count))
        for n, off, _ in rb:
            if n not in {x[0] for x in ra}:
                diffs.append((off, n, None))
        diffs.sort()
    headline = [d for d in diffs if d[1] != BUILD_ID] or diffs
    off = headline[0][0] if headline else first_difference(a, b)
    shown = lambda x: " ".join(f"{c:02x}" for c in x[off:off + 8]) or "(end of file)"
    lines.insert(0, f"  first difference at file offset {off:#x}, in {where(ra, off)}"
                    f" (A: {shown(a)}; B: {shown(b)})")
    if diffs:
        parts = []
        for o, n, count in diffs:
            what = "only in one build" if count is None else f"{count} byte{'s' if count != 1 else ''}"
            note = " (a content hash: follows any other difference)" if n == BUILD_ID else ""
            parts.append(f"{n} at {o:#x} ({what}){note}")
        lines.append("  regions that differ: " + "; ".join(parts))
    return [f"MISMATCH {name}: sha256 differs between build A and build B"] + lines


def json_diff(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(f"{p}: only in build {'B' if k not in a else 'A'}")
            else:
                out += json_diff(a[k], b[k], p)
        return out
    return [] if a == b else [f"{path}: A {json.dumps(a)} / B {json.dumps(b)}"]


def compare(a_root: Path, b_root: Path) -> tuple[list[str], int]:
    """(report lines, number of artifacts compared); no lines means identical."""
    ma_path, mb_path = a_root / OUT / MANIFEST, b_root / OUT / MANIFEST
    absent = [label for label, p in (("A", ma_path), ("B", mb_path)) if not p.is_file()]
    if absent:
        return [f"MISMATCH MANIFEST.json: build {' and '.join(absent)} wrote none"], 0
    ta, tb = ma_path.read_bytes(), mb_path.read_bytes()
    ma, mb = json.loads(ta), json.loads(tb)
    lines = []
    names = sorted(set(ma.get("artifacts", {})) | set(mb.get("artifacts", {})))
    for name in names:
        fa, fb = a_root / OUT / name, b_root / OUT / name
        if not fa.is_file() or not fb.is_file():
            lines.append(f"MISMATCH {name}: built only in build {'A' if fa.is_file() else 'B'}")
            continue
        da, db = fa.read_bytes(), fb.read_bytes()
        if da != db:
            lines += explain(name, da, db)
        ma_mode, mb_mode = fa.stat().st_mode & 0o7777, fb.stat().st_mode & 0o7777
        if ma_mode != mb_mode:
            lines.append(f"MISMATCH {name}: mode {ma_mode:o} in A, {mb_mode:o} in B")
    for label, root, m in (("A", a_root, ma), ("B", b_root, mb)):
        listed = set(m.get("artifacts", {})) | {MANIFEST}
        on_disk = {p.relative_to(root / OUT).as_posix() for p in (root / OUT).rglob("*")
                   if p.is_file()}
        for extra in sorted(on_disk - listed):
            lines.append(f"UNLISTED {extra}: written by build {label} but not in its manifest")
    if ta != tb:
        diff = [d for d in json_diff(ma, mb) if not d.startswith("artifacts.")]
        if diff or not lines:
            lines.append("MISMATCH MANIFEST.json: " + ("; ".join(diff) if diff else
                                                      "same content, different bytes"))
    return lines, len(names)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Build every artifact twice under varied "
                                             "conditions and compare (see the docstring).")
    ap.add_argument("--tree", type=Path, default=ROOT, help="project to check (default: this one)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary build trees")
    ap.add_argument("--copy-a", type=Path, metavar="DIR",
                    help="after a pass, copy build A's artifacts and MANIFEST.json to DIR (new)")
    args = ap.parse_args(argv)
    tree = args.tree.resolve()
    files, how = source_files(tree)
    tmp = Path(tempfile.mkdtemp(prefix="alphac-repro-"))
    cleanup = []
    try:
        a, b, varied, not_varied, cleanup = plan(tmp, tree, files)
        say(f"tree {tree}: {len(files)} files, found by {how}")
        say("varied (build A / build B):", *(f"  {v}" for v in varied))
        say("not varied:", *(f"  {v}" for v in not_varied))
        for build, (rc, out) in zip((a, b), run_both((a, b))):
            if rc != 0:
                say(f"FAIL: build {build.label} exited {rc} in {build.cwd}:",
                    *(f"  {line}" for line in out.splitlines()[-20:]))
                return 2
        lines, n = compare(a.cwd, b.cwd)
        if lines:
            say(*lines, f"FAIL: build A and build B differ ({n} artifacts compared)")
            return 1
        say(f"OK: {n} artifacts and MANIFEST.json are identical in both builds")
        if args.copy_a is not None:
            shutil.copytree(a.cwd / OUT, args.copy_a, symlinks=True)
        return 0
    finally:
        for cmd in cleanup:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
