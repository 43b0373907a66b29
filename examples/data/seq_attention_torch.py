#!/usr/bin/env python3
"""examples/seq_attention.alpha in PyTorch float64, from the same initial weights: its loss
curve and test accuracy, beside Alpha's.

    alphac run examples/seq_attention.alpha --steps 200 --metrics alpha.jsonl > /dev/null
    python examples/data/seq_attention_torch.py --steps 200 --alpha alpha.jsonl [--golden FILE]

Trains full batch on the 2000 training sequences (examples/data/make_data.py: 6 tokens of 8,
labelled 1 when the first token occurs again) with one thread and ATEN_CPU_CAPABILITY=default;
prints what examples/data/digits_cnn_torch.py prints, for 500 held-out sequences.
"""
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")
import numpy as np   # noqa: E402
import torch         # noqa: E402

DATA = Path(__file__).resolve().parent
sys.path.insert(0, str(DATA))
from digits_cnn_torch import report   # noqa: E402


def load(name: str) -> torch.Tensor:
    return torch.from_numpy(np.load(DATA / f"seq_{name}.npy"))


class Attention(torch.nn.Module):
    """Embeddings, one attention head whose query is the first token's, an MLP head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(8, 8)
        self.pos = torch.nn.Parameter(torch.zeros(6, 8))
        self.q, self.k, self.v = (torch.nn.Linear(8, 8, bias=False) for _ in range(3))
        self.head = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        with torch.no_grad():
            for p, name in ((self.emb.weight, "emb"), (self.pos, "pos"), (self.q.weight, "wq"),
                            (self.k.weight, "wk"), (self.v.weight, "wv"), (self.head[0].weight, "w1"),
                            (self.head[0].bias, "b1"), (self.head[2].weight, "w2"),
                            (self.head[2].bias, "b2")):
                p.copy_(load(name))

    def forward(self, tok):
        h = self.emb(tok) + self.pos                                  # (n, 6, 8)
        scores = (self.k(h) @ self.q(h[:, 0]).unsqueeze(2)).squeeze(2) / math.sqrt(8)
        o = (torch.softmax(scores, dim=1).unsqueeze(1) @ self.v(h)).squeeze(1)
        return self.head(o)


def data(split: str):
    return load(f"tok_{split}").long(), load(f"y_{split}").long()


if __name__ == "__main__":
    report(Attention, data, __doc__)
