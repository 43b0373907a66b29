"""Checkpoint code for an executable: which shards it writes, which values it restores.

The runtime (alphac/runtime/ckpt.rt) does the work once for every executable; what differs per
executable is the list of (state, coordinate range) it holds, its writer index, where its files
go, and how big its buffers are. These functions emit that as runtime-language code:

- `declarations`: the buffers (CK_CAP bytes for the largest file, a fill map, record space);
- `save_lines`: one shard per held state, each `<role>/<state>.<lo>-<hi>.e<E>.v<V>.npy`;
- `restore_lines`: the root manifest checked (and the layout), the path followed down to this
  owner's manifest, every held range restored (its own shards first).

Requires: state names of at most NAME_MAX bytes and role names of at most ROLE_MAX
(alphac.formats: the records and the shard paths are sized from them; `check_names`).
"""
from __future__ import annotations

from alphac.diag import BuildError
from alphac.formats import CKPT_HEADER, CKPT_RECORD, IDENTITY_BYTES, NAME_MAX, ROLE_MAX

HDR, REC = CKPT_HEADER.size, CKPT_RECORD.size


def declarations(lr, records: int) -> list[str]:
    """`records`: the most records a manifest this executable writes has. A manifest it reads may
    come from another owner count: up to 64 writers (the fan-out bound) per state. Under
    exact_sum, room to gather a whole manifest tree (ckpt_flatten)."""
    biggest = max([s.size for s in lr.states] + [1])
    cap = max(HDR + 8 * biggest, HDR + REC * records + 64)
    man = HDR + REC * 64 * max(len(lr.states), 1) + 64
    out = [f"const CK_CAP = {cap};",
           f"const CK_MAN_CAP = {man};",
           f"global ck_buf: [u8; {cap}];",
           f"global ck_man: [u8; {man}];",
           f"global ck_fill: [u8; {biggest}];",
           f"global ck_recs: [u8; {REC * max(records, 1)}];",
           f"global ck_sub: [u8; {REC}];"]
    if lr.exact:
        out += [f"global ck_man2: [u8; {man}];", f"global ck_queue: [u8; {man}];"]
    return out


def check_names(lr, roles: tuple[str, ...] = ("single",)) -> None:
    """What the records and ck_rel are sized from, checked: every state name at most NAME_MAX
    bytes (the language's limit, E0005), every role's at most ROLE_MAX, so every shard path fits
    (formats.SHARD_PATH_MAX). A failure here is a compiler defect, never the user's input."""
    for s in lr.states:
        if len(s.name.encode()) > NAME_MAX:
            raise BuildError(f"state `{s.name}` has a name over {NAME_MAX} bytes")
    for r in roles:
        if len(r.encode()) > ROLE_MAX:
            raise BuildError(f"role `{r}` has a name over {ROLE_MAX} bytes")


def save_lines(holdings, role: str, writer: int) -> list[str]:
    """`holdings`: [(state name, lo, hi)] in declaration order; records go to ck_recs. `role`:
    the address of its name (a string literal, or a buffer)."""
    return [f'ckpt_begin(dir, {role}, {writer}, v);'] + [
        f'ckpt_shard("{name}", {lo}, {hi}, st_{name} + {8 * lo}, ck_recs + {REC * k});'
        for k, (name, lo, hi) in enumerate(holdings)]


def other_layout(layout: int, owners: int) -> str:
    """The condition: the root manifest (in ck_man) is not of this executable's layout (0 flat,
    else the fan-out of a tree of `owners` owners)."""
    if layout == 0:
        return "load64(ck_man + CKH_LAYOUT) != 0"
    return f"load64(ck_man + CKH_LAYOUT) != {layout} || load64(ck_man + CKH_OWNER_HI) != {owners}"


def load_root_lines(layout: int, owners: int, me: int = 0, any_layout: bool = False) -> list[str]:
    """The root manifest loaded and its layout checked: this executable's, or, with `any_layout`
    (exact_sum: every layout is the same run), any."""
    out = [f'ckpt_begin(dir, "", {me}, 0);',
           'let count = ckpt_load("MANIFEST", ck_man, CK_MAN_CAP, 0, 1);']
    if not any_layout:
        out.append(f'if {other_layout(layout, owners)} {{ refuse("checkpoint-layout"); }}')
    return out


def restore_lines(holdings, me: int, layout: int, owners: int, any_layout: bool = False) -> list[str]:
    """The owner's path down its own layout's tree; with `any_layout`, another layout's tree is
    gathered whole (ckpt_flatten) and the owner restores from any shard in it."""
    out = load_root_lines(layout, owners, me, any_layout)
    if any_layout:
        out += [f"if {other_layout(layout, owners)} {{",
                "    count = ckpt_flatten(ck_man, CK_MAN_CAP, count, ck_man2, ck_queue);",
                "} else {", "    count = ckpt_descend(ck_man, CK_MAN_CAP, count);", "}"]
    else:
        out += ["count = ckpt_descend(ck_man, CK_MAN_CAP, count);"]
    out += [f'ckpt_restore(ck_man, count, "{name}", {lo}, {hi}, st_{name} + {8 * lo});'
            for name, lo, hi in holdings]
    return out


def single_source(lr) -> tuple[str, dict[str, bytes]]:
    """The single-process executable's checkpoint functions: it is owner 0 of a flat layout."""
    from alphac.dist.identity import learner_digests
    check_names(lr)
    holdings = [(s.name, 0, s.size) for s in lr.states]
    lines = ["data role_identity: [u8; IDENTITY_BYTES] = extern;"] + declarations(lr, len(holdings))
    lines += ["", "fn learner_save(dir: i64, v: i64) {"]
    lines += ["    " + l for l in save_lines(holdings, '"single"', 0)]
    lines += [f'    ckpt_manifest("MANIFEST", 0, 0, 0, 1, {len(holdings)});', "}",
              "", "fn learner_resume(dir: i64) -> i64 {"]
    lines += ["    " + l for l in restore_lines(holdings, 0, 0, 1, lr.exact)]
    lines += ["    return load64(ck_version);", "}", ""]
    learner, rate = learner_digests(lr)
    return "\n".join(lines), {"role_identity": learner + rate + bytes(IDENTITY_BYTES - len(learner + rate))}
