"""The plan: a deployment's step composed from five operations, projected to every role.

The five operations: `partition` (a class of state split among owners by coordinate ranges),
`replicate` (a value copied to every owner), `transfer` (a value sent from role to role),
`combine` ((G, n) pairs added in the combine tree's order), `advance` (the step's version). A
strategy only says which classes it partitions; `composition` derives the step:

    1. inputs partitioned:  transfer slices of the partitioned state the loss reads (zero3's
                            params; a proximal term's reference point) up, replicate them down
    2. every owner:         compute its contribution (G, n) over its samples
    3.                      transfer contributions up; combine at each combining role
    4.                      transfer the combined (G, n) down: all of it (gradients replicated,
                            or to the one owner of `deliver`), or each owner's slice
       update partitioned:  the terms of the update's reductions, each owner its coordinates,
                            gathered to every owner (`reduce`), folded in coordinate order
    5.                      update: every coordinate (replicated) or each owner's slices
    6. update partitioned:  for each replicated class, transfer slices up, replicate down;
       delivered to one:    that owner sends everything the loss reads to every owner
    7.                      advance the version
    at the end:             transfer every coordinate from its holder up to the root (publish)

A star is the one-level case of the tree (its center is the root). A mesh is a star whose
owners exchange the step's values directly, in pairwise rounds (`exchange_rounds`): each owner
sends every other owner the part of its contribution that owner holds and combines its own
coordinates by the combine tree (a reduce-scatter), then sends its updated slice of each
replicated class to every other owner (an all-gather); the center receives the loss sum and n
from owner 0 each step, and the checkpoint and the publication as in a star. `project(role)` turns the
global step into that role's program: a list of `Action`s whose sends and receives name a peer
and a message kind. `check_protocol` proves the projections fit together: every send has its
receive, in order, and no role waits forever (a simulation of all roles for deployments up to
4096 roles; beyond that, each role class's program is checked to be phase-ordered, which is what
makes a tree protocol deadlock-free, and representative parent/child pairs are matched).

What each owner holds between steps (`holding`), what each message carries (`carries`) and
which of an owner's coordinates it contributes to a message (`source_range`) are decided here
once: the plan executor and the role lowering read them, so the oracle and the executables
cannot disagree about who holds what. Every value the loss reads is held whole by every owner
when it computes, and every value an update reads is held by the owner that updates.

`demand(role)` is the bytes of learner values a role holds at its peak (the buffers its
executable declares for them); `admit` refuses a role one byte over its declared memory.
"""
from __future__ import annotations

from alphac.formats import XC_WORDS, XF_RECORD_WORDS, XF_TAIL, XS_DIGITS
from alphac.npy import CHUNK

from dataclasses import dataclass

from alphac.diag import Sink
from alphac.dist.deployment import Deployment
from alphac.dist.structure import Hierarchy, Role, Star, exchange_rounds


@dataclass(frozen=True)
class Action:
    op: str                       # send | recv | compute | combine | terms | update | advance | publish
    peer: Role | None = None
    kind: str = ""                # message kind: the phase it belongs to
    detail: str = ""

    def __str__(self) -> str:
        if self.op in ("send", "recv"):
            arrow = "->" if self.op == "send" else "<-"
            return f"{self.op} {self.kind} {arrow} {self.peer}" + (f" ({self.detail})" if self.detail else "")
        return self.op + (f" {self.detail}" if self.detail else "")


class Plan:
    def __init__(self, dep: Deployment):
        self.dep = dep
        self.lr = dep.learner
        self.topo = dep.topology
        self.has_loss = self.lr.loss is not None
        s = dep.strategy
        self.part = s.partition
        self.deliver_one = dep.deliver

    # -- structure -----------------------------------------------------------------------------
    def parent(self, role: Role) -> Role | None:
        t = self.topo
        if isinstance(t, Star):
            return None if role == t.center else t.center
        return t.parent(role)

    def children(self, role: Role) -> list[Role]:
        t = self.topo
        if isinstance(t, Star):
            return [Role(t.owner, k) for k in range(t.owners)] if role == t.center else []
        return t.children(role)

    @property
    def root(self) -> Role:
        return self.topo.root

    def is_owner(self, role: Role) -> bool:
        return role.name == self.dep.owner

    @property
    def mesh(self) -> bool:
        """Owners exchange directly (`topology mesh(C)`): a reduce-scatter and all-gathers."""
        return isinstance(self.topo, Star) and self.topo.mesh

    def role_count(self) -> int:
        t = self.topo
        if isinstance(t, Star):
            return t.owners + 1
        return sum(t.counts)

    def roles(self) -> list[Role]:
        """Every role (small deployments only: the fleet path never calls this)."""
        t = self.topo
        if isinstance(t, Star):
            return [t.center] + [Role(t.owner, k) for k in range(t.owners)]
        out = []
        for level, n in enumerate(t.counts):
            out += [t.role(level, k) for k in range(n)]
        return out

    def rank(self, role: Role) -> int:
        """The role's position in `roles()` (arithmetic: fleets too): what an engine's task
        number (SLURM_PROCID, JOB_COMPLETION_INDEX) names, and `--rank` checks."""
        t = self.topo
        if isinstance(t, Star):
            return 0 if role == t.center else 1 + role.index
        level = t.level_of(role)
        return sum(t.counts[:level]) + (role.index or 0)

    def role_classes(self) -> list[tuple[str, list[Role]]]:
        """Each index node with representative members (first and last)."""
        t = self.topo
        if isinstance(t, Star):
            last = max(t.owners - 1, 0)
            return [(t.center.name, [t.center]), (t.owner, sorted({Role(t.owner, 0), Role(t.owner, last)}))]
        out = []
        for level, n in enumerate(t.counts):
            reps = sorted({t.role(level, 0), t.role(level, n - 1)})
            out.append((t.level_name(level), reps))
        return out

    # -- who holds what -----------------------------------------------------------------------
    def loss_reads(self) -> list:
        """The states the loss reads, in declaration order."""
        if self.lr.loss is None:
            return []
        from alphac.ir.learner import Read, postorder
        names = {n.name for n in postorder([self.lr.loss]) if isinstance(n, Read)}
        return [s for s in self.lr.states if s.name in names]

    def partitioned(self, s) -> bool:
        """State `s` is split among the owners by the placement (each holds its slice)."""
        return (s.group is not None and self.deliver_one is None
                and not self.holds_all(s.kind))

    def gathered_inputs(self) -> list:
        """Partitioned states the loss reads: gathered whole to every owner before it computes."""
        return [s for s in self.loss_reads() if self.partitioned(s)]

    def holding(self, k: int, s) -> tuple[int, int]:
        """The coordinates [lo, hi) of state `s` that owner k holds between steps (lo == hi:
        none). Scalar state is computed by every owner; with one delivered owner the others hold
        only what the loss reads (it is sent to them after the update)."""
        if self.partitioned(s):
            return self.dep.placement[s.group].range(k)
        if (self.deliver_one is not None and k != self.deliver_one and s.group is not None
                and s.kind != "param" and s not in self.loss_reads()):
            return (0, 0)
        return (0, s.size)

    def updates(self, k: int) -> dict[int, tuple[int, int]]:
        """The coordinates owner k updates, by coordinate group (every owner also runs the
        scalar-state statements)."""
        lr = self.lr
        if self.deliver_one is not None:
            return {g.index: (0, g.size) for g in lr.groups} if k == self.deliver_one else {}
        if self.dep.strategy.partitioned_update:
            return {g.index: self.dep.placement[g.index].range(k) for g in lr.groups}
        return {g.index: (0, g.size) for g in lr.groups}

    def reduce_terms(self) -> list:
        """Under a partitioned update, the terms of the update's reduced scalars (ir.learner.
        term_states): each owner computes its coordinates', the plan gathers them whole to
        every owner, and each folds them in coordinate order, so every owner has the single
        process's bits (docs/distribution.md, "Reductions in the update")."""
        if not self.dep.strategy.partitioned_update or self.deliver_one is not None:
            return []
        from alphac.ir.learner import term_states
        return term_states(self.lr)

    def carries(self, kind: str) -> list:
        """The states a gather or publication message carries, in declaration order."""
        lr = self.lr
        if kind == "reduce":
            return self.reduce_terms()
        if kind == "gather-inputs":
            return self.gathered_inputs()
        if kind == "allgather-params":
            if self.deliver_one is not None:
                reads = self.loss_reads()
                return [s for s in lr.states if s.kind == "param" or (s in reads and s.group is not None)]
            return [s for s in lr.states if s.kind == "param"]
        if kind == "allgather-state":
            return [s for s in lr.states if s.kind == "state" and s.group is not None]
        if kind == "publish":
            return list(lr.states)
        raise KeyError(kind)

    def source_range(self, k: int, s, kind: str) -> tuple[int, int]:
        """The coordinates of `s` that owner k puts into an up-going `kind` message: its slice
        of a value updated in slices, or all of a value every owner holds alike from one
        designated owner (the delivered one, else owner 0), so each coordinate comes once."""
        designated = self.deliver_one if self.deliver_one is not None else 0
        alike = s.group is None or self.deliver_one is not None or (
            kind == "publish" and self.holds_all(s.kind))
        if alike:
            return (0, s.size) if k == designated else (0, 0)
        return self.dep.placement[s.group].range(k)

    # -- the composition -------------------------------------------------------------------------
    def composition(self) -> list[str]:
        d, s = self.dep, self.dep.strategy
        if self.mesh:
            return self.mesh_composition()
        ops = []
        up = "owners -> " + ("the center" if isinstance(self.topo, Star) else "the root, through the aggregators")
        inputs = self.gathered_inputs()
        if self.has_loss and inputs:
            names = ", ".join(x.name for x in inputs)
            ops.append(f"transfer  slices of what the loss reads ({names}), {up}")
            ops.append(f"replicate {names} to every owner")
        if self.has_loss:
            ops.append("compute   (G, n) at every owner, its samples in order")
            ops.append(f"transfer  (G, n), {up}")
            ops.append(f"combine   by the tree {d.tree_text()}")
            if self.deliver_one is not None:
                ops.append(f"transfer  the combined (G, n) to {d.owner}[{self.deliver_one}]")
            elif "gradients" in self.part:
                ops.append("transfer  each owner its slice of the combined (G, n)  (reduce-scatter)")
            else:
                ops.append("replicate the combined (G, n) to every owner  (all-reduce)")
        if self.deliver_one is not None:
            ops.append(f"update    every coordinate at {d.owner}[{self.deliver_one}]; "
                       "the scalar state at every owner")
            names = ", ".join(x.name for x in self.carries("allgather-params"))
            ops.append(f"transfer  {names} from {d.owner}[{self.deliver_one}], replicate to every owner")
        elif s.partitioned_update:
            if self.reduce_terms():
                ops.append(f"compute   the terms of the update's reductions at each owner, its coordinates")
                ops.append(f"transfer  term slices, {up}; replicate them to every owner  (all-gather)")
                ops.append(self.fold_text())
            ops.append("partition the update: each owner its coordinates (" + s.describe() + ")")
            for cls in self.regathered():
                ops.append(f"transfer  {cls} slices up, replicate {cls} to every owner  (all-gather)")
        else:
            ops.append("update    every coordinate at every owner (replicated)")
        ops.append("advance   the version")
        return ops

    def fold_text(self) -> str:
        """How every owner makes the reduced scalars from the gathered terms (ir.interp.reduced_value)."""
        exact = " (under exact_sum a dot's or sum's exactly, rounded once)" if self.lr.exact_reduced else ""
        return f"combine   at every owner: each reduction's terms folded left, coordinates ascending{exact}"

    def mesh_composition(self) -> list[str]:
        d, ops = self.dep, []
        rounds = f"{len(exchange_rounds(d.owners))} rounds of owner pairs"
        inputs = self.gathered_inputs()
        if self.has_loss and inputs:
            names = ", ".join(x.name for x in inputs)
            ops.append(f"transfer  each owner's slices of {names} to every other owner, {rounds}  (all-gather)")
        if self.has_loss:
            ops.append("compute   (G, n) at every owner, its samples in order")
            ops.append(f"transfer  to each owner the others' (G, n) for its coordinates, {rounds}  (reduce-scatter)")
            ops.append(f"combine   at each owner its coordinates, by the tree {d.tree_text()}")
            ops.append(f"transfer  the loss sum and n, {d.owner}[0] -> the center")
        if self.reduce_terms():
            ops.append(f"compute   the terms of the update's reductions at each owner, its coordinates")
            ops.append(f"transfer  each owner's term slices to every other owner, {rounds}  (all-gather)")
            ops.append(self.fold_text())
        ops.append("partition the update: each owner its coordinates (" + d.strategy.describe() + ")")
        for cls in self.regathered():
            ops.append(f"transfer  each owner's {cls} slices to every other owner, {rounds}  (all-gather)")
        ops.append("advance   the version")
        return ops

    def regathered(self) -> list[str]:
        """Classes replicated between steps but updated in slices: re-gathered after the update."""
        if not self.dep.strategy.partitioned_update:
            return []
        out = []
        if "params" not in self.part and self.lr.params:
            out.append("params")
        if "state" not in self.part and any(s.kind == "state" and s.group is not None for s in self.lr.states):
            out.append("state")
        return out

    # -- projection --------------------------------------------------------------------------------
    def _up(self, role: Role, kind: str, what: str, prog: list[Action], combine: bool = False,
            local: Action | None = None) -> None:
        for c in self.children(role):
            prog.append(Action("recv", c, kind, what))
        if local is not None:
            prog.append(local)
        if combine and not self.is_owner(role):
            kids = self.children(role)
            if isinstance(self.topo, Star):
                what = f"by the tree {self.dep.tree_text()}"
            elif len(kids) > 2:
                what = f"{kids[0]}..{kids[-1].index} left to right"
            else:
                what = ", ".join(str(c) for c in kids) + " left to right"
            prog.append(Action("combine", detail=what))
        p = self.parent(role)
        if p is not None:
            prog.append(Action("send", p, kind, what))

    def _down(self, role: Role, kind: str, what: str, prog: list[Action], only: int | None = None) -> None:
        p = self.parent(role)
        if only is not None and not self._on_path(role, only):
            return
        if p is not None:
            prog.append(Action("recv", p, kind, what))
        for c in self.children(role):
            if only is None or self._on_path(c, only):
                prog.append(Action("send", c, kind, what))

    def _exchange(self, role: Role, kind: str, what: str, prog: list[Action]) -> None:
        """A mesh owner's part of one exchange: with each other owner, in the rounds'
        order, the lower of the pair sending first."""
        k = role.index
        for pairs in exchange_rounds(self.dep.owners):
            for a, b in pairs:
                if k in (a, b):
                    peer = Role(self.dep.owner, b if k == a else a)
                    order = ("send", "recv") if k == a else ("recv", "send")
                    prog += [Action(op, peer, kind, what) for op in order]

    def _mesh_step(self, role: Role, prog: list[Action]) -> None:
        owner = self.is_owner(role)
        if self.has_loss and self.gathered_inputs() and owner:
            self._exchange(role, "gather-inputs", "slices", prog)
        if self.has_loss:
            if owner:
                prog.append(Action("compute", detail="(G, n) over its samples"))
                self._exchange(role, "combine", "(G, n) for the receiver's coordinates", prog)
                prog.append(Action("combine", detail=f"its coordinates, by the tree {self.dep.tree_text()}"))
                if role.index == 0:
                    prog.append(Action("send", self.root, "combine", "the loss sum and n"))
            else:
                prog.append(Action("recv", Role(self.dep.owner, 0), "combine", "the loss sum and n"))
        if owner and self.reduce_terms():
            prog.append(Action("terms", detail="the update's reduction terms, its coordinates"))
            self._exchange(role, "reduce", "term slices", prog)
        if owner:
            prog.append(Action("update", detail="its coordinates"))
            for cls in self.regathered():
                self._exchange(role, f"allgather-{cls}", "slices", prog)

    def _on_path(self, role: Role, owner: int) -> bool:
        if self.is_owner(role):
            return role.index == owner
        if isinstance(self.topo, Star):
            return True
        lo, hi = self.topo.subtree_owners(role)
        return lo <= owner < hi

    def _tree_step(self, role: Role, prog: list[Action]) -> None:
        owner = self.is_owner(role)
        grad_what = "slices" if "gradients" in self.part else "all"
        if self.has_loss and self.gathered_inputs():
            self._up(role, "gather-inputs", "slices", prog)
            self._down(role, "gather-inputs", "all", prog)
        if self.has_loss:
            if owner:
                prog.append(Action("compute", detail="(G, n) over its samples"))
            self._up(role, "combine", "(G, n)", prog, combine=True)
            self._down(role, "deliver", grad_what, prog, only=self.deliver_one)
        if self.deliver_one is not None:
            if owner:
                prog.append(Action("update", detail="every coordinate" if role.index == self.deliver_one
                                   else "the scalar state"))
            # params travel from the updating owner up to the root, then down to everyone
            if self._on_path(role, self.deliver_one):
                if not owner or role.index == self.deliver_one:
                    kids = [c for c in self.children(role) if self._on_path(c, self.deliver_one)]
                    for c in kids:
                        prog.append(Action("recv", c, "allgather-params", "all"))
                    if self.parent(role) is not None:
                        prog.append(Action("send", self.parent(role), "allgather-params", "all"))
            self._down(role, "allgather-params", "all", prog)
        else:
            if self.reduce_terms():
                if owner:
                    prog.append(Action("terms", detail="the update's reduction terms, its coordinates"))
                self._up(role, "reduce", "term slices", prog)
                self._down(role, "reduce", "all", prog)
            if owner:
                scope = "its coordinates" if self.dep.strategy.partitioned_update else "every coordinate"
                prog.append(Action("update", detail=scope))
            for cls in self.regathered():
                self._up(role, f"allgather-{cls}", "slices", prog)
                self._down(role, f"allgather-{cls}", "all", prog)

    def project(self, role: Role, final: bool = True, checkpoint: bool = False) -> list[Action]:
        """This role's program for one step (and, with `final`, the publication after it; with
        `checkpoint` too, the checkpoint before the publication: owners write their shards and
        send their records up, combining roles write the manifests, the root's last)."""
        prog: list[Action] = []
        owner = self.is_owner(role)
        if self.mesh:
            self._mesh_step(role, prog)
        else:
            self._tree_step(role, prog)
        prog.append(Action("advance"))
        if final and checkpoint:
            if owner:
                prog.append(Action("save", detail="its shards"))
            where = "the root manifest, last" if role == self.root else "its sub-manifest"
            self._up(role, "checkpoint", "shard records", prog,
                     local=None if owner else Action("manifest", detail=where))
        if final:
            self._up(role, "publish", "held coordinates", prog)
            if role == self.root:
                prog.append(Action("publish", detail="print the state"))
        return prog

    # -- checks -----------------------------------------------------------------------------------
    def check_protocol(self) -> list[str]:
        """Problems with the projections; empty when every send meets its receive, in order,
        and no role can wait forever."""
        if self.role_count() <= 4096:
            problems = simulate({r: self.project(r) for r in self.roles()}) + simulate(
                {r: self.project(r, checkpoint=True) for r in self.roles()})
            if self.mesh and not problems:      # owners' frames cross: no buffering assumed
                problems = rendezvous({r: self.project(r, checkpoint=True) for r in self.roles()})
            return problems
        problems = []
        for name, reps in self.role_classes():
            for r in reps:
                problems += phase_ordered(r, self.project(r))
                kids = self.children(r)
                for c in ([kids[0], kids[-1]] if kids else []):
                    mine = [a.kind for a in self.project(r) if a.peer == c]
                    theirs = [a.kind for a in self.project(c) if a.peer == r]
                    if mine != theirs:
                        problems.append(f"{r} and {c} disagree on their messages: {mine} vs {theirs}")
                peers = len({a.peer for a in self.project(r) if a.peer is not None})
                if peers > self.topo.max_peers:
                    problems.append(f"{r} talks to {peers} peers")
        return problems

    # -- memory -----------------------------------------------------------------------------------
    def buffers(self, role: Role) -> dict[str, int]:
        """Bytes of learner values this role holds at its peak, by buffer."""
        lr, dep = self.lr, self.dep
        ptotal = sum(p.size for p in lr.params)
        out: dict[str, int] = {}
        if self.is_owner(role):
            k = role.index
            rows = sum(8 * d.cols for d in lr.data)
            if self.has_loss:               # a minibatch learner's loaded rows: one at a time
                kept = sum(8 * d.cols for d in lr.data if d.file is None or not lr.batch)
                out["data"] = dep.samples.size(k) * kept + (rows - kept)
                if any(d.file is not None for d in lr.data):
                    out["data read buffer"] = CHUNK
                out["params (all, for compute)"] = 8 * ptotal
                out["G (its sum)"] = 8 * ptotal
                out["combined gradient"] = 8 * (self.slice_total(k) if "gradients" in self.part else ptotal)
                if self.mesh:
                    out["the other owners' (G, n) for its coordinates"] = \
                        (dep.owners - 1) * (8 * self.slice_total(k) + 16)
                if lr.exact:                # exact_sum: expansions, accumulators, spills, records
                    out["exact expansions and accumulators (G, L), n, counts"] = \
                        8 * (2 + XC_WORDS) * (ptotal + 1) + 8 * XF_TAIL
                    out["exact spill regions and records (touched where written)"] = \
                        8 * (2 * XS_DIGITS + 1 + XF_RECORD_WORDS) * (ptotal + 1)
            for s in lr.states:
                if s.group is None:
                    out.setdefault("scalar state (old, new)", 0)
                    out["scalar state (old, new)"] += 16
                    continue
                held = self.holds_all(s.kind) or self.deliver_one is not None
                whole = held or (s.kind != "param" and s in self.gathered_inputs())
                n = s.size if whole else self.placement_size(s.group, k)
                if s.kind == "param" and self.has_loss and held:
                    continue                      # the compute buffer is the param itself
                out[f"{s.name}"] = 8 * n
            if self.reduce_terms():
                out["the update's reduction terms"] = 8 * sum(t.size for t in self.reduce_terms())
            return out
        kids = len(self.children(role))
        if self.mesh:
            if self.has_loss:
                out["the loss sum and n"] = 16
        elif self.has_loss and lr.exact:
            # expansions, accumulators, spill regions, n and counts; a child's records too
            per = 8 * (2 + XC_WORDS + XS_DIGITS) * (ptotal + 1) + 8 * XF_TAIL
            out["children's exact (G, L, n)"] = kids * (per + 8 * XF_RECORD_WORDS * (ptotal + 1) + 8)
            out["combined exact (G, L, n), spill and accumulator records, rounded (G, n)"] = \
                per + 8 * (XS_DIGITS + 1 + XF_RECORD_WORDS) * (ptotal + 1) + 8 * ptotal + 16
        elif self.has_loss:
            out["children's (G, n)"] = kids * (8 * ptotal + 8)
            out["combined (G, n)"] = 8 * ptotal + 8
        if self.part or self.deliver_one is not None or self.regathered():
            out["gathered params/state"] = 8 * sum(s.size for s in lr.states if s.group is not None)
        out["published state"] = 8 * sum(s.size for s in lr.states)
        if self.reduce_terms() and not self.mesh:
            out["the update's reduction terms"] = 8 * sum(t.size for t in self.reduce_terms())
        return out

    def holds_all(self, kind: str) -> bool:
        cls = "params" if kind == "param" else "state"
        return cls not in self.part

    def placement_size(self, group: int, k: int) -> int:
        r = self.dep.placement.get(group)
        return r.size(k) if r is not None else self.lr.groups[group].size

    def slice_total(self, k: int) -> int:
        total = 0
        for p in self.lr.params:
            total += self.placement_size(p.group, k)
        return total

    def demand(self, role: Role) -> int:
        return sum(self.buffers(role).values())

    def class_demand(self, name: str, reps: list[Role]) -> tuple[int, Role]:
        """The largest demand in an index node. Demand grows with the member's share of samples
        and coordinates; the largest shares are found from the ranges, not by enumeration."""
        cands = set(reps)
        if name == self.dep.owner:
            d = self.dep
            best = max(range(d.owners), key=lambda k: d.samples.size(k)) if d.owners <= 4096 else None
            if best is not None:
                cands.add(Role(name, best))
                for g, r in d.placement.items():
                    cands.add(Role(name, max(range(d.owners), key=r.size)))
            else:
                cands |= {Role(name, 0), Role(name, d.owners - 1)}
        role = max(sorted(cands), key=self.demand)
        return self.demand(role), role

    def admit(self, sink: Sink) -> None:
        span = self.dep.spans.get("memory")
        for name, reps in self.role_classes():
            need, role = self.class_demand(name, reps)
            members = reps if name != self.dep.owner or self.dep.owners > 4096 else \
                [Role(name, k) for k in range(self.dep.owners)]
            for r in sorted(set(members) | {role}):
                supply = self.dep.supply_of(r)
                if supply is not None and self.demand(r) > supply:
                    over = self.demand(r) - supply
                    sink.error("E0110", span, f"`{r.ref()}` needs {self.demand(r)} bytes; its "
                                              f"memory is {supply} ({over} over)",
                               hint="alphac plan lists each role's buffers")
                    return


def simulate(programs: dict[Role, list[Action]]) -> list[str]:
    """Run every role's program with unbounded in-order channels; report what goes wrong."""
    pc = {r: 0 for r in programs}
    chans: dict[tuple[Role, Role], list[str]] = {}
    problems = []
    progress = True
    while progress:
        progress = False
        for r in sorted(programs):
            prog = programs[r]
            while pc[r] < len(prog):
                a = prog[pc[r]]
                if a.op == "send":
                    if a.peer not in programs:
                        return [f"{r} sends {a.kind} to {a.peer}, which is not a role"]
                    chans.setdefault((r, a.peer), []).append(a.kind)
                elif a.op == "recv":
                    q = chans.get((a.peer, r), [])
                    if not q:
                        break
                    got = q.pop(0)
                    if got != a.kind:
                        return [f"{r} expects {a.kind} from {a.peer} but gets {got}"]
                pc[r] += 1
                progress = True
    stuck = [r for r in programs if pc[r] < len(programs[r])]
    for r in stuck:
        problems.append(f"{r} waits forever at `{programs[r][pc[r]]}`")
    for (a, b), q in sorted(chans.items()):
        if q:
            problems.append(f"{a} sends {q[0]} to {b}, which never receives it")
    return problems


def rendezvous(programs: dict[Role, list[Action]]) -> list[str]:
    """Run every role's program with sends that complete only when the receiver takes them
    (no channel holds anything): what the mesh's crossing exchanges must survive, since a
    socket's buffer may hold less than a frame."""
    pc = {r: 0 for r in programs}

    def at(r):
        return programs[r][pc[r]] if pc[r] < len(programs[r]) else None
    progress = True
    while progress:
        progress = False
        for r in sorted(programs):
            while (a := at(r)) is not None:
                if a.op == "recv":
                    break
                if a.op == "send":
                    b = at(a.peer) if a.peer in programs else None
                    if b is None or b.op != "recv" or b.peer != r:
                        break
                    if b.kind != a.kind:
                        return [f"{a.peer} expects {b.kind} from {r} but gets {a.kind}"]
                    pc[a.peer] += 1
                pc[r] += 1
                progress = True
    return [f"{r} waits forever at `{at(r)}` (sends unbuffered)" for r in sorted(programs) if at(r) is not None]


def phase_ordered(role: Role, prog: list[Action]) -> list[str]:
    """A role's messages follow the global phase order, and within a phase all receives from
    children precede the send to the parent (up) or the receive from the parent precedes the
    sends to children (down): the shape that makes a tree protocol deadlock-free."""
    seen = []
    for a in prog:
        if a.op in ("send", "recv"):
            if seen and a.kind != seen[-1] and a.kind in seen:
                return [f"{role} returns to phase {a.kind} after leaving it"]
            if not seen or seen[-1] != a.kind:
                seen.append(a.kind)
    return []


def compress(actions: list[Action]) -> list[str]:
    """Runs of one message to consecutive peers of one index node, as one line."""
    out, i = [], 0
    while i < len(actions):
        a = actions[i]
        j = i + 1
        if a.op in ("send", "recv") and a.peer.index is not None:
            while (j < len(actions) and actions[j].op == a.op and actions[j].kind == a.kind
                   and actions[j].peer is not None and actions[j].peer.name == a.peer.name
                   and actions[j].peer.index == a.peer.index + (j - i)):
                j += 1
        if j - i > 2:
            last = actions[j - 1].peer
            arrow = "->" if a.op == "send" else "<-"
            out.append(f"{a.op} {a.kind} {arrow} {a.peer}..{last.index} ({a.detail}) x{j - i}")
        else:
            out += [str(x) for x in actions[i:j]]
        i = j
    return out


def render(plan: Plan) -> str:
    """`alphac plan`: the deployment, readably."""
    d, lr = plan.dep, plan.lr
    out = [f"deployment {d.name} of learner {lr.name} (identity {lr.identity[:16]})", ""]
    t = plan.topo
    out.append("roles:")
    for name, lo, hi in d.roles:
        out.append(f"  {name}" + ("" if lo is None else f"[{lo}..{hi}]  ({hi - lo} roles)"))
    out.append(f"  {plan.role_count()} roles in all, at most {t.max_peers} peers each")
    if isinstance(t, Star) and t.mesh:
        out.append(f"topology: mesh of the owners, centered on {t.center} (publication, records)")
    elif isinstance(t, Star):
        out.append(f"topology: star centered on {t.center}")
    else:
        levels = ", ".join(f"{t.level_name(l)} x{n}" for l, n in enumerate(t.counts))
        out.append(f"topology: hierarchy, fan-out {t.fanout}: {levels}")
    out.append(f"strategy: {d.strategy.name} ({d.strategy.describe()})")
    out.append(f"combine tree: {d.tree_text()}")
    out.append("delivery: " + ("every owner" if d.deliver is None else f"{d.owner}[{d.deliver}]"))
    out += ["", "holdings:"]
    owners = range(d.owners) if d.owners <= 64 else [0, d.owners - 1]
    for k in owners:
        r = Role(d.owner, k)
        parts = [f"samples {d.samples.describe(k)}"]
        for g in lr.groups:
            names = ",".join(g.members)
            if d.placement and g.index in d.placement and d.deliver is None:
                parts.append(f"{names} coordinates {d.placement[g.index].describe(k)}")
        out.append(f"  {r.ref()}: " + "; ".join(parts) + f"; target {d.target_of(r)}")
    if d.owners > 64:
        out.append(f"  ... ({d.owners} owners; ranges by formula)")
    out += ["", "one step, composed:"]
    out += [f"  {i + 1}. {op}" for i, op in enumerate(plan.composition())]
    out += ["", "messages per step, by role:"]
    for name, reps in plan.role_classes():
        for r in reps:
            out.append(f"  {r}:")
            out += [f"    {line}" for line in compress(plan.project(r, final=False))]
    out += ["", "memory per role (bytes of learner values at the peak):"]
    for name, reps in plan.role_classes():
        need, r = plan.class_demand(name, reps)
        supply = d.supply_of(r)
        sup = f" of {supply} declared" if supply is not None else ""
        out.append(f"  {r.ref() if r.index is None else name + '[*]'}: {need}{sup}")
        for buf, n in plan.buffers(r).items():
            out.append(f"      {buf}: {n}")
    return "\n".join(out) + "\n"
