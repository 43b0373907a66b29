"""Run-time refusals: the one table of names and exit codes.

An executable (and the reference interpreter, and the launcher) that refuses prints exactly one
line `refused: NAME` on standard error and exits with the code below. Nothing is half-written: a
refusal happens before the state is published. The table is lowered into every executable
(`alphac.lower.runtime`) and documented in docs/refusals.md (generated from it; a test keeps the
two equal). Exit codes start at 64 so that they never collide with 0 (success), 1 (diagnostics
from the compiler) or 2 (the compiler's own usage errors).
"""
from __future__ import annotations

# name -> (exit code, when)
REFUSALS: dict[str, tuple[int, str]] = {
    "usage": (64, "the command line is not `EXE [--steps N]` (N a decimal integer, at most "
                  "10^15) or carries an unknown option"),
    "output": (66, "standard output could not be written (a closed pipe, a full disk)"),
    "non-finite-state": (65, "a value to be published is NaN or infinite; the contract publishes "
                             "finite state only, so nothing is printed"),
}


class Refusal(Exception):
    """A named refusal raised inside the compiler's own runs (interpreter, launcher)."""

    def __init__(self, name: str, detail: str = ""):
        assert name in REFUSALS, name
        super().__init__(f"refused: {name}" + (f" ({detail})" if detail else ""))
        self.name = name
        self.detail = detail

    @property
    def exit_code(self) -> int:
        return REFUSALS[self.name][0]


def exit_code(name: str) -> int:
    return REFUSALS[name][0]
