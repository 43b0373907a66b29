"""Minibatches: which samples step t uses (the contract's sample order, docs/language.md).

A learner that declares `batch B` over N samples has NB = ceil(N / B) batches per epoch; step t
is batch p = t mod NB of epoch e = t div NB, the samples whose *position* in epoch e lies in
[p*B, p*B + B) (the last batch of an epoch holds the rest). Positions:

    order sequence        position(s, e) = s
    order shuffle(SEED)   position(s, e) = sigma(SEED, e, s), a bijection of [0, N)

sigma is a 4-round Feistel network on h + h bits (h the least with 4^h >= N, at least 1), with
cycle walking (applied again until the result is below N): a bijection of [0, N) that each
owner computes alone for its own samples, so no owner needs the permutation of anyone else.
The round function is SplitMix64's finalizer of a key made from SEED, e, the round and the
right half (arithmetic mod 2^64):

    key = ((SEED * G + e) * G + round) * G + right          G = 0x9e3779b97f4a7c15
    z = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb
    F = z ^ (z >> 31)

A step's samples are summed in increasing sample order at each owner (the batch is a set: the
permutation decides membership, never the order of a sum), so an owner count changes only the
combine tree's rounding, never which samples a step sees. The runtime's copy is generated from
the constants here (alphac.lower.learner); tests run both on the same (SEED, e, s).
"""
from __future__ import annotations

M64 = (1 << 64) - 1
GOLDEN = 0x9e3779b97f4a7c15
MIX1 = 0xbf58476d1ce4e5b9
MIX2 = 0x94d049bb133111eb
ROUNDS = 4


def half_bits(n: int) -> int:
    """h: the least h >= 1 with 2^(2h) >= n."""
    h = 1
    while (1 << (2 * h)) < n:
        h += 1
    return h


def round_f(seed: int, epoch: int, rnd: int, right: int) -> int:
    key = (((seed * GOLDEN + epoch) * GOLDEN + rnd) * GOLDEN + right) & M64
    z = ((key ^ (key >> 30)) * MIX1) & M64
    z = ((z ^ (z >> 27)) * MIX2) & M64
    return z ^ (z >> 31)


def feistel(x: int, seed: int, epoch: int, h: int) -> int:
    mask = (1 << h) - 1
    left, right = x >> h, x & mask
    for r in range(ROUNDS):
        left, right = right, left ^ (round_f(seed, epoch, r, right) & mask)
    return (left << h) | right


def position(s: int, n: int, epoch: int, seed: int | None) -> int:
    """Sample s's position in epoch `epoch` (seed None: in sequence)."""
    if seed is None or n <= 1:
        return s
    h = half_bits(n)
    x = feistel(s, seed, epoch, h)
    while x >= n:
        x = feistel(x, seed, epoch, h)
    return x


def batches(n: int, batch: int | None) -> int:
    """NB, the batches per epoch (1 for the full batch)."""
    return 1 if not batch else -(-n // batch)


def step_samples(samples, n: int, batch: int | None, seed: int | None, t: int) -> list[int]:
    """The samples of `samples` (an owner's range) that step t uses, in increasing order."""
    if not batch:
        return list(samples)
    epoch, p = divmod(t, batches(n, batch))
    first = p * batch
    return [s for s in samples if first <= position(s, n, epoch, seed) < first + batch]
