"""A plan's role -> runtime-language source: the role's projected program as code.

Requires: a checked `Plan` and one of its roles. Guarantees: the generated `role_step(v)` and
`role_final(v)` perform exactly the actions `Plan.project` lists, in order, through the runtime
(`net.rt` frames, the learner functions of `alphac.lower.learner`), so the role executable does
what the reference execution (`alphac.dist.execute`) does, message for message:

- `compute`: `learner_grad` over the owner's samples;
- `combine`: the children's (G, n), received into `cb<k>` (the tree's first leaf into `comb`,
  where the sum is), added in the tree's order, each inner node into its first child's buffer
  (the combine's identity needs no branch, since an owner without samples contributes G = -0.0,
  the exact additive identity, and n = 0);
- `terms`: the terms of the update's reductions at the coordinates the owner updates, into
  st_0t<k>, which the `reduce` gather then fills from every owner (a partitioned update);
- `update`: the mean of the delivered G, the reduced scalars (folded from the gathered terms, or
  computed from what it holds whole), then the scalar statements, each group's coordinates the
  owner holds, and the commit;
- in a mesh, owner to owner: a `combine` frame carries the sender's sums for the receiver's
  coordinates (its slices, packed), the loss sum and n; the receiver packs its own the same
  way and adds the owners' blocks in the tree's order, then unpacks the block into G as a
  star's delivery of its slice would; a gather frame carries the sender's slices, packed, which
  the receiver writes into its copy; owner 0 sends the combined loss sum and n to the center,
  which writes the loss event;
- gathers and the publication move whole arrays; the receiver keeps only the coordinates the
  sender's subtree holds (its placement ranges, or everything from the subtree of the designated
  holder of a replicated value), so combining roles hold the assembled values in their own
  state arrays, and the root publishes with the learner's own printer.

Message payloads are fixed by the plan: every receive knows its exact length (the bound a frame
is checked against) and its sender's role code. A payload is sent from where its parts lie and
received where they are used (net.rt's frame_part: an owner's G_p, a state's coordinates), not
copied through a buffer, but for more than FRAME_PARTS parts.
"""
from __future__ import annotations

from alphac.diag import BuildError
from alphac.dist.identity import COMPONENTS, digests, short
from alphac.formats import CKPT_RECORD, FRAME_KINDS as KINDS, FRAME_PARTS, XC_WORDS, XF_RECORD_WORDS, XF_TAIL, XS_DIGITS
from alphac.lower import ckpt, gpu as gpu_lowering
from alphac.lower.learner import clock_call, scattered
from alphac.dist.plan import Plan
from alphac.dist.structure import Leaf, Role, Star
from alphac.ir.learner import update_reductions



def role_codes(plan: Plan) -> dict[str, int]:
    names = sorted({n for n, _, _ in plan.dep.roles})
    return {n: i for i, n in enumerate(names)}


def code_of(plan: Plan, role: Role) -> int:
    return (role_codes(plan)[role.name] << 24) | (role.index or 0)


REC = CKPT_RECORD.size


def in_place(parts) -> bool:
    """Whether a frame's parts travel from and to where they lie (a system call each) rather than
    copied through msg: at most FRAME_PARTS, and two (a gradient and its tail) or 4 KiB each on
    average (a copy of less costs less than a call)."""
    sizes = [p[1] for p in parts]
    return len(sizes) <= 2 or (len(sizes) <= FRAME_PARTS and all(isinstance(w, int) for w in sizes)
                               and 8 * sum(sizes) >= 4096 * len(sizes))


def _bytes(words):
    """8 * words, for an int or a run-time value (fleet.Sym)."""
    return 8 * words if isinstance(words, int) else words * 8


class RoleLowering:
    def __init__(self, plan: Plan, role: Role, gpu=None):
        self.plan, self.role = plan, role
        self.mesh = plan.mesh
        self.gpu = gpu                  # a GPU owner's GpuImage (alphac.lower.gpu), or None
        self.lr = plan.lr
        self.owner = plan.is_owner(role)
        self.children = plan.children(role)
        self.parent = plan.parent(role)
        self.k = role.index             # its index (an expression in an index node's program)
        self.params = self.lr.params
        self.poff = {}
        off = 0
        for p in self.params:
            self.poff[p.name] = off
            off += p.size
        self.P = off + (1 if self.lr.loss is not None else 0)   # the loss sum follows G
        # exact_sum: (G, L, n) travel unrounded (formats.XF_*): each sum's expansion, n and the
        # counts in one frame, the written accumulators' records in a second, spills in a third
        self.exact = self.lr.exact_sums
        self.PX = self.P * XC_WORDS
        self.XW = 2 * self.P + XF_TAIL
        self.acc = ("XA", "XSP", "XE") if self.owner else ("xcomb", "xcsp", "xecomb")   # what it sends up
        if self.exact and self.owner and self.children:
            raise BuildError(f"{role}: an owner that combines is not built under exact_sum")
        self.lines: list[str] = []
        self.msg_words = 1
        # an owner that combines nothing sends its G_p from where the learner wrote them and
        # receives the delivery into them: comb holds only its tail (the loss sum and n)
        self.direct = self.owner and not self.children and not self.exact
        self.S = self.P - (1 if self.lr.loss is not None else 0)     # comb's G words
        self.last_parts = None

    # -- what moves ----------------------------------------------------------------------------
    def members(self, kind: str):
        return self.plan.carries(kind)

    def subtree(self, role: Role) -> tuple[int, int]:
        if self.plan.is_owner(role):
            return role.index, role.index + 1
        if isinstance(self.plan.topo, Star):
            return 0, self.plan.dep.owners
        return self.plan.topo.subtree_owners(role)

    def held(self, child: Role, s, kind: str) -> list[tuple[int, int]]:
        """Coordinate ranges of state s that `child`'s subtree sends up in `kind`."""
        a, b = self.subtree(child)
        ranges = sorted(self.plan.source_range(k, s, kind) for k in range(a, b))
        merged: list[list[int]] = []
        for lo, hi in ranges:
            if hi <= lo:
                continue
            if merged and merged[-1][1] == lo:
                merged[-1][1] = hi
            else:
                merged.append([lo, hi])
        return [tuple(r) for r in merged]

    def slices(self, k: int) -> list[tuple[str, int, int]]:
        """Owner k's slice of each param's coordinates (gradients partitioned)."""
        out = []
        for p in self.params:
            lo, hi = self.plan.dep.placement[p.group].range(k)
            out.append((p.name, lo, hi))
        return out

    # -- code ----------------------------------------------------------------------------------
    def put(self, line: str) -> None:
        self.lines.append("    " + line)

    def code(self, peer: Role):
        """A peer's role code (what its frames carry)."""
        return code_of(self.plan, peer)

    def index_of(self, peer: Role):
        return peer.index

    def kid(self, slot: int):
        """Code for child `slot` alone: a no-op here (an index node guards the later slots)."""
        from contextlib import nullcontext
        return nullcontext()

    def samples(self):
        return self.plan.dep.samples.range(self.k)

    def some(self, lo, hi) -> bool:
        """Whether the range may hold coordinates (an index node's run-time range: always)."""
        return hi > lo

    def updates(self) -> dict:
        return self.plan.updates(self.k)

    def name_text(self) -> str:
        """The role's name (a string's address): its checkpoint shard folder."""
        return f'"{self.role}"'

    def manifest_text(self) -> str:
        return f'"{self.role}/MANIFEST"'

    def records(self, at):
        """The shard records a combining role's sub-manifest lists, `at` from every child."""
        return at

    def guard(self, peer: Role, lines: list[str]) -> list[str]:
        return lines

    def fd(self, peer: Role) -> str:
        if self.mesh and self.owner and self.plan.is_owner(peer):
            return f"load64(fd_peer + {8 * peer.index})"
        if peer == self.parent:
            return "load64(fd_parent)"
        return f"load64(fd_child + {8 * self.children.index(peer)})"

    def need(self, words: int) -> None:
        self.msg_words = max(self.msg_words, words)

    def send(self, peer: Role, kind: str, buf: str, words: int) -> None:
        if buf == "msg":
            self.need(words)
        tail = f", {KINDS[kind]}, v, {buf}, {8 * words});"       # the same bytes just sent: their
        again = bool(self.lines) and self.lines[-1].startswith(("    frame_send(", "    frame_resend(")) and \
            self.lines[-1].endswith(tail)                           # MAC's digest kept (net.rt)
        self.put(f"frame_{'resend' if again else 'send'}({self.fd(peer)}{tail}")

    def recv(self, peer: Role, kind: str, buf: str, words: int) -> None:
        if buf == "msg":
            self.need(words)
        self.put(f"frame_recv({self.fd(peer)}, {self.code(peer)}, {KINDS[kind]}, v, {buf}, {8 * words});")

    def send_parts(self, peer: Role, kind: str, parts) -> None:
        """One frame of `parts` ((address, words), in order), each sent from where it lies (net.rt:
        frame_part), or copied one after another into msg first (`in_place`)."""
        parts = [(a, w) for a, w in parts if self.some(0, w)] or [("msg", 0)]
        if not in_place(parts):
            at = 0
            for a, w in parts:
                self.put(f"vec_copy(msg + {_bytes(at)}, {a}, {w});")
                at = at + w
            parts = [("msg", at)]
        if len(parts) == 1:
            return self.send(peer, kind, *parts[0])
        tail = f", {KINDS[kind]}, v);"
        again = self.last_parts == parts and bool(self.lines) and self.lines[-1].startswith(("    frame_sendv(", "    frame_resendv(")) \
            and self.lines[-1].endswith(tail)       # the same parts just sent: their MAC's digest kept
        if not again:
            self.put("frame_parts();")
            self.lines += [f"    frame_part({a}, {_bytes(w)});" for a, w in parts]
        self.last_parts = parts
        self.put(f"frame_{'resendv' if again else 'sendv'}({self.fd(peer)}{tail}")

    def recv_parts(self, peer: Role, kind: str, parts) -> None:
        """One frame received in `parts` ((address, words); address None: words not kept, received
        into msg at their offset), each where it is used, or (`in_place`) into msg, then copied
        out."""
        parts = [(a, w) for a, w in parts if self.some(0, w)]
        at, where = 0, []
        for a, w in parts:
            if a is None:
                self.need(at + w)
                a = f"msg + {_bytes(at)}"
            where.append((a, w, at))
            at = at + w
        if len(where) < 2:
            return self.recv(peer, kind, *(where[0][:2] if where else ("msg", 0)))
        if not in_place(where):
            self.recv(peer, kind, "msg", at)
            for a, w, off in where:
                if a != f"msg + {_bytes(off)}":
                    self.put(f"vec_copy({a}, msg + {_bytes(off)}, {w});")
            return
        fd = self.fd(peer)
        self.put(f"frame_recv_head({fd}, {_bytes(at)});")
        self.lines += [f"    frame_recv_part({fd}, {a}, {_bytes(w)});" for a, w, _ in where]
        self.put(f"frame_recv_end({fd}, {self.code(peer)}, {KINDS[kind]}, v);")

    def g_parts(self, slices):
        """The G_p pieces (name, lo, hi), where they lie."""
        return [(self.in_g(name, lo), hi - lo) for name, lo, hi in slices]

    @property
    def tail(self):
        """comb's words after G (the loss sum, n), where they lie."""
        return (f"comb + {8 * self.S}", self.P + 1 - self.S)

    def action(self, a) -> None:
        plan, lr = self.plan, self.lr
        P = self.P
        if a.op == "compute":
            lo, hi = self.samples()
            if self.gpu is not None and hi > lo:      # on the card, the host's the reference
                for line in gpu_lowering.grad_lines(lr, self.gpu, lo, hi, "v", "v + 1",
                                                    gpu_lowering.loss_reads(lr)):
                    self.put(line)
            elif lr.batch:                  # step v's samples among lo..hi: their count
                self.put(f"let n = learner_grad({lo}, {hi}, v);")
            else:
                self.put(f"learner_grad({lo}, {hi});")
            n = 'n' if lr.batch else hi - lo
            if self.exact:                # learner_grad's expansions and accumulators are the frame
                self.put(f"store64(XE + {16 * P}, {n});")   # (grad_lines flushes the host's into XA)
                return
            for p in self.params if not self.direct else ():
                self.put(f"vec_copy(comb + {8 * self.poff[p.name]}, G_{p.name}, {p.size});")
            self.put(f"store64(comb + {8 * P}, {n});")
            if lr.loss is not None:
                self.put(f"storef(comb + {8 * (P - 1)}, loadf(L_sum));")
        elif a.op == "combine":               # timed for the trace's split (role.rt)
            self.put("store64(net_mark, rt_now_ns());")
            if self.mesh:
                self.mesh_combine()
            else:
                self.combine()
            self.put("store64(net_combine_ns, load64(net_combine_ns) + rt_now_ns() - load64(net_mark));")
            if lr.loss is not None and self.role == plan.root and not self.mesh:   # the step's (L, n), exact
                self.put(f"rt_event_loss(v, loadf(comb + {8 * (P - 1)}), load64(comb + {8 * P}));")
        elif a.op == "terms":                 # its coordinates' terms of each reduction
            if lr.loss is not None:
                self.put("learner_mean(load64(g_n));")
            ranges = self.updates()
            for t in self.plan.reduce_terms():
                lo, hi = ranges[t.group]
                if self.some(lo, hi):
                    self.put(f"learner_terms_{t.name[2:]}({lo}, {hi});")
        elif a.op == "update":
            ranges = self.updates()
            if lr.loss is not None:     # the count the update's G_p / n reads (mean_n)
                self.put("learner_mean(load64(g_n));")
            for line in clock_call(lr, "v"):        # step v's `step` and `epoch`
                self.put(line)
            if self.plan.reduce_terms():        # every owner: the gathered terms, folded
                self.put("learner_fold();")
            elif update_reductions(lr.update) and any(self.some(*r) for r in ranges.values()):
                self.put("learner_reduce();")   # from what it holds whole
            self.put("learner_scalars();")
            if self.gpu is not None:
                for line in gpu_lowering.role_update(lr, self.gpu, ranges):
                    self.put(line)
            for g in lr.groups:
                lo, hi = ranges.get(g.index, (0, 0))
                if self.gpu is None and self.some(lo, hi):
                    self.put(f"learner_group_{g.index}({lo}, {hi});")
            self.put("learner_commit();")
        elif a.op == "publish":
            self.put("learner_check_finite();")
            self.put("learner_print();")
            self.put("rt_flush();")
            self.put('rt_event("published");')
        elif a.op == "advance":
            pass
        elif a.op == "send":
            self.send_action(a)
        elif a.op == "recv":
            self.recv_action(a)

    # -- a mesh's exchanges ---------------------------------------------------------------------
    # pieces (array, lo, hi) of arrays, packed one after another in a message: where each lives
    def in_comb(self, name: str, lo: int) -> str:
        return f"comb + {8 * (self.poff[name] + lo)}"

    def in_g(self, name: str, lo: int) -> str:
        return f"G_{name} + {8 * lo}"

    def in_state(self, name: str, lo: int) -> str:
        return f"st_{name} + {8 * lo}"

    def pack(self, dst: str, pieces, at) -> int:
        """The pieces copied one after another into dst from at(name, lo); their words."""
        return self.copy_pieces(pieces, lambda name, lo, off: (f"{dst} + {off}", at(name, lo)))

    def unpack(self, src: str, pieces, at) -> int:
        """The pieces packed one after another in src copied out to at(name, lo); their words."""
        return self.copy_pieces(pieces, lambda name, lo, off: (at(name, lo), f"{src} + {off}"))

    def copy_pieces(self, pieces, ends) -> int:
        words = 0
        for name, lo, hi in pieces:
            if self.some(lo, hi):
                self.put("vec_copy({}, {}, {});".format(*ends(name, lo, 8 * words), hi - lo))
            words += hi - lo
        return words

    def pack_block(self, dst: str, j: int) -> int:
        """Owner j's coordinates of this owner's (G, L, n) from comb into dst: its slices, then
        L and n; the words."""
        at = self.pack(dst, self.slices(j), self.in_g if self.direct else self.in_comb)
        self.put(f"vec_copy({dst} + {8 * at}, comb + {8 * (self.P - 1)}, 2);")
        return at + 2

    def gather_pieces(self, j: int, kind: str) -> list[tuple[str, int, int]]:
        """What owner j sends every other owner in a mesh's gather `kind`: its source ranges."""
        return [(s.name, *self.plan.source_range(j, s, kind)) for s in self.members(kind)]

    def mesh_send(self, a) -> None:
        j = a.peer.index
        if a.kind == "combine" and self.direct:
            return self.send_parts(a.peer, a.kind, self.g_parts(self.slices(j)) + [(f"comb + {8 * (self.P - 1)}", 2)])
        if a.kind == "combine":
            return self.send(a.peer, a.kind, "msg", self.pack_block("msg", j))
        self.send_parts(a.peer, a.kind, [(self.in_state(name, lo), hi - lo)
                                         for name, lo, hi in self.gather_pieces(self.k, a.kind)])

    def mesh_recv(self, a) -> None:
        j = a.peer.index
        if a.kind == "combine":
            self.recv(a.peer, a.kind, f"mb{j}", self.block_words)
            return
        self.recv_parts(a.peer, a.kind, [(self.in_state(name, lo), hi - lo)
                                         for name, lo, hi in self.gather_pieces(j, a.kind)])

    @property
    def block_words(self) -> int:
        return self.plan.slice_total(self.k) + 2

    def mesh_combine(self) -> None:
        """This owner's block of every owner's contribution (its own packed from comb), added
        in the tree's order; unpacked into its slices of G and g_n, as a delivery would."""
        k, S = self.k, self.block_words - 2
        self.pack_block(f"mb{k}", k)
        self.mesh_top = top = self.tree_sum("mb", S + 1)
        self.unpack(top, self.slices(k), self.in_g)
        self.put(f"store64(g_n, load64({top} + {8 * (S + 1)}));")

    def send_action(self, a) -> None:
        P, peer, kind = self.P, a.peer, a.kind
        if self.mesh and self.owner:
            if self.plan.is_owner(peer):
                return self.mesh_send(a)
            if kind == "combine":               # owner 0: the combined loss sum and n
                S = self.block_words - 2
                return self.send(peer, kind, f"{self.mesh_top} + {8 * S}", 2)
        if kind == "combine" and self.exact:
            acc, sp, e = self.acc
            # only a fallback writes an accumulator (xe_dirty), or a scattered gradient
            scan = "0" if self.owner and self.scattered() else f"{P} * (load64(xe_dirty) == 0)"
            self.put(f"let recs = xr_pack({acc}, {scan}, {P}, xrec);")
            self.put("let spills = 0;")
            self.put(f"if recs > 0 {{ spills = xc_pack_spills({acc}, {sp}, {P}, xspill); }}")
            self.put(f"store64({e} + {8 * (2 * P + 1)}, recs);")
            self.put(f"store64({e} + {8 * (2 * P + 2)}, spills);")
            self.send(peer, kind, e, self.XW)
            self.put(f"if recs > 0 {{ frame_send({self.fd(peer)}, {KINDS[kind]}, v, xrec, "
                     f"{8 * XF_RECORD_WORDS} * recs); }}")
            self.put(f"if spills > 0 {{ frame_send({self.fd(peer)}, {KINDS[kind]}, v, xspill, "
                     f"{8 * (XS_DIGITS + 1)} * spills); }}")
        elif kind == "combine" and self.direct:
            self.send_parts(peer, kind, self.g_parts((p.name, 0, p.size) for p in self.params) + [self.tail])
        elif kind == "combine":
            self.send(peer, kind, "comb", P + 1)
        elif kind == "deliver":
            if self.plan.is_owner(peer) and "gradients" in self.plan.part:
                self.send_parts(peer, kind, [(self.in_comb(name, lo), hi - lo)
                                             for name, lo, hi in self.slices(self.index_of(peer))]
                                + [(f"comb + {8 * P}", 1)])
            else:
                self.send(peer, kind, "comb", P + 1)
        else:
            self.send_parts(peer, kind, [(f"st_{s.name}", s.size) for s in self.members(kind)])

    def recv_action(self, a) -> None:
        P, peer, kind = self.P, a.peer, a.kind
        if self.mesh and self.owner and self.plan.is_owner(peer):
            return self.mesh_recv(a)
        if self.mesh and kind == "combine":     # the center: owner 0's loss sum and n
            self.recv(peer, kind, "msg", 2)
            self.put("rt_event_loss(v, loadf(msg), load64(msg + 8));")
            return
        if kind == "combine" and self.exact:
            k = self.children.index(peer)
            self.recv(peer, kind, f"xcb{k}", self.XW)
            # the counts drive lengths and a record's index and header addresses: checked first
            self.put(f"let recs{k} = load64(xcb{k} + {8 * (2 * P + 1)});")
            self.put(f"let spills{k} = load64(xcb{k} + {8 * (2 * P + 2)});")
            self.put(f"if ult({P}, recs{k}) || ult(recs{k}, spills{k}) {{ refuse(\"frame-bad-accumulator\"); }}")
            self.put(f"if recs{k} > 0 {{")
            n = f"{8 * XF_RECORD_WORDS} * recs{k}"
            self.put(f"    frame_recv({self.fd(peer)}, {self.code(peer)}, {KINDS[kind]}, v, "
                     f"room(xrec{k}, 8, {n}, \"frame-bad-accumulator\"), {n});")
            self.put(f"    if xr_unpack(xca{k}, {P}, xrec{k} + 8, recs{k}) == 0 {{ refuse(\"frame-bad-accumulator\"); }}")
            self.put("}")
            self.put(f"if spills{k} > 0 {{")
            n = f"{8 * (XS_DIGITS + 1)} * spills{k}"
            self.put(f"    frame_recv({self.fd(peer)}, {self.code(peer)}, {KINDS[kind]}, v, "
                     f"room(xspill, 0, {n}, \"frame-bad-accumulator\"), {n});")
            self.put("}")
            self.put(f"if xc_unpack_spills(xca{k}, xcasp{k}, {P}, xspill, spills{k}) == 0 "
                     f"{{ refuse(\"frame-bad-accumulator\"); }}")
        elif kind == "combine":
            self.recv(peer, kind, self.leaf_buf(self.children.index(peer)), P + 1)
        elif kind == "deliver":
            if not self.owner:
                self.recv(peer, kind, "comb", P + 1)
                return
            if self.direct:         # straight into G_p (this owner's slices when partitioned)
                if "gradients" in self.plan.part:       # its slices and n
                    self.recv_parts(peer, kind, self.g_parts(self.slices(self.k)) + [(f"comb + {8 * P}", 1)])
                else:
                    self.recv_parts(peer, kind, self.g_parts((p.name, 0, p.size) for p in self.params) + [self.tail])
                self.put(f"store64(g_n, load64(comb + {8 * P}));")
            elif "gradients" in self.plan.part:
                pieces = self.slices(self.k)
                self.recv(peer, kind, "msg", sum(hi - lo for _, lo, hi in pieces) + 1)
                at = self.unpack("msg", pieces, self.in_g)
                self.put(f"store64(g_n, load64(msg + {8 * at}));")
            else:
                self.recv(peer, kind, "comb", P + 1)
                for p in self.params:
                    self.put(f"vec_copy(G_{p.name}, comb + {8 * self.poff[p.name]}, {p.size});")
                self.put(f"store64(g_n, load64(comb + {8 * P}));")
        else:
            states = self.members(kind)
            self.need(sum(s.size for s in states))
            parts = []              # what the child's subtree holds into st_s, the rest into msg
            for s in states:
                at = 0
                for lo, hi in self.held(peer, s, kind) if peer != self.parent else [(0, s.size)]:
                    parts += [(None, lo - at), (self.in_state(s.name, lo), hi - lo)]
                    at = hi
                parts.append((None, s.size - at))
            self.recv_parts(peer, kind, parts)

    def combine(self) -> None:
        if self.exact:
            return self.combine_exact()
        P = self.P
        n = P + 1
        if isinstance(self.plan.topo, Star):
            top = self.tree_sum("cb", P)
            if top != "comb":
                self.put(f"vec_copy(comb, {top}, {n});")
        else:
            if self.leaf_buf(0) != "comb":
                self.put(f"vec_copy(comb, cb0, {n});")
            for k in range(1, len(self.children)):
                with self.kid(k):
                    self.put(f"combine_into(comb, cb{k}, {P});")

    def first_leaf(self) -> int:
        """The child whose contribution a combine starts from: the tree's first leaf in a star."""
        if not isinstance(self.plan.topo, Star):
            return 0
        t = self.plan.dep.combine_tree()
        while not isinstance(t, Leaf):
            t = t.children[0]
        return t.owner

    def leaf_buf(self, k: int) -> str:
        """Where child k's (G, n) is received: a role that combines but computes nothing receives
        the first into comb, where the combine's result is (tree_sum adds in place)."""
        return "comb" if k == self.first_leaf() and not self.owner and not self.mesh else f"cb{k}"

    def tree_sum(self, leaf: str, sums: int) -> str:
        """The combine tree over the buffers LEAF<k> (owner k's `sums` binary64 sums, then n):
        each inner node's value is its first child's buffer, the others added into it in order
        (each leaf's buffer is read once, so it is used in place); the root's buffer."""
        def emit(t) -> str:
            if isinstance(t, Leaf):
                return self.leaf_buf(t.owner) if leaf == "cb" else f"{leaf}{t.owner}"
            parts = [emit(c) for c in t.children]
            for p in parts[1:]:
                self.put(f"combine_into({parts[0]}, {p}, {sums});")
            return parts[0]
        return emit(self.plan.dep.combine_tree())

    def scattered(self) -> bool:
        return any(scattered(self.lr, p.name) for p in self.params)

    def combine_exact(self) -> None:
        """exact_sum: the children's expansions added into xecomb as two terms a coordinate by
        xsum.rt's 2Sum lanes (an inexact lane falls back to xcomb), their records' accumulators
        merged into xcomb (xe_dirty: xcomb written), their n added, in child order (any order
        gives the same sums, so no tree is followed). The root rounds each sum once into comb
        (xe_round_into), which the delivery and the loss event read."""
        P, z = self.P, 8 * XC_WORDS
        self.put(f"if load64(xe_dirty) != 0 {{ xc_clear_n(xcomb, xcsp, {P}); }}")
        self.put("store64(xe_dirty, 0);")
        self.put(f"xe_clear_n(xecomb, {2 * P});")
        self.put(f"store64(xecomb + {16 * P}, 0);")
        sums = [(self.poff[p.name], p.size) for p in self.params] + [(P - 1, 1)]   # and the loss
        for k in range(len(self.children)):
            with self.kid(k):
                for f, size in sums:
                    self.put(f"xe_add_lanes(xcomb + {z * f}, xcsp + {8 * XS_DIGITS * f}, xecomb + {16 * f}, "
                             f"xcb{k} + {16 * f}, {size}, 2);")
                self.put(f"if load64(xcb{k} + {8 * (2 * P + 1)}) > 0 {{")    # (its count: xr_merge's)
                self.put("    store64(xe_dirty, 1);")
                self.put(f"    store64(xrec{k}, load64(xcb{k} + {8 * (2 * P + 1)}));")
                self.put(f"    xr_merge(xcomb, xcsp, xca{k}, xcasp{k}, {P}, xrec{k});")
                self.put("}")
                self.put(f"store64(xecomb + {16 * P}, load64(xecomb + {16 * P}) + load64(xcb{k} + {16 * P}));")
        if self.role == self.plan.root:
            for f, size in sums:
                self.put(f"xe_round_into(comb + {8 * f}, xcomb + {z * f}, xcsp + {8 * XS_DIGITS * f}, "
                         f"xecomb + {16 * f}, {size});")
            self.put(f"store64(comb + {8 * P}, load64(xecomb + {16 * P}));")

    # -- checkpoints -----------------------------------------------------------------------------
    def holdings(self, k: int | None = None) -> list[tuple[str, int, int]]:
        """What owner k (default: this one) holds of each state, as it writes and restores it
        (`Plan.holding`; a replicated state it does not hold is left out, an empty slice of a
        partitioned one is written as an empty shard)."""
        k = self.k if k is None else k
        out = []
        for s in self.lr.states:
            lo, hi = self.plan.holding(k, s)
            if hi > lo or self.plan.partitioned(s):
                out.append((s.name, lo, hi))
        return out

    def records_from(self, child: Role) -> int:
        return len(self.holdings(child.index)) if self.plan.is_owner(child) else 1

    @property
    def layout(self) -> int:
        return 0 if isinstance(self.plan.topo, Star) else self.plan.topo.fanout

    def save_body(self) -> list[str]:
        lines: list[str] = []
        at = 0
        for a in self.plan.project(self.role, final=True, checkpoint=True):
            if a.kind != "checkpoint" and a.op not in ("save", "manifest"):
                continue
            if a.op == "save":
                lines += ckpt.save_lines(self.holdings(), self.name_text(), self.k)
            elif a.op == "manifest":
                lines.append(f'ckpt_begin(dir, {self.name_text()}, 0, v);')
                lo, hi = self.subtree(self.role)
                if self.role == self.plan.root:
                    lines.append(f'ckpt_manifest("MANIFEST", 0, {self.layout}, 0, {self.plan.dep.owners}, {at});')
                else:
                    lines.append(f'ckpt_manifest({self.manifest_text()}, 1, {self.layout}, {lo}, {hi}, {self.records(at)});')
            elif a.op == "recv":
                n = self.records_from(a.peer)
                lines += self.guard(a.peer, [f"frame_recv({self.fd(a.peer)}, {self.code(a.peer)}, "
                                             f"{KINDS['checkpoint']}, v, ck_recs + {REC * at}, {REC * n});"])
                at += n
            elif a.op == "send":
                if self.owner:
                    lines.append(f"frame_send({self.fd(a.peer)}, {KINDS['checkpoint']}, v, ck_recs, "
                                 f"{REC * len(self.holdings())});")
                else:
                    lines.append(f"frame_send({self.fd(a.peer)}, {KINDS['checkpoint']}, v, ck_sub, {REC});")
        self.ck_records = max(at, len(self.lr.states))
        return lines

    def resume_body(self) -> list[str]:
        any_layout = self.lr.exact        # exact_sum: every layout's state is the same run's
        if self.owner:
            lines = ckpt.restore_lines(self.holdings(), self.k, self.layout,
                                       self.plan.dep.owners, any_layout)
        else:
            lines = ckpt.load_root_lines(self.layout, self.plan.dep.owners, any_layout=any_layout)
        return lines + ["return load64(ck_version);"]

    # -- the module ------------------------------------------------------------------------------
    def generate(self) -> tuple[str, dict[str, bytes]]:
        plan, role = self.plan, self.role
        self.extra: list[str] = []
        prog = plan.project(role, final=True)
        step = [a for a in prog if a.kind != "publish" and a.op != "publish"]
        final = [a for a in prog if a.kind == "publish" or a.op == "publish"]
        self.lines = []
        for a in step:
            self.action(a)
        step_body = self.lines
        self.lines = []
        for a in final:
            self.action(a)
        final_body = self.lines
        ckpt.check_names(self.lr, (str(self.role),))
        save_body = self.save_body()
        resume_body = self.resume_body()
        dg = digests(plan.dep)
        kids = [code_of(plan, c) for c in self.children]
        head = [f"// {self.describe()} of deployment {plan.dep.name} (generated by alphac)",
                f"const HAS_PARENT = {1 if self.parent else 0};"]
        head += [f"const ID_{c.upper()} = {short(dg[c])};" for c in COMPONENTS]
        head += ["data role_identity: [u8; IDENTITY_BYTES] = extern;",
                 self.name_declaration(),
                 "global fd_parent: [i64; 1];",
                 f"global fd_child: [i64; {max(1, len(kids))}];",
                 f"global msg: [f64; {self.msg_words}];",
                 f"global comb: [f64; {self.P + 1}];",
                 "global g_n: [i64; 1];"]
        if self.exact:              # spill regions and records: .bss, touched only where written
            rec = f"[i64; {self.P * XF_RECORD_WORDS}]"
            head += [f"global xspill: [i64; {self.P * (XS_DIGITS + 1)}];", f"global xrec: {rec};"]
            if kids:
                head += [f"global xcomb: [i64; {self.PX}];", f"global xcsp: [i64; {self.P * XS_DIGITS}];",
                         f"global xecomb: [f64; {self.XW}];"]
            for k in range(len(kids)):      # a child's frame, its records, their accumulators
                head += [f"global xcb{k}: [f64; {self.XW}];", f"global xrec{k}: [i64; {1 + self.P * XF_RECORD_WORDS}];",
                         f"global xca{k}: [i64; {self.PX}];", f"global xcasp{k}: [i64; {self.P * XS_DIGITS}];"]
        elif not self.mesh:
            head += [f"global cb{k}: [f64; {self.P + 1}];" for k in range(len(kids))]
        head += self.mesh_declarations()
        head += ckpt.declarations(self.lr, self.ck_records)
        head += self.extra
        text = "\n".join(head) + "\n\n" + "\n".join(self.setup(kids)) + "\n\n"
        text += "fn role_step(v: i64) {\n" + "\n".join(step_body) + "\n}\n\n"
        text += "fn role_final(v: i64) {\n" + "\n".join(final_body) + "\n}\n\n"
        text += "fn role_save(dir: i64, v: i64) {\n" + "\n".join("    " + l for l in save_body) + "\n}\n\n"
        text += "fn role_resume(dir: i64) -> i64 {\n" + "\n".join("    " + l for l in resume_body) + "\n}\n"
        blobs = {"role_identity": b"".join(dg[c] for c in COMPONENTS)}
        if self.gpu is None:
            text += "\nfn role_device_start() {}\n"
        else:
            lo, hi = plan.dep.samples.range(role.index) if plan.has_loss else (0, 0)
            text += "\n" + gpu_lowering.role_start(self.lr, self.gpu, lo, hi)
        return text, blobs

    def mesh_declarations(self) -> list[str]:
        """What role.rt's mesh_connect reads: a mesh owner's owner count, index, owner 0's rank,
        the owners' role codes, its links; for every other role, no mesh."""
        plan = self.plan
        if not (self.mesh and self.owner):
            return ["const MESH_OWNERS = 0;", "const MESH_INDEX = 0;", "const MESH_RANK0 = 0;",
                    "global fd_peer: [i64; 1];",
                    "fn role_peer_code(j: i64) -> i64 { return -1; }"]
        P = plan.dep.owners
        out = [f"const MESH_OWNERS = {P};", f"const MESH_INDEX = {self.k};",
               f"const MESH_RANK0 = {plan.rank(Role(plan.dep.owner, 0))};",
               f"global fd_peer: [i64; {P}];"]
        out += [f"global mb{j}: [f64; {self.block_words}];" for j in range(P)]
        code0 = code_of(plan, Role(plan.dep.owner, 0))
        out += ["fn role_peer_code(j: i64) -> i64 {",       # owner codes are consecutive
                f"    if j >= 0 && j < {P} {{ return {code0} + j; }}",
                "    return -1;", "}"]
        return out

    # -- who it is ---------------------------------------------------------------------------------
    def describe(self) -> str:
        return f"role {self.role}"

    def name_declaration(self) -> str:
        return f"data role_name: [u8] = \"{self.role}\\0\";"

    def setup(self, kids: list[int]) -> list[str]:
        """role_setup(rank): `--rank`, when given, must be the role's own; the role's globals;
        role_child_slot(code): a child's slot by its role code (-1: not a child)."""
        plan, role = self.plan, self.role
        rank = plan.rank(role)
        out = ["fn role_setup(rank: i64) {",
               f"    if rank >= 0 && rank != {rank} {{ refuse(\"rank-out-of-range\"); }}",
               f"    store64(net_sender, {code_of(plan, role)});",
               f"    store64(role_rank, {rank});",
               f"    store64(role_parent_rank, {plan.rank(self.parent) if self.parent else 0});",
               f"    store64(role_parent_code, {code_of(plan, self.parent) if self.parent else -1});",
               f"    store64(role_nkids, {len(kids)});", "}", "",
               "fn role_child_slot(code: i64) -> i64 {"]
        out += [f"    if code == {c} {{ return {k}; }}" for k, c in enumerate(kids)]
        return out + ["    return -1;", "}"]


def role_source(plan: Plan, role: Role, gpu=None) -> tuple[str, dict[str, bytes]]:
    """The role's runtime-language source (its program, checkpoints, identity), and the bytes of
    its `extern` globals; `gpu`: a GPU owner's launch image (its compute and updates on the card)."""
    return RoleLowering(plan, role, gpu).generate()
