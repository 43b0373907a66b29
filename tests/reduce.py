"""Reducing a failing generated program to a small one that fails the same way.

Greedy delta debugging over the program's structure (tests/learngen.py), repeated until no
edit is accepted: drop deployments, deployment items, update statements, loss `let`s,
declarations and samples; write loaded data back as literals; replace each subexpression by
one of its operands or by a number. An edit is kept when the program still disagrees in an
engine of the same kind as at first (`signature`); an edit that makes the program refused, or
agree, is undone. The result is written as a regression file (`keep`), which the test suite
runs through every engine. Data the failure still needs from .npy files are saved beside it,
named after it (`found-7.alpha` loads `found-7.x.npy`), and read from there
(differential.check_file).
"""
from __future__ import annotations

import copy
from pathlib import Path

import differential
import learngen


def signature(rep) -> set[str]:
    """The kinds of engine that disagree: `x86_64`, `plan`, `roles`, ..."""
    out = set()
    for p in rep.problems:
        head = p.split()[0]
        out.add(head.split(":")[0].rstrip(":"))
    return out


def engines_for(sig: set[str]) -> tuple[str, ...]:
    need = {"interp"} | {s for s in sig if s in differential.ALL}
    if "crash" in sig:
        need |= {"plan"}
    if "moved" in need:
        need |= {"x86_64", "roles"}
    return tuple(e for e in differential.ALL if e in need)


def subexpr_paths(e: tuple, path=()):
    yield path
    if e[0] in ("bin", "cmp"):
        yield from subexpr_paths(e[2], path + (2,))
        yield from subexpr_paths(e[3], path + (3,))
    elif e[0] in ("neg", "pow"):
        yield from subexpr_paths(e[1], path + (1,))
    elif e[0] == "call":
        for k, a in enumerate(e[2]):
            yield from subexpr_paths(a, path + (2, k))
    elif e[0] == "stack":
        for k, a in enumerate(e[1]):
            yield from subexpr_paths(a, path + (1, k))


def get(e: tuple, path):
    for k in path:
        e = e[k]
    return e


def put(e: tuple, path, new: tuple) -> tuple:
    """`e` with the subexpression at `path` replaced (paths index the tuples, call arguments
    included)."""
    if not path:
        return new
    parts = list(e)
    parts[path[0]] = put(e[path[0]], path[1:], new)
    return tuple(parts)


def operands(e: tuple) -> list[tuple]:
    if e[0] in ("bin", "cmp"):
        return [e[2], e[3]]
    if e[0] in ("neg", "pow"):
        return [e[1]]
    if e[0] == "call":
        return list(e[2])
    if e[0] == "stack":
        return list(e[1])
    return []


class Reducer:
    def __init__(self, prog, work: Path, log=None):
        self.work = work
        self.log = log or (lambda s: None)
        first = differential.check_program(copy.deepcopy(prog), work)
        self.sig = signature(first)
        self.engines = engines_for(self.sig)
        self.best = prog
        self.tries = 0

    def fails(self, prog) -> bool:
        self.tries += 1
        rep = differential.check_program(copy.deepcopy(prog), self.work, self.engines)
        return rep.status == "disagreed" and bool(signature(rep) & self.sig)

    def attempt(self, candidate) -> bool:
        if self.fails(candidate):
            self.best = candidate
            return True
        return False

    def edits(self):
        """Candidate programs, each one edit away from the best so far (smallest first)."""
        p = self.best

        def without(attr: str):
            for k in range(len(getattr(p, attr))):
                q = copy.deepcopy(p)
                del getattr(q, attr)[k]
                yield q
        yield from without("deployments")
        for k, d in enumerate(p.deployments):
            for j, item in enumerate(d.items):
                if item.split()[0] in ("roles", "topology"):
                    continue
                q = copy.deepcopy(p)
                del q.deployments[k].items[j]
                yield q
        yield from without("update")
        yield from without("loss")
        if p.loss_result is not None and not p.loss and not any(
                s.kind == "assign" and "grad" in learngen.expr_text(s.expr) for s in p.update):
            q = copy.deepcopy(p)
            q.loss_result = None
            yield q
        yield from without("strategies")
        yield from without("decls")
        for k, d in enumerate(p.decls):              # loaded data back as a literal
            if d.kind == "data" and d.file:
                q = copy.deepcopy(p)
                q.decls[k].file, q.decls[k].typed = "", False
                yield q
        data = [d for d in p.decls if d.kind == "data"]
        if data and len(data[0].value) > 1:
            for row in range(len(data[0].value)):
                q = copy.deepcopy(p)
                for d in q.decls:
                    if d.kind == "data":
                        del d.value[row]
                        d.shape = (d.shape[0] - 1,) + d.shape[1:]
                yield q
        for where, exprs in self.expressions(p):
            for path in list(subexpr_paths(exprs)):
                sub = get(exprs, path)
                for new in operands(sub) + ([("num", 1.0)] if sub[0] != "num" else []):
                    q = copy.deepcopy(p)
                    self.set_expression(q, where, put(exprs, path, new))
                    yield q

    @staticmethod
    def expressions(p):
        out = [(("loss", k), s.expr) for k, s in enumerate(p.loss)]
        if p.loss_result is not None:
            out.append((("result", 0), p.loss_result))
        out += [(("update", k), s.expr) for k, s in enumerate(p.update)]
        return out

    @staticmethod
    def set_expression(q, where, e) -> None:
        kind, k = where
        if kind == "loss":
            q.loss[k].expr = e
        elif kind == "result":
            q.loss_result = e
        else:
            q.update[k].expr = e

    def run(self, budget: int = 2000):
        """Reduce until no edit is accepted (or `budget` tries); returns the smallest program."""
        progress = True
        while progress and self.tries < budget:
            progress = False
            for q in self.edits():
                if self.tries >= budget:
                    break
                if self.attempt(q):
                    self.log(f"reduced to {len(learngen.render(self.best))} bytes")
                    progress = True
                    break
        return self.best


def keep(prog, directory: Path, name: str, note: str) -> Path:
    """Write the reduced program as a regression file with a comment saying what it caught, and
    the .npy files it loads beside it, each named after it: `NAME.DATA.npy`."""
    directory.mkdir(parents=True, exist_ok=True)
    prog = copy.deepcopy(prog)
    for d in prog.decls:
        if d.kind == "data" and d.file:
            d.file = f"{name}.{d.name}.npy"
    for file, raw in learngen.npy_files(prog).items():
        (directory / file).write_bytes(raw)
    path = directory / f"{name}.alpha"
    head = "".join(f"# {line}\n" for line in note.strip().splitlines())
    path.write_text(head + learngen.render(prog))
    return path
