"""The host side of the kernel ABI, in Python: one owner's buffers and steps over any `Device`.
(A twin of the GPU owner's step for the tests and the GPU tools, not part of the compiler.)

This is the reference for what a role executable does around the kernels (alphac/ptx/kernels.py
has the ABI): upload the state, data and vector constants once; per step, launch the batched
products and `grad_samples` over the owner's samples, the sum kernels (`abi.sum_kernels`; under
exact_sum the exact sums' kernels, alphac/ptx/xsum.py, and their accumulators rounded), combine
(the caller's combine tree, on the host), run the scalar-state statements on the host
(`host_scalars`), then launch `reduce` (the update's reduced scalars the card computes,
`abi.card_reductions`; reduce_add and reduce_round for exact sums), `scalars` (where the card
runs the scalar statements, `abi.card_scalars`: their values are then the card's, from `sc`)
and each group's `update_g<N>` over its coordinates. A `Device` is
anything that can allocate, copy and launch: the PTX interpreter in tests/ptx_interp.py, or CUDA's
driver API in gpu/vendor_check.py.

Requires: kernels from `kernels.kernels(lr)`. Guarantees: binary64 arithmetic happens only in
the kernels and in `host_scalars` (the scalar statements, through alphac.ir.evaluate); the
host's own work is copying and combining `G` by the caller's order.
"""
from __future__ import annotations

import struct
from typing import Protocol, Sequence

from alphac.ir.learner import Learner, update_reductions
from alphac.ir.order import step_samples
from alphac.math import binary64 as f
from alphac.ptx.abi import (Kernel, batch_kernels, batch_widths, card_reductions, card_scalars, host_scalars,
                            param_count, param_layout, row_layout, sum_kernels)


class Device(Protocol):
    def alloc(self, values: Sequence[float]) -> int: ...            # a buffer holding `values`
    def write(self, addr: int, values: Sequence[float]) -> None: ...
    def read(self, addr: int, count: int) -> list[float]: ...
    def launch(self, kernel: Kernel, args: list[int | float], threads: int) -> None: ...


class Owner:
    """One owner's device buffers: every state, every data array, gs, G, vector constants."""

    def __init__(self, dev: Device, lr: Learner, kernels: list[Kernel]):
        self.dev, self.lr = dev, lr
        self.kernels = {k.name: k for k in kernels}
        self.P = param_count(lr)
        self.state = {s.name: dev.alloc(s.init) for s in lr.states}
        self.data = {d.name: dev.alloc(d.values) for d in lr.data}
        self.gs = dev.alloc([0.0] * max(1, row_layout(lr).width * (lr.nsamples or 0)))
        self.idx = dev.alloc([0.0] * max(1, lr.nsamples or 0))       # a minibatch's samples
        self.G = dev.alloc([0.0] * max(1, self.P))
        if "xsum_add" in self.kernels:      # exact_sum: the card's accumulators (xsum.py)
            from alphac.formats import XC_WORDS, XS_WORDS
            self.xd, self.xc = dev.alloc([0.0] * (XS_WORDS * self.P)), dev.alloc([0.0] * (XC_WORDS * self.P))
        self.mv = {str(k): dev.alloc([0.0] * max(1, r * (lr.nsamples or 0)))
                   for k, r in enumerate(batch_widths(lr))}
        self.rd = dev.alloc([0.0] * max(1, len(card_reductions(lr))))     # written by `reduce`
        from alphac.formats import XS_WORDS             # its exact sums' accumulators (exact_sum)
        self.xr = dev.alloc([0.0] * (XS_WORDS * max(1, len(card_reductions(lr)))))
        self.sc = dev.alloc([0.0] * max(1, 2 * len(card_scalars(lr))))      # the card's scalar states
        self.consts = {(k.name, p.name): dev.alloc(p.values)
                       for k in kernels for p in k.params if p.role == "const"}

    def _args(self, k: Kernel, **scalar: int | float) -> list[int | float]:
        out: list[int | float] = []
        for p in k.params:
            if p.role == "state":
                out.append(self.state[p.ref])
            elif p.role == "data":
                out.append(self.data[p.ref])
            elif p.role in ("gs", "G", "idx", "rd", "xr", "sc"):
                out.append(getattr(self, p.role))
            elif p.role == "mv":
                out.append(self.mv[p.ref])
            elif p.role == "const":
                out.append(self.consts[(k.name, p.name)])
            elif p.role == "scalar":
                out.append(scalar["values"][(p.ref, p.version)])
            else:
                out.append(scalar[p.role])
        return out

    def contribution(self, lo: int, hi: int, t: int = 0) -> list[float]:
        """G of samples [lo, hi) (a minibatch learner: those step t uses, `self.count` of them):
        the owner's left-fold sum of their per-sample gradients (-0.0 for none); under
        exact_sum their exact sums, rounded once (one owner's: `exact_sums`)."""
        gs = self.kernels["grad_samples"]
        if self.lr.batch:
            rows = step_samples(range(lo, hi), self.lr.nsamples, self.lr.batch, self.lr.shuffle, t)
            self.dev.write(self.idx, [struct.unpack("<d", struct.pack("<Q", i))[0] for i in rows])
            self.count = len(rows)
        else:
            self.count = hi - lo
        for k in [*(self.kernels[name] for name in batch_kernels(self.lr)), gs]:    # products first
            per, each = k.tile or (1, 1)
            self.dev.launch(k, self._args(k, count=self.count, lo=lo, hi=hi), -(-self.count // per) * each)
        if self.lr.exact:
            return self.exact_sums()
        if self.count == 0:             # the sums write nothing: the identity
            return [-0.0] * self.P
        for name in sum_kernels(self.lr):
            k = self.kernels[name]
            self.dev.launch(k, self._args(k, n=self.count), k.threads)
        return self.dev.read(self.G, self.P)

    def exact_sums(self) -> list[float]:
        """exact_sum: the card's exact sums of the rows (alphac/ptx/xsum.py's kernels), its
        accumulators read as the runtime's format (a window, or a spilled sum's dense digits),
        rounded once here: the flags give the special values and the sign of a zero."""
        from fractions import Fraction
        from alphac.formats import XC_BASE_SHIFT, XC_SPILLED, XC_WORDS, XS_FLAGS, XS_WORDS
        from alphac.ir.exact import NAN
        k, P = self.kernels, self.P
        self.dev.launch(k["xsum_clear"], [self.xd], P)
        self.dev.launch(k["xsum_add"], [self.gs, self.xd, self.count], self.count * P)
        self.dev.launch(k["xsum_fold"], [self.xd, self.xc], P)

        def words(addr: int, n: int) -> list[int]:
            return [struct.unpack("<q", struct.pack("<d", v))[0] for v in self.dev.read(addr, n)]
        out = []
        for j in range(P):
            h, *digits = words(self.xc + 8 * XC_WORDS * j, XC_WORDS)
            base = (h >> XC_BASE_SHIFT) - 1
            if h & XC_SPILLED:
                digits, base = words(self.xd + 8 * (XS_WORDS * j + 1), XS_WORDS - 1), 0
            total = sum((Fraction(d) * Fraction(2) ** (32 * (base + i) - 1074) for i, d in enumerate(digits)
                         if d), Fraction(0))
            inf = h & (XS_FLAGS["pinf"] | XS_FLAGS["ninf"])
            if h & XS_FLAGS["nan"] or inf == XS_FLAGS["pinf"] | XS_FLAGS["ninf"]:
                out.append(NAN)
            elif inf:
                out.append(float("inf") if inf == XS_FLAGS["pinf"] else float("-inf"))
            elif total == 0:
                out.append(0.0 if h & XS_FLAGS["not-neg-zero"] else -0.0)
            else:
                try:
                    out.append(total.numerator / total.denominator)     # correctly rounded
                except OverflowError:
                    out.append(float("inf") if total > 0 else float("-inf"))
        return out

    def update(self, G: list[float] | None, n: int, t: int = 0) -> None:
        """Step t's update, given the combined sum G over n samples (None without a loss)."""
        if G is not None:
            self.dev.write(self.G, G)
        whole = None                 # the update's reduced scalars read every coordinate
        if update_reductions(self.lr.update):
            at = param_layout(self.lr)
            whole = ({s.name: tuple(self.dev.read(self.state[s.name], s.size)) for s in self.lr.states},
                     {p.name: tuple(f.div(x, float(n)) for x in G[at[p.name]:at[p.name] + p.size])
                      for p in self.lr.params} if G is not None else {})
        values = host_scalars(self.lr, {s.name: tuple(self.dev.read(self.state[s.name], 1))
                                        for s in self.lr.scalar_states}, whole, t)
        slots = card_scalars(self.lr)   # the card runs the scalar statements: sc[2i + 1] before
        if slots:
            self.dev.write(self.sc, [v for name in slots for v in (0.0, values[(name, 0)])])
        from alphac.lower.gpu import reduce_kernels
        for name in reduce_kernels(self.lr):    # before the updates, in the owner's order
            k = self.kernels[name]
            self.dev.launch(k, self._args(k, n=n, values=values), k.threads)
        for g in self.lr.groups:
            k = self.kernels[f"update_g{g.index}"]
            self.dev.launch(k, self._args(k, n=n, klo=0, khi=g.size, values=values), g.size)
        for s in self.lr.scalar_states:
            new = self.dev.read(self.sc + 8 * (2 * slots[s.name] + 1), 1) if slots else [values[(s.name, 1)]]
            self.dev.write(self.state[s.name], new)

    def step(self, t: int = 0) -> None:
        """Step t of the single-owner learner (the owner holds every sample)."""
        if self.lr.loss is None:
            return self.update(None, self.lr.nsamples or 0, t)
        G = self.contribution(0, self.lr.nsamples or 0, t)
        self.update(G, self.count, t)

    def read_state(self) -> dict[str, tuple[float, ...]]:
        return {s.name: tuple(self.dev.read(self.state[s.name], s.size)) for s in self.lr.states}
