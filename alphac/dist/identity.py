"""The identity a role carries in every frame, by component, so a mismatch is named.

    learner      what the learner is: data, state, loss and update, with constant values masked
    rate         the constants' values (learning rates, decay rates, every numeric constant)
    contract     the numerical contract's name (`contract ordered` or `exact_sum`)
    combine      the combine tree (under exact_sum: a constant, since no result depends on it)
    membership   the roles (index nodes) and the topology
    plan         the sample split, the strategy, its placement and the delivery

Each is a SHA-256; frames carry the first 8 bytes of each, the HELLO frame all 32. Targets are
not part of any component: a mixed-ISA deployment is the same run as an all-x86-64 one. The
owner count and the sample split are in `membership`/`plan`, never in `learner`, so a checkpoint
(which binds `learner` and `rate`) resumes on another owner count.
"""
from __future__ import annotations

import hashlib

from alphac.dist.deployment import Deployment
from alphac.ir.learner import CONTRACTS, canonical

COMPONENTS = ("learner", "rate", "contract", "combine", "membership", "plan")


def _h(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def learner_digests(lr) -> tuple[bytes, bytes]:
    """(learner, rate): the canonical form with every constant value taken out, and those values."""
    values, masked = [], []
    for line in canonical(lr).splitlines():
        if line.startswith("const ") or " = Const " in line:
            head, vals = line.rsplit(" ", 1)
            values.append(vals)
            line = head + " ?"
        masked.append(line)
    return _h("\n".join(masked)), _h("\n".join(values))


def digests(dep: Deployment) -> dict[str, bytes]:
    lr = dep.learner
    learner, rate = learner_digests(lr)
    topo = dep.topology
    membership = repr(sorted(dep.roles)) + " " + type(topo).__name__ + " " + repr(
        getattr(topo, "fanout", None)) + " " + repr(getattr(topo, "center", None)) + (
        " mesh" if getattr(topo, "mesh", False) else "")       # a star's text is unchanged
    s = dep.samples
    plan = (f"samples {s.total} {s.parts} {s.explicit} strategy {sorted(dep.strategy.partition)} "
            f"placement {sorted((g, r.total, r.parts, r.explicit) for g, r in dep.placement.items())} "
            f"deliver {dep.deliver}")
    # under exact_sum no sum depends on its order: the combine tree is not part of the run
    combine = "exact_sum: any order" if lr.exact else dep.tree_text()
    return {"learner": learner, "rate": rate, "contract": _h(CONTRACTS[lr.contract]),
            "combine": _h(combine), "membership": _h(membership), "plan": _h(plan)}


def short(d: bytes) -> int:
    """The 8-byte digest a frame header carries, as a signed 64-bit integer."""
    v = int.from_bytes(d[:8], "little")
    return v - (1 << 64) if v >> 63 else v
