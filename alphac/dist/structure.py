"""The structures a deployment is made of, described by formulas, never by lists of members.

- `Role`: a name and an index (`owner.3`) or a singleton (`coordinator`).
- `Ranges`: how `total` units (samples, coordinates) are split among `parts` members: `even`
  (member k holds [floor(k*T/P), floor((k+1)*T/P))) or explicit per-member ranges; coverage is
  checked by sorting ranges, so it costs the number of ranges, not the number of units.
- `Star` and `Hierarchy`: who talks to whom. A mesh is a star whose owners also talk to each
  other directly (`Star.mesh`): the center publishes and keeps the run's records, and the step's
  values go owner to owner (`exchange_rounds`). A hierarchy of fan-out F over P owners has levels of
  aggregator roles `agg1[...]`, `agg2[...]` below a `root`, each node's children a contiguous
  index range computed arithmetically; a node has at most F + 1 peers.
- `CombineTree` nodes: `Leaf(k)` (owner k's contribution) and `Node(children)`; hierarchy trees
  are never materialized: `Hierarchy.children` gives any node's children on demand.

Requires nothing; guarantees that every question (parent, children, holder of a sample or a
coordinate, count of a level) is answered in O(levels) time, so a 200,000-role deployment is
checked without enumerating roles.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_FANOUT = 64


@dataclass(frozen=True, order=True)
class Role:
    name: str
    index: int | None = None

    def __str__(self) -> str:
        return self.name if self.index is None else f"{self.name}.{self.index}"

    def ref(self) -> str:
        return self.name if self.index is None else f"{self.name}[{self.index}]"


@dataclass(frozen=True)
class Ranges:
    total: int
    parts: int
    explicit: tuple[tuple[int, int], ...] | None = None     # per member (lo, hi); None: even

    def range(self, k: int) -> tuple[int, int]:
        if self.explicit is not None:
            return self.explicit[k]
        return (k * self.total // self.parts, (k + 1) * self.total // self.parts)

    def size(self, k: int) -> int:
        lo, hi = self.range(k)
        return hi - lo

    @property
    def max_size(self) -> int:
        if self.explicit is not None:
            return max((hi - lo for lo, hi in self.explicit), default=0)
        return -(-self.total // self.parts) if self.parts else 0

    def holder(self, unit: int) -> int:
        if self.explicit is None:
            k = (unit * self.parts) // self.total
            while self.range(k)[0] > unit:
                k -= 1
            while self.range(k)[1] <= unit:
                k += 1
            return k
        for k, (lo, hi) in enumerate(self.explicit):
            if lo <= unit < hi:
                return k
        raise KeyError(unit)

    def describe(self, k: int) -> str:
        lo, hi = self.range(k)
        return f"{lo}..{hi}" if hi > lo else "none"


def coverage_problem(total: int, ranges: list[tuple[int, int, object]]) -> tuple[str, object] | None:
    """Check that the ranges (lo, hi, tag) cover 0..total exactly once. Returns None, or
    ("overlap" | "gap" | "beyond", tag) naming the first offending range's tag."""
    ordered = sorted((r for r in ranges if r[1] > r[0]), key=lambda r: (r[0], r[1]))
    at = 0
    for lo, hi, tag in ordered:
        if lo < at:
            return "overlap", tag
        if lo > at:
            return "gap", tag
        at = hi
    for lo, hi, tag in ranges:
        if lo < 0 or hi > total or hi < lo:
            return "beyond", tag
    if at != total:
        return "gap", None
    return None


@dataclass(frozen=True)
class Leaf:
    owner: int


@dataclass(frozen=True)
class Node:
    children: tuple


def tree_leaves(t) -> list[int]:
    if isinstance(t, Leaf):
        return [t.owner]
    out = []
    for c in t.children:
        out += tree_leaves(c)
    return out


def tree_text(t, owner: str = "owner") -> str:
    if isinstance(t, Leaf):
        return f"{owner}[{t.owner}]"
    return "(" + ", ".join(tree_text(c, owner) for c in t.children) + ")"


@dataclass(frozen=True)
class Star:
    center: Role
    owner: str
    owners: int
    mesh: bool = False

    def peers(self, role: Role) -> list[Role]:
        if role == self.center:
            return [Role(self.owner, k) for k in range(self.owners)]
        if self.mesh:
            return [self.center] + [Role(self.owner, j) for j in range(self.owners) if j != role.index]
        return [self.center]

    @property
    def max_peers(self) -> int:
        return max(self.owners, 1)

    @property
    def root(self) -> Role:
        return self.center


@dataclass(frozen=True)
class Hierarchy:
    """Levels from the top: level 0 is the root, levels 1..L-1 aggregators, then the owners."""
    fanout: int
    owner: str
    owners: int

    @property
    def counts(self) -> list[int]:
        counts = [self.owners]
        while counts[0] > 1 or len(counts) == 1:
            counts.insert(0, -(-counts[0] // self.fanout))
        return counts                        # counts[-1] is the owners; counts[0] == 1

    @property
    def depth(self) -> int:
        """Levels of combining roles (root and aggregators)."""
        return len(self.counts) - 1

    def level_name(self, level: int) -> str:
        if level == 0:
            return "root"
        if level == self.depth:
            return self.owner
        return f"agg{level}"

    def role(self, level: int, k: int) -> Role:
        return Role("root") if level == 0 else Role(self.level_name(level), k)

    def level_of(self, role: Role) -> int:
        if role.name == "root":
            return 0
        if role.name == self.owner:
            return self.depth
        return int(role.name[3:])

    @property
    def root(self) -> Role:
        return Role("root")

    def children(self, role: Role) -> list[Role]:
        level = self.level_of(role)
        if level == self.depth:
            return []
        k = role.index or 0
        below = self.counts[level + 1]
        return [self.role(level + 1, c) for c in range(k * self.fanout, min((k + 1) * self.fanout, below))]

    def parent(self, role: Role) -> Role | None:
        level = self.level_of(role)
        if level == 0:
            return None
        return self.role(level - 1, (role.index or 0) // self.fanout)

    def peers(self, role: Role) -> list[Role]:
        p = self.parent(role)
        return ([p] if p else []) + self.children(role)

    @property
    def max_peers(self) -> int:
        return self.fanout + 1 if self.depth > 1 else self.fanout

    def tree(self, role: Role | None = None):
        """The combine tree below `role` (materialized: only for small hierarchies)."""
        role = role or self.root
        if role.name == self.owner:
            return Leaf(role.index)
        return Node(tuple(self.tree(c) for c in self.children(role)))

    def subtree_owners(self, role: Role) -> tuple[int, int]:
        """The contiguous owner range below a node."""
        level = self.level_of(role)
        span = self.fanout ** (self.depth - level)
        k = role.index or 0
        return (min(k * span, self.owners), min((k + 1) * span, self.owners))


def exchange_rounds(owners: int) -> list[list[tuple[int, int]]]:
    """A mesh's pairwise exchange: rounds of disjoint pairs (a, b), a < b, in which every two
    owners meet exactly once (the circle method; with an odd count one owner sits each round
    out). In a pair the lower owner sends first, then receives; the higher receives first: so
    a round completes even when every send waits for its receiver (no buffering assumed), and
    the rounds complete in order."""
    n = owners + owners % 2
    out = []
    for r in range(n - 1):
        ring = [n - 1] + [(r + i) % (n - 1) for i in range(n - 1)]
        pairs = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a < owners and b < owners:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
    return out
