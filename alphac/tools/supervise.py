"""The roles' processes: started together in one new process group, waited for within a bound,
ended together: each dies with the launcher (PR_SET_PDEATHSIG) and SIGINT, SIGTERM or SIGHUP
ends them all (`Interrupted`). `run_roles` fills in each RoleRun's exit, stdout and stderr and
leaves no role running, and ends them all as soon as one refuses at start (START_REFUSALS);
`Progress` shows the root's steps as they go.

Faults (`alphac launch --fail ROLE@STEP[:HOW]`, docs/distribution.md "Failures"): `Injector`
watches each named role's event stream and, once the role has said `step STEP`, does HOW to it:
`kill` (SIGKILL), `stop` (SIGSTOP: a role that hangs; killed when every other role has ended),
`close` (every socket of the role shut down, read and write: a link cut, through a copy of its
descriptors taken with pidfd_getfd), `corrupt` (bytes no frame begins with written into its
link to its parent, or its first link: a frame altered in flight). Each fault is done once per
launch and keeps when it was done (CLOCK_MONOTONIC ns, the roles' event clock).
"""
from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from alphac.tools.metrics import record_line
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


HOWS = ("kill", "stop", "close", "corrupt")
SYS_PIDFD_GETFD = 438                  # the same number on x86-64 and AArch64


@dataclass
class Fault:
    role: str
    step: int
    how: str = "kill"
    at_ns: int | None = None           # when it was done; None until then


class Injector(threading.Thread):
    """Does each fault of `faults` whose role is among `runs` once that role reports its step."""

    def __init__(self, runs: list[RoleRun], faults: list[Fault], events: Path, parent_port):
        super().__init__(daemon=True)
        self.runs = {r.role: r for r in runs}
        self.faults = [f for f in faults if f.at_ns is None and f.role in self.runs]
        self.events, self.parent_port, self.stop, self.stopped = events, parent_port, threading.Event(), set()
        self.read: dict[str, tuple[int, set[int]]] = {}     # role -> (bytes read, steps said)

    def reached(self, f: Fault) -> bool:
        """Whether f's role has said `step STEP`; each stream read on from where it was left."""
        at, seen = self.read.get(f.role, (0, set()))
        try:
            with open(self.events / f"{f.role}.log", "rb") as fh:
                fh.seek(at)
                lines = fh.read().split(b"\n")[:-1]        # complete lines only
        except OSError:
            return False
        seen.update(int(m[1]) for m in map(re.compile(rb"step (\d+) ").match, lines) if m)
        self.read[f.role] = (at + sum(len(line) + 1 for line in lines), seen)
        return f.step in seen

    def run(self) -> None:
        while self.faults and not self.stop.wait(0.002):
            for f in [f for f in self.faults if self.reached(f)]:
                self.faults.remove(f)
                self.do(f, self.runs[f.role].proc)

    def do(self, f: Fault, proc: subprocess.Popen) -> None:
        f.at_ns = time.monotonic_ns()
        if proc.poll() is not None:
            return
        if f.how == "stop":
            self.stopped.add(f.role)
        if f.how in ("kill", "stop"):
            os.kill(proc.pid, signal.SIGKILL if f.how == "kill" else signal.SIGSTOP)
            return
        socks = []
        try:
            pidfd = os.pidfd_open(proc.pid)
            for fd in sorted(int(n) for n in os.listdir(f"/proc/{proc.pid}/fd")):
                if os.readlink(f"/proc/{proc.pid}/fd/{fd}").startswith("socket:"):
                    dup = _libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
                    if dup >= 0:
                        socks.append(socket.socket(fileno=dup))
            os.close(pidfd)
            links = [s for s in socks if s.type == socket.SOCK_STREAM and _peer(s)]
            if not links:                # none to take (pidfd_getfd refused here): not done
                f.at_ns = None
            if f.how == "close":
                for s in links:
                    s.shutdown(socket.SHUT_RDWR)
            elif links:
                up = [s for s in links if _peer(s)[1] == self.parent_port(f.role)]
                (up or links)[0].send(b"\xa5" * 64)
        except OSError:                  # the role ended meanwhile
            pass
        finally:
            for s in socks:
                s.close()


def _peer(s: socket.socket):
    try:
        return s.getpeername()
    except OSError:
        return None


class Interrupted(Exception):
    pass


_held: list | None = None     # while the roles start: the interrupts that came, raised after


def _interrupt(signum, frame):
    for s in INTERRUPTS:                   # once: ending the roles is not itself interrupted
        signal.signal(s, signal.SIG_IGN)
    if _held is not None:
        _held.append(signal.Signals(signum).name)
        return
    raise Interrupted(signal.Signals(signum).name)


def _die_with(launcher: int) -> None:
    """In a role, between fork and exec: die when the launcher does, even if it already has."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != launcher:
        os._exit(1)


class Progress(threading.Thread):
    """Steps done by the root, from its event stream, read every half second: on `out`
    (standard error) `step K/N, S steps/s, about T s left` each time on a terminal (one line,
    rewritten), every 5 s elsewhere (a line each), K and N counted from the run's first step (a
    run resumed at `start`: its steps go on from there), and a last line when the run ends; on
    `metrics`, each step's loss as a JSON line (metrics.record_line) once its line is whole."""

    def __init__(self, events: Path, start: int, steps: int, out, metrics=None):
        super().__init__(daemon=True)
        self.events, self.first, self.steps, self.out, self.metrics = events, start, steps, out, metrics
        self.start_time, self.stop, self.sent = time.monotonic(), threading.Event(), 0

    def done(self) -> tuple[int, str]:
        """Steps the root has done, and its last mean loss in decimal ("" before one); each new
        whole `loss` line to `metrics`."""
        try:
            lines = self.events.read_bytes().split(b"\n")[:-1]    # whole lines only
        except OSError:
            return self.first, ""
        loss = losses(stream_events([line for line in lines if line.startswith(b"loss ")], True))
        if self.metrics is not None:
            for e in loss[self.sent:]:
                self.metrics.write(record_line(e))
                self.metrics.flush()
            self.sent = len(loss)
        done = [line.split(b" ")[1] for line in lines if line.startswith(b"step ")]
        return (int(done[-1]) if done and done[-1].isdigit() else self.first), \
            (f", loss {float(loss[-1]['decimal']):.6g}" if loss else "")

    def line(self, final: bool) -> str:
        (k, loss), dt = self.done(), time.monotonic() - self.start_time
        rate = (k - self.first) / dt if dt > 0 else 0.0
        left = f", about {(self.steps - k) / rate:.0f} s left" if rate and not final else ""
        return f"launch: step {k}/{self.steps}{loss}, {rate:.1f} steps/s{left}"

    def run(self) -> None:               # off a terminal (a log, a pipe): a line every 5 s
        tty, tick = self.out is not None and self.out.isatty(), 0
        while not self.stop.wait(0.5):
            text, tick = self.line(False), tick + 1
            if self.out is not None and (tty or tick % 10 == 0):
                print("\r" + text if tty else text, end="" if tty else "\n", file=self.out, flush=True)

    def finish(self) -> None:
        self.stop.set()
        self.join()
        text = self.line(True)
        if self.out is not None:
            print("\r" * self.out.isatty() + text, file=self.out, flush=True)


def run_roles(runs: list[RoleRun], deadline_ms: int, kill: tuple[str, float] | None,
              faults: list[Fault] = (), events: Path | None = None, parent_port=None) -> str | None:
    """Start every role in one new process group, wait for all (bounded), and on any way out
    end whatever is still running; the name of the signal that interrupted us, or None.
    `faults`: done to the roles (Injector) as they reach their steps, the events in `events`."""
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _interrupt) for s in INTERRUPTS     # an ignored signal
                    if signal.getsignal(s) is not signal.SIG_IGN}              # stays ignored (nohup)
    files = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in runs]
    interrupted, overdue, ended, injector = None, set(), None, None
    global _held
    try:
        # An interrupt raised while a Popen waits for its child's exec would lose that role's
        # process object (started, in the group, never reaped nor recorded): held until all are.
        _held = []
        try:
            for run, (out, err) in zip(runs, files):
                group = runs[0].proc.pid if runs[0].proc else 0
                run.proc = subprocess.Popen(run.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                            env=run.env, process_group=group,
                                            preexec_fn=partial(_die_with, os.getpid()))
        finally:
            held, _held = _held, None
        if held:
            raise Interrupted(held[0])
        if kill is not None:
            victim, after = kill
            time.sleep(after)
            for run in runs:
                if run.role == victim and run.proc.poll() is None:
                    run.proc.kill()
        injector = Injector(runs, list(faults), events, parent_port)
        injector.start()
        ended = _wait(runs, time.monotonic() + deadline_ms / 1000 * 4 + 30, overdue, injector.stopped)
    except Interrupted as e:
        interrupted = e.args[0]
    finally:
        if injector is not None:
            injector.stop.set()
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
        if ended and run.role != ended and run.exit is not None and \
                (run.exit < 0 or run.exit == REFUSALS["peer-lost"][0]):  # killed, or lost it first
            run.stderr += f"launcher: ended when {ended} refused at start\n"
    return interrupted


def _wait(runs: list[RoleRun], until: float, overdue: set, stopped: set) -> str | None:
    """Wait for every role until `until` (those still running then are killed and `overdue`); as
    soon as one exits with a refusal of START_REFUSALS, end the others (the run cannot pass, and
    they would wait out their deadline for it) and return its name. Roles a fault `stopped` are
    killed once they are all that is left."""
    start_codes = {REFUSALS[name][0] for name in START_REFUSALS}
    waiting = list(runs)
    while waiting:
        if all(run.role in stopped for run in waiting):     # only the stopped are left
            for run in waiting:
                run.proc.kill()
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
