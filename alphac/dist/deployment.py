"""Checking a deployment: syntax items -> a `Deployment` (or coded diagnostics).

What is checked, each refused by name with the source position of the offending item:
membership (index nodes of one name overlap: E0102, leave a gap: E0103; unknown roles: E0104),
the topology (E0113) and its fan-out bound (E0109), a mesh's strategy and contract (E0118), the sample split (every sample exactly once:
E0105), the combine tree (a contribution missing: E0106, duplicated: E0107, not the hierarchy's
own tree: E0115), the strategy (E0112) and its placement (every coordinate of every partitioned
state exactly once: E0108), delivery (E0116), targets (E0111). Memory admission (E0110) needs the
plan's demand and is checked in `alphac.dist.plan`.

Every check is over index nodes and ranges, never over the members they describe, so a
200,000-role deployment checks in the time of a small one.

Requires: a checked `Learner` and the parsed `DeploymentDecl`/`StrategyDecl`s. Guarantees: a
`Deployment` only when the sink holds no new errors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

from alphac.diag import Sink, Source, Span
from alphac.dist.structure import (MAX_FANOUT, Hierarchy, Leaf, Node, Ranges, Role, Star,
                                   coverage_problem, tree_leaves, tree_text)
from alphac.ir.learner import Learner, postorder, update_reductions
from alphac.targets import gpu_targets, names
from alphac.parse.deploy import DeploymentDecl, RoleRef, StrategyDecl

CLASSES = ("params", "state", "gradients")


@dataclass(frozen=True)
class Strategy:
    name: str
    partition: frozenset[str]
    replicate: frozenset[str]

    @property
    def partitioned_update(self) -> bool:
        return bool(self.partition)

    def describe(self) -> str:
        parts = []
        if self.partition:
            parts.append("partition " + ", ".join(sorted(self.partition)))
        rep = sorted(set(CLASSES) - self.partition)
        if rep:
            parts.append("replicate " + ", ".join(rep))
        return "; ".join(parts)


@dataclass
class Deployment:
    name: str
    learner: Learner
    roles: list[tuple[str, int | None, int | None]]      # index nodes (name, lo, hi)
    owner: str
    owners: int
    topology: Star | Hierarchy
    samples: Ranges
    tree: object                                          # Node/Leaf, or None: the hierarchy's
    deliver: int | None                                   # None: every owner
    strategy: Strategy
    placement: dict[int, Ranges]                          # coordinate group -> ranges
    targets: dict[Role | str, str] = field(default_factory=dict)
    memory: dict[Role | str, int] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)
    gpus: dict[Role, tuple[str, Span]] = field(default_factory=dict)  # GPU owner -> host file

    def gpu_of(self, role: Role) -> tuple[str, Span] | None:
        """A GPU owner's host description (the file as written, and where), or None."""
        return self.gpus.get(role) or self.gpus.get(role.name)

    def target_of(self, role: Role) -> str:
        return self.targets.get(role) or self.targets.get(role.name) or "x86_64"

    def supply_of(self, role: Role) -> int | None:
        v = self.memory.get(role)
        return v if v is not None else self.memory.get(role.name)

    def combine_tree(self):
        if self.tree is not None:
            return self.tree
        if isinstance(self.topology, Hierarchy):
            return self.topology.tree()
        return Node(tuple(Leaf(k) for k in range(self.owners)))

    def tree_text(self) -> str:
        if self.tree is None and isinstance(self.topology, Hierarchy) and self.owners > 64:
            return f"the hierarchy's tree (fan-out {self.topology.fanout})"
        return tree_text(self.combine_tree(), self.owner)


def strategy_library(sink: Sink) -> dict[str, StrategyDecl]:
    from alphac.parse import parse_library
    text = resources.files("alphac.dist").joinpath("strategies.alpha").read_text()
    decls = parse_library(Source("alphac/dist/strategies.alpha", text), sink)
    return {d.name: d for d in decls if isinstance(d, StrategyDecl)}


class DeploymentChecker:
    def __init__(self, lr: Learner, decl: DeploymentDecl, strategies: dict[str, StrategyDecl],
                 sink: Sink):
        self.lr, self.decl, self.strategies, self.sink = lr, decl, strategies, sink
        self.items: dict[str, object] = {}
        self.errors0 = len(sink.errors)

    def err(self, code: str, span: Span, msg: str, hint: str | None = None) -> None:
        self.sink.error(code, span, msg, hint)

    @property
    def ok(self) -> bool:
        return len(self.sink.errors) == self.errors0

    def run(self) -> Deployment | None:
        for it in self.decl.items:
            if it.kind in self.items:
                self.err("E0114", it.span, f"`{it.kind}` is given twice in deployment `{self.decl.name}`")
                continue
            self.items[it.kind] = it
        for need in ("roles", "topology"):
            if need not in self.items:
                self.err("E0114", self.decl.name_span, f"deployment `{self.decl.name}` has no `{need}`")
        if not self.ok:
            return None
        roles = self.membership()
        if roles is None:
            return None
        topo = self.topology(roles)
        if topo is None:
            return None
        owner, owners = topo.owner, topo.owners
        self.owner, self.owners, self.topo = owner, owners, topo
        roles = self.roles                       # with the hierarchy's own roles added
        samples = self.samples()
        tree = self.tree()
        strategy = self.strategy()
        deliver = self.deliver(strategy)
        if self.ok and strategy is not None:
            self.mesh_fits(strategy)
            self.reductions_fit(strategy, deliver)
        placement = self.placement(strategy) if strategy else {}
        targets = self.per_role("target", lambda v, span: self.target_name(v, span))
        memory = self.per_role("memory", lambda v, span: v[0])
        gpus = self.per_role("gpu", lambda v, span: (v.value, v.span))
        if self.ok:
            self.gpu_roles(targets, gpus)
        if not self.ok:
            return None
        return Deployment(self.decl.name, self.lr, roles, owner, owners, topo, samples, tree,
                          deliver, strategy, placement, targets, memory,
                          {k: it.span for k, it in self.items.items()}, gpus)

    # -- membership ----------------------------------------------------------------------------
    def membership(self):
        it = self.items["roles"]
        by_name: dict[str, list] = {}
        for d in it.value:
            by_name.setdefault(d.name, []).append(d)
        nodes = []
        for name, decls in sorted(by_name.items()):
            singles = [d for d in decls if d.lo is None]
            if singles and len(decls) > 1:
                self.err("E0102", decls[1].span, f"role `{name}` is declared twice")
                continue
            if singles:
                nodes.append((name, None, None))
                continue
            for d in decls:
                if d.hi <= d.lo:
                    self.err("E0103", d.span, f"`{name}[{d.lo}..{d.hi}]` is empty")
            problem = coverage_problem(max(d.hi for d in decls), [(d.lo, d.hi, d) for d in decls])
            if problem is not None:
                kind, d = problem
                if kind == "overlap":
                    self.err("E0102", d.span, f"index nodes of `{name}` overlap at `{name}[{d.lo}]`",
                             hint="each role index may be declared once")
                elif kind == "gap":
                    span = d.span if d is not None else decls[0].span
                    self.err("E0103", span, f"index nodes of `{name}` leave a gap"
                             + (f" before `{name}[{d.lo}]`" if d is not None else ""),
                             hint=f"the nodes of `{name}` must cover {name}[0] to the last index")
                continue
            nodes.append((name, 0, max(d.hi for d in decls)))
        return nodes if self.ok else None

    def resolve(self, ref: RoleRef, allow_star: bool = True) -> list[Role] | str | None:
        """A role reference as roles; "*" refs give the name (a whole index node)."""
        for name, lo, hi in self.roles:
            if name != ref.name:
                continue
            if lo is None:
                if ref.index is not None:
                    self.err("E0104", ref.span, f"`{name}` is a single role; it has no index")
                    return None
                return [Role(name)]
            if ref.index is None or ref.index == "*":
                if not allow_star:
                    self.err("E0104", ref.span, f"`{name}` has {hi} members; name one, as `{name}[0]`")
                    return None
                return name
            if not 0 <= ref.index < hi:
                self.err("E0104", ref.span, f"`{ref.name}[{ref.index}]` is not a role: `{name}` has {hi}")
                return None
            return [Role(name, ref.index)]
        known = ", ".join(n for n, _, _ in self.roles)
        self.err("E0104", ref.span, f"no role `{ref.name}` in this deployment", hint=f"roles: {known}")
        return None

    # -- topology ------------------------------------------------------------------------------
    def topology(self, roles):
        self.roles = roles
        it = self.items["topology"]
        kind, arg = it.value
        indexed = [(n, hi) for n, lo, hi in roles if lo is not None]
        if kind in ("star", "mesh"):
            center = self.resolve(arg, allow_star=False)
            if center is None:
                return None
            center = center[0]
            if center.index is not None:
                self.err("E0113", arg.span, f"a {kind}'s center must be a single role (e.g. `coordinator`)")
                return None
            others = [(n, hi) for n, hi in indexed]
            singles = [n for n, lo, hi in roles if lo is None and n != center.name]
            if len(others) != 1 or singles:
                self.err("E0113", it.span, f"a {kind} has its center and one indexed role of owners",
                         hint="declare e.g. `roles coordinator, owner[4]`")
                return None
            owner, owners = others[0]
            if owners > MAX_FANOUT:
                self.err("E0109", it.span, f"the {kind}'s center would talk to {owners} owners; the "
                                           f"bound is {MAX_FANOUT}",
                         hint=f"use `topology hierarchy(fanout {MAX_FANOUT})`")
                return None
            return Star(center, owner, owners, mesh=kind == "mesh")
        fanout = arg
        if fanout < 2 or fanout > MAX_FANOUT:
            self.err("E0109" if fanout > MAX_FANOUT else "E0113", it.span,
                     f"fan-out {fanout} is outside 2..{MAX_FANOUT}")
            return None
        if len(indexed) != 1:
            self.err("E0113", it.span, "a hierarchy needs exactly one indexed role of owners",
                     hint="declare e.g. `roles owner[200000]`; the root and aggregators follow")
            return None
        owner, owners = indexed[0]
        h = Hierarchy(fanout, owner, owners)
        derived = {h.level_name(l) for l in range(h.depth)}
        clash = [n for n, _, _ in roles if n in derived]
        if clash:
            self.err("E0113", it.span, f"role name `{clash[0]}` is taken by the hierarchy's own roles")
            return None
        self.roles = roles + [(h.level_name(l), None if l == 0 else 0, None if l == 0 else h.counts[l])
                              for l in range(h.depth)]
        return h

    def mesh_fits(self, strategy: Strategy) -> None:
        """A mesh reduce-scatters: each owner combines the coordinates it owns, so the strategy
        must partition the gradients; the contributions are rounded binary64 sums."""
        if not (isinstance(self.topo, Star) and self.topo.mesh):
            return
        it = self.items["topology"]
        if "gradients" not in strategy.partition:
            span = self.items["strategy"].span if "strategy" in self.items else it.span
            self.err("E0118", span, f"strategy `{strategy.name}` replicates the gradients; a mesh "
                                    "combines each owner's coordinates at that owner",
                     hint="use `strategy zero2` or `strategy zero3`, or `topology star(...)`")
        elif self.lr.exact_sums:
            self.err("E0118", it.span, "a mesh combines rounded binary64 sums; this learner's "
                                       "contract is exact_sum", hint="use `topology star(...)`")

    def reductions_fit(self, strategy: Strategy, deliver: int | None) -> None:
        """The update's reduced scalars (docs/language.md) are computed where they are read:
        delivered to one owner, only that one holds their operands, so no scalar-state
        statement (run by every owner) may read them (E0119). Under a partitioned update the
        plan gathers their terms (docs/distribution.md)."""
        reds = {id(n) for n in update_reductions(self.lr.update)}
        if deliver is None or not reds:
            return
        scalar = [a.target for a in self.lr.update if self.lr.state(a.target).group is None
                  and any(id(n) in reds for n in postorder([a.node]))]
        if scalar:
            self.err("E0119", self.items["deliver"].span, f"scalar state `{scalar[0]}` reads a "
                     "reduction of the update, and only the delivered owner holds its operands",
                     hint="use `deliver all`")

    # -- samples and combine ---------------------------------------------------------------------
    def owner_ranges(self, item, total: int, what: str, code: str) -> Ranges | None:
        if item.value == "even":
            return Ranges(total, self.owners)
        state, assigns = item.value
        explicit: list[tuple[int, int] | None] = [None] * self.owners
        tags = []
        for refs, rng in assigns:
            for ref in refs:
                roles = self.resolve(ref, allow_star=False)
                if roles is None:
                    continue
                role = roles[0]
                if role.name != self.owner:
                    self.err("E0104", ref.span, f"`{role.ref()}` is not an owner; only owners hold {what}")
                    continue
                if explicit[role.index] is not None:
                    self.err(code, ref.span, f"`{role.ref()}` is given {what} twice")
                    continue
                explicit[role.index] = (rng.lo, rng.hi)
                tags.append((rng.lo, rng.hi, rng.span))
        if not self.ok:
            return None
        problem = coverage_problem(total, tags)
        if problem is not None:
            kind, span = problem
            msg = {"overlap": "ranges overlap", "gap": "ranges leave a gap",
                   "beyond": "a range reaches past the end"}[kind]
            self.err(code, span or item.span, f"{what}: {msg} (there are {total}: 0..{total})")
            return None
        return Ranges(total, self.owners, tuple(r if r else (0, 0) for r in explicit))

    def samples(self) -> Ranges | None:
        total = self.lr.nsamples or 0
        it = self.items.get("samples")
        if it is None:
            return Ranges(total, self.owners)
        if it.value != "even" and it.value[0] is not None:
            self.err("E0101", it.span, "samples are split by owner, not by state")
            return None
        return self.owner_ranges(it, total, "samples", "E0105")

    def tree(self):
        it = self.items.get("combine")
        if it is None:
            return None
        def build(t):
            if isinstance(t, tuple):
                kids = [build(c) for c in t]
                return None if any(k is None for k in kids) else Node(tuple(kids))
            roles = self.resolve(t, allow_star=False)
            if roles is None:
                return None
            if roles[0].name != self.owner:
                self.err("E0104", t.span, f"`{roles[0].ref()}` is not an owner; a combine tree "
                                          f"combines owners' contributions")
                return None
            return Leaf(roles[0].index)
        tree = build(it.value)
        if tree is None:
            return None
        if isinstance(tree, Leaf):
            tree = Node((tree,))
        leaves = tree_leaves(tree)
        seen = set()
        for k in leaves:
            if k in seen:
                self.err("E0107", it.span, f"`{self.owner}[{k}]` appears twice in the combine tree")
                return None
            seen.add(k)
        missing = [k for k in range(self.owners) if k not in seen]
        if missing:
            self.err("E0106", it.span, f"the combine tree misses `{self.owner}[{missing[0]}]`"
                     + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
            return None
        if isinstance(self.topo, Hierarchy):
            if self.owners > 4096 or tree != self.topo.tree():
                self.err("E0115", it.span, "a hierarchy combines in its own tree: "
                         + (tree_text(self.topo.tree(), self.owner) if self.owners <= 64 else
                            f"fan-out {self.topo.fanout}"),
                         hint="remove `combine`, or write exactly that tree")
                return None
        return tree

    # -- strategy, placement, delivery --------------------------------------------------------------
    def strategy(self) -> Strategy | None:
        it = self.items.get("strategy")
        name, span = it.value if it else ("replicated", self.decl.name_span)
        decl = self.strategies.get(name)
        if decl is None:
            self.err("E0112", span, f"unknown strategy `{name}`",
                     hint="library strategies: " + ", ".join(sorted(self.strategies)))
            return None
        part, rep = set(), set()
        for cls, cspan in decl.partition + decl.replicate:
            if cls not in CLASSES:
                self.err("E0112", cspan, f"`{cls}` is not a class of state",
                         hint="the classes are params, state and gradients")
                return None
        for cls, cspan in decl.partition:
            if cls in part:
                self.err("E0112", cspan, f"strategy `{name}` partitions `{cls}` twice")
            part.add(cls)
        for cls, cspan in decl.replicate:
            if cls in part or cls in rep:
                self.err("E0112", cspan, f"strategy `{name}` says `{cls}` twice")
            rep.add(cls)
        return Strategy(name, frozenset(part), frozenset(rep)) if self.ok else None

    def placement(self, strategy: Strategy) -> dict[int, Ranges]:
        it = self.items.get("partition")
        groups = self.lr.groups
        if not strategy.partitioned_update:
            if it is not None:
                self.err("E0112", it.span, f"strategy `{strategy.name}` partitions nothing, so "
                                           "there is nothing to place")
            return {}
        if it is None or it.value == "even":
            return {g.index: Ranges(g.size, self.owners) for g in groups}
        state, _ = it.value
        out = {}
        for g in groups:
            if state is not None and state not in g.members:
                out[g.index] = Ranges(g.size, self.owners)
                continue
            r = self.owner_ranges(it, g.size, f"coordinates of `{g.members[0]}`", "E0108")
            if r is None:
                return {}
            out[g.index] = r
        if state is not None and not any(state in g.members for g in groups):
            self.err("E0104", it.span, f"`{state}` is not a per-coordinate state of the learner")
        return out

    def deliver(self, strategy: Strategy | None):
        it = self.items.get("deliver")
        if it is None or it.value == "all":
            return None
        roles = self.resolve(it.value, allow_star=False)
        if roles is None:
            return None
        if roles[0].name != self.owner:
            self.err("E0104", it.value.span, "the combined value is delivered to an owner")
            return None
        if strategy is not None and strategy.partitioned_update:
            self.err("E0116", it.span, f"strategy `{strategy.name}` keeps state on every owner; "
                                       "the combined value must reach them all",
                     hint="use `deliver all`, or a strategy that replicates everything")
            return None
        if self.lr.loss is None:
            self.err("E0116", it.span, "a learner without a loss combines nothing to deliver")
            return None
        return roles[0].index

    def target_name(self, tok, span):
        if tok.text not in names() + gpu_targets():
            self.err("E0111", tok.span, f"unsupported target `{tok.text}`",
                     hint="targets: " + ", ".join(names() + gpu_targets()))
            return None
        return tok.text

    def gpu_roles(self, targets: dict, gpus: dict) -> None:
        """A GPU target runs an owner's compute, on the card its `gpu` item describes; a card is
        given only to a GPU owner."""
        it = self.items.get("target")
        for key, t in sorted(targets.items(), key=lambda kv: str(kv[0])):
            if "+" not in t:
                continue
            name, ref = (key, key) if isinstance(key, str) else (key.name, key.ref())
            if name != self.owner:
                self.err("E0111", it.span, f"`{ref}` cannot have the GPU target `{t}`: a GPU "
                                           "runs an owner's compute",
                         hint=f"give GPU targets to `{self.owner}` roles only")
            elif key not in gpus and name not in gpus:
                self.err("E0122", it.span, f"GPU owner `{ref}` has no host description",
                         hint=f'add `gpu {ref} = "FILE.gpuhost"` (docs/nvdrv.md describes the file)')
        for key, (_, span) in sorted(gpus.items(), key=lambda kv: str(kv[0])):
            t = targets.get(key) or (targets.get(key.name) if isinstance(key, Role) else None)
            if t is None or "+" not in t:
                self.err("E0122", span, f"`{key if isinstance(key, str) else key.ref()}` is given a GPU host but its target is "
                                        f"`{t or 'x86_64'}`", hint="give it a GPU target, such "
                                                               "as `target ... = x86_64+sm_90`")

    def per_role(self, kind: str, value) -> dict:
        it = self.items.get(kind)
        out: dict = {}
        if it is None:
            return out
        for refs, v in it.value:
            val = value(v, it.span)
            if val is None:
                continue
            for ref in refs:
                r = self.resolve(ref)
                if r is None:
                    continue
                keys = [r] if isinstance(r, str) else r
                for key in keys:
                    if key in out:
                        self.err("E0114", ref.span, f"`{ref.name}` is given a {kind} twice")
                    out[key] = val
        return out


def check_deployments(lr: Learner, module, sink: Sink) -> dict[str, Deployment]:
    """Every deployment declared in the learner's file, checked."""
    from alphac.parse.deploy import DeploymentDecl, StrategyDecl
    strategies = strategy_library(sink)
    for d in module.decls:
        if isinstance(d, StrategyDecl):
            strategies[d.name] = d
    out = {}
    for d in module.decls:
        if isinstance(d, DeploymentDecl):
            if d.name in out:
                sink.error("E0021", d.name_span, f"deployment `{d.name}` is declared twice")
                continue
            dep = DeploymentChecker(lr, d, strategies, sink).run()
            if dep is not None:
                out[d.name] = dep
    return out
