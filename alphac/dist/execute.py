"""Executing a plan in one process: every role's projected program, in turn, as the oracle of
the distributed runtime.

Each role runs exactly its `Plan.project` program. Messages are real values on in-order
channels; a role blocks at a receive until its peer has sent. Owners keep only what the plan
says they hold: coordinates they do not hold are `None`, so an update or a publication that
reads one fails loudly instead of quietly using a value the real role would not have.

Message meaning, by direction: up (child -> parent) a `combine` message carries a contribution
(G, n); any other up message carries the coordinates the sender's subtree holds, which the parent
merges. Down (parent -> child) a `deliver` message carries the combined (G, n) (only the child's
slice when gradients are partitioned and the child is an owner); any other down message carries
the assembled values, which an owner adopts. Owner to owner (a mesh), a `combine` message
carries the sender's (G, n) for the receiver's coordinates only, which the receiver combines by
the tree with everyone's when it has them all; a gather carries the sender's slices, which the
receiver writes over its own copy.

Requires: a checked plan. Guarantees: the arithmetic is the reference interpreter's
(owner_contribution, combine in the tree's order, the per-coordinate update), so a plan's result
is the numerical contract's result for that split and tree.
"""
from __future__ import annotations

from alphac.dist.plan import Action, Plan
from alphac.dist.structure import Leaf, Role, Star
from alphac.math import binary64 as f
from alphac.ir import interp
from alphac.ir.learner import Learner, update_reductions


class PlanError(Exception):
    pass


class RoleState:
    def __init__(self, role: Role, state: dict[str, list]):
        self.role = role
        self.state = state                        # owners: what they hold (None elsewhere)
        self.up: dict[str, dict[str, list]] = {}  # merged subtree values, by message kind
        self.down: dict[str, object] = {}         # values received from the parent
        self.contribs: list = []                  # children's (G, n), in child order
        self.peers: dict[int, object] = {}        # a mesh owner's: the others' (G, n), its coordinates
        self.contrib = None                       # an owner's own (G, n)
        self.combined = None                      # a combining role's (G, n)
        self.published = None


def only(vals, lo: int, hi: int) -> list:
    return [v if lo <= j < hi else None for j, v in enumerate(vals)]


def mask(plan: Plan, k: int, full: dict[str, list]) -> dict[str, list]:
    """Owner k's share of the state between steps (`Plan.holding`); None where it holds nothing."""
    return {s.name: only(full[s.name], *plan.holding(k, s)) for s in plan.lr.states}


def merge(into: dict[str, list] | None, part: dict[str, list]) -> dict[str, list]:
    into = {k: list(v) for k, v in (into or {}).items()}
    for name, vals in part.items():
        cur = into.setdefault(name, [None] * len(vals))
        for j, v in enumerate(vals):
            if v is not None:
                if cur[j] is not None and f.bits(cur[j]) != f.bits(v):
                    raise PlanError(f"two holders disagree on {name}[{j}]")
                cur[j] = v
    return into


def evaluate_tree(tree, contribs: list) -> interp.Contrib:
    if isinstance(tree, Leaf):
        return contribs[tree.owner]
    acc = None
    for c in tree.children:
        acc = interp.combine(acc, evaluate_tree(c, contribs))
    return acc


class Execution:
    def __init__(self, plan: Plan, state: dict[str, tuple]):
        self.plan = plan
        self.lr = plan.lr
        self.roles = plan.roles()
        full = {k: list(v) for k, v in state.items()}
        self.rs = {r: RoleState(r, mask(plan, r.index, full) if plan.is_owner(r) else {})
                   for r in self.roles}
        self.t = 0                                 # the step being run (minibatches)

    def run_step(self, final: bool, only_publish: bool = False) -> None:
        plan = self.plan
        programs = {r: plan.project(r, final=final) for r in self.roles}
        if only_publish:
            programs = {r: [a for a in p if a.kind == "publish" or a.op == "publish"]
                        for r, p in programs.items()}
        chans: dict[tuple[Role, Role], list] = {}
        pc = {r: 0 for r in self.roles}
        progress = True
        while progress:
            progress = False
            for r in self.roles:
                prog = programs[r]
                while pc[r] < len(prog):
                    a = prog[pc[r]]
                    if a.op == "recv":
                        q = chans.get((a.peer, r))
                        if not q:
                            break
                        kind, value = q.pop(0)
                        if kind != a.kind:
                            raise PlanError(f"{r} expected {a.kind} from {a.peer}, got {kind}")
                        self.receive(self.rs[r], a, value)
                    elif a.op == "send":
                        chans.setdefault((r, a.peer), []).append((a.kind, self.value(self.rs[r], a)))
                    else:
                        self.local(self.rs[r], a)
                    pc[r] += 1
                    progress = True
        stuck = [r for r in self.roles if pc[r] < len(programs[r])]
        if stuck:
            raise PlanError(f"the plan deadlocks: {stuck[0]} waits at `{programs[stuck[0]][pc[stuck[0]]]}`")

    # -- messages ----------------------------------------------------------------------------
    def receive(self, me: RoleState, a: Action, value) -> None:
        plan = self.plan
        if plan.mesh and plan.is_owner(a.peer) and (a.kind == "combine" or plan.is_owner(me.role)):
            # owner to owner, or the loss sum and n to the center
            if not plan.is_owner(me.role):
                me.down[a.kind] = value
            elif a.kind == "combine":
                me.peers[a.peer.index] = value
            else:
                for name, vals in value.items():
                    cur = me.state[name]
                    for j, v in enumerate(vals):
                        if v is not None:
                            cur[j] = v
            return
        if a.peer != plan.parent(me.role):                      # up
            if a.kind == "combine":
                me.contribs.append(value)
            else:
                me.up[a.kind] = merge(me.up.get(a.kind), value)
            return
        me.down[a.kind] = value                                 # down
        if plan.is_owner(me.role) and a.kind != "deliver":
            for name, vals in value.items():
                me.state[name] = list(vals)

    def value(self, me: RoleState, a: Action):
        plan = self.plan
        owner = plan.is_owner(me.role)
        if plan.mesh and owner and a.kind == "combine":         # owner to owner, or the loss up
            if not plan.is_owner(a.peer):
                return None if me.combined is None else me.combined[1]
            return self.block(me.contrib, a.peer.index)
        if plan.mesh and owner and plan.is_owner(a.peer):
            return self.share(me, a.kind)
        if a.peer == plan.parent(me.role):                      # up
            if a.kind == "combine":
                return me.contrib if owner else me.combined
            return self.share(me, a.kind) if owner else me.up[a.kind]
        if a.kind == "deliver":                                 # down
            g_n = me.combined if me.role == plan.root else me.down["deliver"]
            if plan.is_owner(a.peer) and "gradients" in plan.part:
                k = a.peer.index
                g, n = g_n
                sliced = {}
                for p in self.lr.params:
                    lo, hi = plan.dep.placement[p.group].range(k)
                    sliced[p.name] = tuple(v if lo <= j < hi else None for j, v in enumerate(g[p.name]))
                return sliced, n
            return g_n
        return me.up[a.kind] if me.role == plan.root else me.down[a.kind]

    def block(self, c, k: int):
        """Contribution c's sums for owner k's coordinates (its placement ranges), and n."""
        if c is None:
            return None
        g, n = c
        ranges = {p.name: self.plan.dep.placement[p.group].range(k) for p in self.lr.params}
        return {p: v[ranges[p][0]:ranges[p][1]] for p, v in g.items()}, n

    def share(self, me: RoleState, kind: str) -> dict[str, list]:
        """What an owner sends up for a gather or the publication (`Plan.carries`, each state's
        `Plan.source_range`); a value it should send but does not hold fails loudly."""
        plan, k = self.plan, me.role.index
        out = {}
        for s in plan.carries(kind):
            lo, hi = plan.source_range(k, s, kind)
            vals = only(me.state[s.name], lo, hi)
            if None in vals[lo:hi]:
                raise PlanError(f"{me.role} sends {s.name}[{lo}..{hi}) in {kind} but does not hold it")
            out[s.name] = vals
        return out

    def grads(self, me: RoleState) -> dict[str, list]:
        """The mean gradients of the delivered (G, n) (None where not delivered here)."""
        if self.lr.loss is None or "deliver" not in me.down:
            return {}
        g, n = me.down["deliver"]
        return {p: [None if v is None else f.div(v, float(n)) for v in vals] for p, vals in g.items()}

    # -- local operations ----------------------------------------------------------------------
    def local(self, me: RoleState, a: Action) -> None:
        plan, lr = self.plan, self.lr
        if a.op == "compute":
            lo, hi = plan.dep.samples.range(me.role.index)
            view = {}
            for s in plan.loss_reads():
                if None in me.state[s.name]:
                    raise PlanError(f"{me.role} computes its loss without holding all of {s.name}")
                view[s.name] = tuple(me.state[s.name])
            me.contrib = interp.owner_contribution(lr, view, interp.step_samples(lr, range(lo, hi), self.t))
        elif a.op == "combine" and plan.mesh:
            k = me.role.index
            parts = [self.block(me.contrib, k) if j == k else me.peers.pop(j)
                     for j in range(plan.dep.owners)]
            me.combined = evaluate_tree(plan.dep.combine_tree(), parts)
            if me.combined is not None:          # as the star delivers a slice: the rest absent
                g, n = me.combined
                full = {}
                for p in lr.params:
                    lo, hi = plan.dep.placement[p.group].range(k)
                    full[p.name] = (None,) * lo + tuple(g[p.name]) + (None,) * (p.size - hi)
                me.down["deliver"] = (full, n)
        elif a.op == "combine":
            if isinstance(plan.topo, Star):
                me.combined = evaluate_tree(plan.dep.combine_tree(), me.contribs)
            else:
                acc = None
                for v in me.contribs:
                    acc = interp.combine(acc, v)
                me.combined = acc
            if me.role == plan.root:              # exact_sum: rounded once, at the root
                me.combined = interp.rounded(me.combined)
            me.contribs = []
        elif a.op == "terms":                    # its coordinates' terms of each reduction
            reds = update_reductions(lr.update)
            for t in plan.reduce_terms():
                lo, hi = plan.updates(me.role.index)[t.group]
                try:
                    mine = interp.reduction_terms(lr, me.state, self.grads(me), reds[int(t.name[2:])],
                                                  range(lo, hi))
                except ValueError as e:
                    raise PlanError(f"{me.role}: {e}") from None
                me.state[t.name] = [None] * lo + mine + [None] * (t.size - hi)
        elif a.op == "update":
            coords = {g: range(lo, hi) for g, (lo, hi) in plan.updates(me.role.index).items()}
            terms = {t.name: me.state.pop(t.name) for t in plan.reduce_terms()}
            try:
                interp.apply_update_coords(lr, me.state, self.grads(me), coords, terms, self.t)
            except ValueError as e:
                raise PlanError(f"{me.role}: {e}") from None
            me.state = mask(plan, me.role.index, me.state)      # keep only what it holds
        elif a.op == "advance":
            me.down.clear()
            me.up.clear()
        elif a.op == "publish":
            me.published = me.up["publish"]


def run_plan(lr: Learner, plan: Plan, steps: int, state: dict[str, tuple] | None = None,
             start: int = 0) -> dict[str, tuple]:
    """Steps start .. start+steps-1 of the plan from `state` (default: the initial state); the
    published state."""
    if steps:
        interp.check_labels(lr)
    ex = Execution(plan, state or interp.initial_state(lr))
    if steps == 0:
        ex.run_step(final=True, only_publish=True)
    for step in range(steps):
        ex.t = start + step
        ex.run_step(final=step == steps - 1)
    out = ex.rs[plan.root].published
    missing = [f"{k}[{j}]" for k, v in out.items() for j, x in enumerate(v) if x is None]
    if missing:
        raise PlanError(f"nobody published {missing[0]}")
    return {k: tuple(v) for k, v in out.items()}
