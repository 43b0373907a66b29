"""`alphac verify-record EVENTS --replay STEP --learner FILE`: a GPU owner's chain, replayed.

What it does
    A GPU owner run with `--shadow sampled` writes `chain K HEX` for every step K to its events
    file (alphac/runtime/gpu.rt gpu_chain): h_K = SHA-256(h_{K-1} | K as 8 bytes little-endian
    | D_K), h_0 = 32 zero bytes, D_K the tree digest (alphac/ptx/digest.py) of G then every state
    after step K, declaration order, G the step's gradient sum (the learner's params in
    declaration order) and every value a binary64's 8 bytes, little endian. This recomputes steps 1..STEP with the reference interpreter (alphac.ir.interp: the G
    and states the contract gives, which are the card's when it computed them) and rebuilds the
    chain, so a step the run did not prove is checked now.
Requires
    The learner's source (FILE: the events name the learner, and it must be that one) and the
    events file as the owner wrote it (each line "TEXT @NS", with " MAC" after it when the run
    authenticated its events).
Guarantees
    `replay_chain` returns the first step whose hash differs from the file's, or None when steps
    1..STEP all match. An events file that is not one (unreadable, no `shadow sampled`, a
    malformed or out-of-order chain line, fewer than STEP chained steps, another learner) is
    refused `record-malformed`, naming the line.
"""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from alphac.ir.learner import Learner
from alphac.refusals import Refusal
from alphac.tools.record import is_count, is_hex, split_event, stream_lines


def chain_events(path: str | Path, name: str) -> list[str]:
    """The hashes of the chain in events file `path` of learner `name`, step 1 first."""
    def bad(why: str) -> Refusal:
        return Refusal("record-malformed", f"{path}: {why}")
    try:
        lines = [x.decode(errors="replace").rstrip("\n") for x in stream_lines(Path(path))]
    except OSError as e:
        raise bad(e.strerror or str(e))
    texts = []
    for text in lines:
        what, at = split_event(text)
        texts.append(what if at is not None else split_event(text.rpartition(" ")[0])[0])
    if not texts or not texts[0].startswith(f"gpu-owner {name} sm_"):
        raise bad(f"line 1: not the events of a GPU owner of learner {name}")
    if not any(t == "shadow sampled" or t.startswith("shadow sampled 1/") for t in texts):
        raise bad("no `shadow sampled`: a run under --shadow full keeps no chain (it proved every step)")
    hashes = []
    for i, what in enumerate(texts):
        parts = what.split(" ")
        if parts[0] != "chain":
            continue
        if len(parts) != 3 or not is_count(parts[1]) or not is_hex(parts[2], 64):
            raise bad(f"line {i + 1}: not `chain K HEX`")
        if int(parts[1]) != len(hashes) + 1:
            raise bad(f"line {i + 1}: chain step {parts[1]} where step {len(hashes) + 1} was due")
        hashes.append(parts[2])
    return hashes


def replay_chain(lr: Learner, events: str | Path, upto: int) -> int | None:
    """The first of steps 1..upto whose hash is not the events file's; None if none."""
    from alphac.ir.interp import initial_state, owner_contribution, rounded, step_samples
    from alphac.ir.interp import apply_update, mean_gradient
    from alphac.ptx.digest import tree_digest
    hashes = chain_events(events, lr.name)
    if len(hashes) < upto:
        raise Refusal("record-malformed", f"{events}: {len(hashes)} chained steps, not {upto}")
    state, h = initial_state(lr), bytes(32)
    for t in range(upto):
        c = owner_contribution(lr, state, step_samples(lr, range(lr.nsamples or 0), t)) \
            if lr.loss is not None else None
        G = rounded(c)[0] if c is not None else {}
        state = apply_update(lr, state, mean_gradient(c), t)
        values = [v for p in lr.params for v in G.get(p.name, ())] + [v for s in lr.states for v in state[s.name]]
        D = tree_digest(struct.pack(f"<{len(values)}d", *values))
        h = hashlib.sha256(h + struct.pack("<q", t + 1) + D).digest()
        if h.hex() != hashes[t]:
            return t + 1
    return None
