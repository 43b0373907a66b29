"""The roles' processes: started together in one new process group, waited for within a bound,
ended together: each dies with the launcher (PR_SET_PDEATHSIG) and SIGINT, SIGTERM or SIGHUP
ends them all (`Interrupted`). `run_roles` fills in each RoleRun's exit, stdout and stderr and
leaves no role running, and ends them all as soon as one refuses at start (START_REFUSALS);
`Progress` shows the root's steps as they go.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from alphac.refusals import REFUSALS, START_REFUSALS
from alphac.tools.record import losses, stream_events

INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class RoleRun:
    role: str
    target: str
    sha256: str
    artifact: str                      # its path in the build manifest
    argv: list[str]
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    exit: int | None = None
    stdout: str = ""
    stderr: str = ""


class Interrupted(Exception):
    pass


def _interrupt(signum, frame):
    for s in INTERRUPTS:                   # once: ending the roles is not itself interrupted
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


def _die_with(launcher: int) -> None:
    """In a role, between fork and exec: die when the launcher does, even if it already has."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != launcher:
        os._exit(1)


class Progress(threading.Thread):
    """Steps done by the root, from its event stream, on standard error every half second:
    `step K/N, S steps/s, about T s left`; a last line when the run ends."""

    def __init__(self, events: Path, steps: int, out):
        super().__init__(daemon=True)
        self.events, self.steps, self.out = events, steps, out
        self.start_time, self.stop = time.monotonic(), threading.Event()

    def done(self) -> tuple[int, str]:
        """Steps the root has done, and its last mean loss in decimal ("" before one)."""
        try:
            lines = self.events.read_bytes().split(b"\n")
        except OSError:
            return 0, ""
        loss = losses(stream_events([line for line in lines if line.startswith(b"loss ")][-1:], True))
        return sum(1 for line in lines if line.startswith(b"step ")), \
            (f", loss {float(loss[0]['decimal']):.6g}" if loss else "")

    def line(self, final: bool) -> str:
        (k, loss), dt = self.done(), time.monotonic() - self.start_time
        rate = k / dt if dt > 0 else 0.0
        left = f", about {(self.steps - k) / rate:.0f} s left" if rate and not final else ""
        return f"launch: step {k}/{self.steps}{loss}, {rate:.1f} steps/s{left}"

    def run(self) -> None:
        while not self.stop.wait(0.5):
            print("\r" + self.line(False), end="", file=self.out, flush=True)

    def finish(self) -> None:
        self.stop.set()
        self.join()
        print("\r" + self.line(True), file=self.out, flush=True)


def run_roles(runs: list[RoleRun], deadline_ms: int, kill: tuple[str, float] | None) -> str | None:
    """Start every role in one new process group, wait for all (bounded), and on any way out
    end whatever is still running; the name of the signal that interrupted us, or None."""
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _interrupt) for s in INTERRUPTS     # an ignored signal
                    if signal.getsignal(s) is not signal.SIG_IGN}              # stays ignored (nohup)
    files = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in runs]
    interrupted, overdue, ended = None, set(), None
    try:
        for run, (out, err) in zip(runs, files):
            group = runs[0].proc.pid if runs[0].proc else 0
            run.proc = subprocess.Popen(run.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=run.env,
                                        process_group=group, preexec_fn=partial(_die_with, os.getpid()))
        if kill is not None:
            victim, after = kill
            time.sleep(after)
            for run in runs:
                if run.role == victim and run.proc.poll() is None:
                    run.proc.kill()
        ended = _wait(runs, time.monotonic() + deadline_ms / 1000 * 4 + 30, overdue)
    except Interrupted as e:
        interrupted = e.args[0]
    finally:
        started = [run.proc for run in runs if run.proc]
        if any(p.poll() is None for p in started):   # the unreaped one keeps the group's id ours
            os.killpg(started[0].pid, signal.SIGKILL)
        for p in started:
            p.wait()
        for s, h in handlers.items():
            signal.signal(s, h)
    for run, (out, err) in zip(runs, files):
        if run.proc:
            run.exit = run.proc.returncode
        for fh, field in ((out, "stdout"), (err, "stderr")):
            fh.seek(0)
            setattr(run, field, fh.read().decode(errors="replace"))
            fh.close()
        run.stderr += "launcher: killed after the bound\n" if run.role in overdue else ""
        if ended and run.role != ended and run.exit is not None and run.exit < 0:
            run.stderr += f"launcher: ended when {ended} refused at start\n"
    return interrupted


def _wait(runs: list[RoleRun], until: float, overdue: set) -> str | None:
    """Wait for every role until `until` (those still running then are killed and `overdue`); as
    soon as one exits with a refusal of START_REFUSALS, end the others (the run cannot pass, and
    they would wait out their deadline for it) and return its name."""
    start_codes = {REFUSALS[name][0] for name in START_REFUSALS}
    waiting = list(runs)
    while waiting:
        for run in list(waiting):
            code = run.proc.poll()
            if code is not None:
                waiting.remove(run)
                if code in start_codes:
                    for other in waiting:
                        other.proc.kill()
                    return run.role
        if time.monotonic() > until:
            for run in waiting:
                run.proc.kill()
                overdue.add(run.role)
            return None
        time.sleep(0.01)
    return None
