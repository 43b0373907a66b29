"""An index node -> one program for all of its roles, the role chosen at run time by `--rank`.

Requires: a checked `Plan` and one of its index nodes (`nodes(plan)`): a declared node of
owners (`owner[0..100000]`), or a level of combining roles of a hierarchy (`agg2`, 3,125 roles).
Guarantees: the program a member runs is the program `alphac.lower.role` generates for that
member alone, with each value that depends on the member's index (its samples, coordinates,
slices, children, parent, name and the subtrees it combines) computed at start from the index
by the plan's own formulas (`Ranges`, `Hierarchy`), and the actions for a child the member does
not have skipped. Every member of a node has the first member's program with later children
removed (`check_shape` proves it for the first and last member before anything is emitted).

What is not built this way is refused by name (BuildError): GPU owners, a plan that delivers to
one owner, placements not in owner order, a star whose center would handle more children than
MAX_STAR children in its own code.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from alphac.diag import BuildError
from alphac.dist.plan import Plan
from alphac.dist.structure import Hierarchy, Ranges, Role, Star
from alphac.lower.role import RoleLowering, code_of, role_codes

MAX_STAR = 4096          # a star's center is one role: its code names each owner


class Sym:
    """An i64 expression of the runtime language: a value an index node knows at run time.
    Arithmetic with ints folds the identities; comparing one is a bug (TypeError), since a
    build-time decision must not depend on a run-time value."""
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __format__(self, spec: str) -> str:
        return self.text

    def __add__(self, o):
        return self if o == 0 else Sym(f"{self.text} + {_paren(o)}")

    def __radd__(self, o):
        return self if o == 0 else Sym(f"{o} + {self.text}")

    def __sub__(self, o):
        return self if o == 0 else Sym(f"{self.text} - {_paren(o)}")

    def __rsub__(self, o):
        return Sym(f"{o} - ({self.text})")

    def __mul__(self, o):
        if o == 0:
            return 0
        return self if o == 1 else Sym(f"({self.text}) * {_paren(o)}")

    __rmul__ = __mul__

    def __floordiv__(self, o: int):
        return self if o == 1 else Sym(f"udiv({self.text}, {o})")

    def _no(self, *_):
        raise TypeError(f"a run-time value ({self.text}) in a build-time decision")

    __lt__ = __le__ = __gt__ = __ge__ = __bool__ = _no


def _paren(x) -> str:
    return f"({x.text})" if isinstance(x, Sym) else str(x)


def fmin(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return Sym(f"min_i64({a}, {b})")


@dataclass(frozen=True)
class Node:
    """Roles name[lo..hi) built as one program (lo is None: a role without an index)."""
    name: str
    lo: int | None
    hi: int | None
    rank: int                       # the rank of member lo
    level: int                      # its level in a hierarchy (star: 0 center, 1 owners)

    @property
    def size(self) -> int:
        return 1 if self.lo is None else self.hi - self.lo

    @property
    def file(self) -> str:
        if self.lo is None:
            return self.name
        return f"{self.name}.{self.lo}" if self.size == 1 else f"{self.name}.{self.lo}-{self.hi}"

    def role(self, k: int | None = None) -> Role:
        return Role(self.name) if self.lo is None else Role(self.name, self.lo if k is None else k)

    def members(self) -> range:
        return range(1) if self.lo is None else range(self.lo, self.hi)

    def describe(self) -> str:
        return self.name if self.lo is None else f"{self.name}[{self.lo}..{self.hi}]"


def nodes(plan: Plan) -> list[Node]:
    """The deployment's index nodes, in rank order: the center or root, each level of
    aggregators, then the owners; each split where the members' target changes (the targets
    given role by role), a GPU owner always a node of its own."""
    t, dep = plan.topo, plan.dep
    if isinstance(t, Star):
        levels = [(t.center.name, None, 1), (dep.owner, 1, dep.owners)]
    else:
        levels = [("root" if lv == 0 else t.level_name(lv), None if lv == 0 else sum(t.counts[:lv]),
                   t.counts[lv]) for lv in range(t.depth + 1)]
    out = []
    for level, (name, base, count) in enumerate(levels):
        if base is None:
            out.append(Node(name, None, None, 0, level))
            continue
        cuts = {0, count}
        for key, tg in dep.targets.items():
            if isinstance(key, Role) and key.name == name and 0 <= key.index < count:
                cuts |= {key.index, key.index + 1}
        cuts = sorted(cuts)
        runs: list[list[int]] = []
        for a, b in zip(cuts, cuts[1:]):
            tg = dep.target_of(Role(name, a))
            if runs and "+" not in tg and dep.target_of(Role(name, runs[-1][0])) == tg:
                runs[-1][1] = b
            else:
                runs.append([a, b])
        out += [Node(name, a, b, base + a, level) for a, b in runs]
    return out


class FleetLowering(RoleLowering):
    """RoleLowering for a node's member k = load64(role_k), its first member's shape."""

    def __init__(self, plan: Plan, node: Node):
        self.node = node
        refuse_unbuildable(plan, node)
        super().__init__(plan, node.role())
        self.k = Sym("load64(role_k)")
        self.slot = {c: i for i, c in enumerate(self.children)}
        # the largest deliver message: every param's largest slice, and n
        if "gradients" in plan.part:
            self.msg_words = sum(plan.dep.placement[p.group].max_size for p in self.params) + 1

    # -- run-time values --------------------------------------------------------------------------
    def ranges_of(self, r: Ranges, k, tag: str):
        if isinstance(k, int):
            return r.range(k)
        if r.explicit is None:
            return (k * r.total // r.parts, (k + 1) * r.total // r.parts)
        name = f"fx_{tag}"
        if name not in self.tables:
            self.tables[name] = b"".join(lo.to_bytes(8, "little") + hi.to_bytes(8, "little")
                                         for lo, hi in r.explicit)
        return Sym(f"load64({name} + 16 * ({k}))"), Sym(f"load64({name} + 16 * ({k}) + 8)")

    def placement(self, group: int, k):
        return self.ranges_of(self.plan.dep.placement[group], k, f"g{group}")

    def samples(self):
        return self.ranges_of(self.plan.dep.samples, self.k, "samples")

    def updates(self) -> dict:
        lr = self.lr
        if self.plan.dep.strategy.partitioned_update:
            return {g.index: self.placement(g.index, self.k) for g in lr.groups}
        return {g.index: (0, g.size) for g in lr.groups}

    def slices(self, k):
        return [(p.name, *self.placement(p.group, k)) for p in self.params]

    def some(self, lo, hi) -> bool:
        return True if isinstance(lo, Sym) or isinstance(hi, Sym) else hi > lo

    def holdings(self, k=None):
        k = self.k if k is None else k
        out = []
        for s in self.lr.states:
            if self.plan.partitioned(s):
                out.append((s.name, *self.placement(s.group, k)))
            elif s.size > 0:
                out.append((s.name, 0, s.size))
        return out

    def subtree_of(self, level: int, k):
        """The owners [a, b) below member k of `level`."""
        t = self.plan.topo
        if isinstance(t, Star) or level == t.depth:
            return k, k + 1
        span = t.fanout ** (t.depth - level)
        return fmin(k * span, t.owners), fmin((k + 1) * span, t.owners)

    def subtree(self, role: Role):
        if role == self.role:
            return self.subtree_of(self.node.level, self.k)
        return self.subtree_of(self.node.level + 1, self.index_of(role))

    def held(self, child: Role, s, kind: str):
        a, b = self.subtree(child)
        alike = s.group is None or (kind == "publish" and self.plan.holds_all(s.kind))
        if alike:                   # from owner 0's subtree: the first child of member 0
            return [(0, Sym(f"{s.size} * ({a} == 0)"))]
        return [(self.placement(s.group, a)[0], self.placement(s.group, b - 1)[1])]

    # -- peers --------------------------------------------------------------------------------------
    def code(self, peer: Role):
        if peer == self.parent:
            return "load64(role_parent_code)"
        return f"load64(role_kid_code) + {self.slot[peer]}"

    def index_of(self, peer: Role):
        return Sym(f"load64(role_kid0) + {self.slot[peer]}")

    @contextmanager
    def kid(self, slot: int):
        start = len(self.lines)
        yield
        if slot > 0:
            body = self.lines[start:]
            self.lines[start:] = ([f"    if load64(role_nkids) > {slot} {{"]
                                  + ["    " + ln for ln in body] + ["    }"])

    def guard(self, peer: Role, lines: list[str]) -> list[str]:
        slot = self.slot.get(peer, 0)
        if slot == 0:
            return lines
        return [f"if load64(role_nkids) > {slot} {{"] + ["    " + ln for ln in lines] + ["}"]

    def action(self, a) -> None:
        with self.kid(self.slot.get(a.peer, 0)):
            super().action(a)

    def need(self, words) -> None:
        if isinstance(words, int):
            super().need(words)

    def records(self, at):
        kids = len(self.children)
        if at % kids:
            raise BuildError(f"{self.node.describe()}: its children send unequal checkpoint records")
        return Sym(f"load64(role_nkids) * {at // kids}")

    def name_text(self) -> str:
        return "role_name"

    def manifest_text(self) -> str:
        return "role_man"

    # -- who it is ------------------------------------------------------------------------------------
    def describe(self) -> str:
        return f"index node {self.node.describe()}"

    def name_declaration(self) -> str:
        name = len(self.node.name.encode()) + 1 + 20 + 1        # NAME.K, K of at most 20 digits
        return "\n".join([f"global role_name: [u8; {name}];", f"global role_man: [u8; {name + 9}];",
                          "global role_k: [i64; 1];", "global role_kid0: [i64; 1];",
                          "global role_kid_code: [i64; 1];"] +
                         [f"data {n}: [u8; {len(b)}] = extern;" for n, b in sorted(self.tables.items())])

    def generate(self):
        self.tables: dict[str, bytes] = {}
        check_shape(self.plan, self.node)
        text, blobs = super().generate()
        blobs.update(self.tables)
        return text, blobs

    def setup(self, kids: list[int]) -> list[str]:
        """role_setup(rank): the member from `--rank` (required), checked against the node's
        ranks; its index, code, rank, parent, children and name."""
        plan, node = self.plan, self.node
        codes = role_codes(plan)
        out = ["fn role_setup(rank: i64) {",
               "    if rank < 0 { rt_usage_refuse(\"--rank\", \"missing\"); }  // an index node's member: --rank R",
               f"    if rank < {node.rank} || rank >= {node.rank + node.size} {{ refuse(\"rank-out-of-range\"); }}",
               f"    let k = rank - {node.rank - node.lo};",
               "    store64(role_k, k);",
               f"    store64(net_sender, {codes[node.name] << 24} + k);",
               "    store64(role_rank, rank);"]
        t = plan.topo
        if isinstance(t, Star):
            out += [f"    store64(role_parent_rank, 0);",
                    f"    store64(role_parent_code, {code_of(plan, t.center)});",
                    "    store64(role_nkids, 0);"]
        else:
            up = node.level - 1
            pbase = sum(t.counts[:up])
            pname = t.level_name(up)
            out += [f"    let pk = udiv(k, {t.fanout});",
                    f"    store64(role_parent_rank, {pbase} + pk);",
                    f"    store64(role_parent_code, {codes[pname] << 24} + pk);"]
            if kids:
                below = t.counts[node.level + 1]
                out += [f"    let kid0 = k * {t.fanout};",
                        "    store64(role_kid0, kid0);",
                        f"    store64(role_kid_code, {codes[t.level_name(node.level + 1)] << 24} + kid0);",
                        f"    store64(role_nkids, min_i64(kid0 + {t.fanout}, {below}) - kid0);"]
            else:
                out += ["    store64(role_nkids, 0);"]
        prefix = f"{node.name}."
        out += [f'    let at = put(role_name, 0, "{prefix}", {len(prefix)}, "buffer-bound");',
                '    at = put_dec(role_name, at, k, "buffer-bound");',
                '    put_byte(role_name, at, 0, "buffer-bound");',
                '    put(role_man, put(role_man, 0, role_name, at, "buffer-bound"), "/MANIFEST", 10, "buffer-bound");',
                "}", "",
                "fn role_child_slot(code: i64) -> i64 {",
                "    let c = code - load64(role_kid_code);",
                "    if c >= 0 && c < load64(role_nkids) { return c; }",
                "    return -1;", "}"]
        return out


def refuse_unbuildable(plan: Plan, node: Node) -> None:
    dep = plan.dep
    where = f"index node {node.describe()} of deployment `{dep.name}`"
    if plan.deliver_one is not None:
        raise BuildError(f"{where}: a plan that delivers to one owner is built one executable per role")
    if plan.mesh:
        raise BuildError(f"{where}: a mesh is built one executable per role (its owners name each other)")
    if isinstance(plan.topo, Star) and dep.owners > MAX_STAR:
        raise BuildError(f"{where}: a star's center names each of its {dep.owners} owners in its "
                         f"code (at most {MAX_STAR}); give the deployment `topology hierarchy(fanout F)`")
    if len(node.name) > 40:
        raise BuildError(f"{where}: a role name of over 40 characters is built one executable per role")
    if dep.owners >= 1 << 24:
        raise BuildError(f"{where}: role codes hold indices below 2^24")
    targets = {node_target(plan, node)}
    if any("+" in t for t in targets):
        raise BuildError(f"{where}: GPU owners are built one executable per role")
    for g, r in sorted(dep.placement.items()):
        if r.explicit is not None and any(r.explicit[k][0] != (r.explicit[k - 1][1] if k else 0)
                                          for k in range(len(r.explicit))):
            raise BuildError(f"{where}: group {g}'s placement is not in owner order")


def node_target(plan: Plan, node: Node) -> str:
    """The node's target: one for all its members (BuildError otherwise)."""
    dep = plan.dep
    first = dep.target_of(node.role())
    for key, t in dep.targets.items():
        if isinstance(key, Role) and key.name == node.name and t != first and \
                node.lo is not None and node.lo <= key.index < node.hi:
            raise BuildError(f"index node {node.describe()} has members of two targets "
                             f"({first}, {t}): declare them as separate nodes")
    return first


def check_shape(plan: Plan, node: Node) -> None:
    """Every member's projected program is the first member's with its later children's actions
    removed (checked for the first and the last member, which has the fewest children)."""
    if node.size == 1:
        return
    first, last = node.role(node.lo), node.role(node.hi - 1)

    def shape(role, keep: int):
        kids = plan.children(role)
        par = plan.parent(role)
        out = []
        for final, ck in ((True, False), (True, True)):
            for a in plan.project(role, final=final, checkpoint=ck):
                peer = "parent" if a.peer == par and a.peer is not None else (
                    kids.index(a.peer) if a.peer in kids else None)
                if isinstance(peer, int) and peer >= keep:
                    continue
                out.append((a.op, a.kind, peer))
        return out
    keep = len(plan.children(last))
    if shape(first, keep) != shape(last, keep):
        raise BuildError(f"index node {node.describe()}: its members' programs differ in shape; "
                         "it is built one executable per role")


def data_source(lr, lo, hi, rows: int) -> tuple[str, dict[str, bytes]]:
    """learner_data_open() for a member holding samples [lo, hi) (run-time expressions), at
    most `rows` of them: alphac.lower.learner.data_source with every chunk's digest in the
    program and the member's chunks chosen at start, and its rows' labels and indices checked
    (`data-label`), literal data's too."""
    from alphac.lower.learner import file_blobs, label_checks, streamed
    blobs: dict[str, bytes] = {}
    decls: list[str] = []
    body: list[str] = []
    for d in lr.data:
        f = d.file
        if f is None:                   # written in the source: its labels and indices checked
            body += ["        " + line for line in label_checks(lr, d, str(lo), str(hi))]
            continue
        n = d.name
        decls += file_blobs(blobs, "d", n, f, 0, lr.nsamples)
        dst = "0" if streamed(lr) else f"dt_{n}"
        if not streamed(lr):
            decls.append(f"global dt_{n}: [f64; {max(1, rows * f.cols)}];")
        a = f"{f.offset} + ({lo}) * {f.row_bytes}"
        b = f"{f.offset} + ({hi}) * {f.row_bytes}"
        body += [f"        let fd_{n} = data_open(data_path(dir, dr_{n}, dn_{n}), dh_{n}, {f.offset}, {f.size});",
                 f"        data_check(fd_{n}, {a}, {b}, dd_{n} + 32 * udiv({a}, DATA_CHUNK), {dst}, {f.kind});",
                 f"        store64(df_{n}, fd_{n});"]
        if not streamed(lr):
            body.append(f"        store64(dp_{n}, dt_{n} - 8 * ({lo}) * {f.cols});")
        body += ["        " + line for line in label_checks(lr, d, str(lo), str(hi))]
    text = "\n".join(decls) + "\n\nfn learner_data_open() {\n"
    if body:
        text += (f"    if {hi} > {lo} {{\n        let dir = load64(data_dir);\n" + "\n".join(body)
                 + '\n        rt_event("data checked");\n    }\n')
    return text + "}\n", blobs


def node_source(plan: Plan, node: Node) -> tuple[str, dict[str, bytes]]:
    """The index node's program (its members' code) and its `extern` bytes, data included."""
    low = FleetLowering(plan, node)
    text, blobs = low.generate()
    if plan.is_owner(node.role()) and plan.has_loss:
        lo, hi = low.samples()
        more, mblobs = data_source(plan.lr, lo, hi, plan.dep.samples.max_size)
    else:
        more, mblobs = "fn learner_data_open() {\n}\n", {}
    return text + "\n" + more, {**blobs, **mblobs}
