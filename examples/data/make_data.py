#!/usr/bin/env python3
"""Write the real data sets the examples load, from scikit-learn's bundled copies (no network).

    python examples/data/make_data.py [--out DIR]      # default: this script's folder
    python examples/data/make_data.py --list           # the paths it writes (for make)

digits (1797 8x8 images, 10 classes; examples/digits_mlp.alpha):
    digits_x_train.npy  (1500, 64)  the first 1500 images, pixels / 16 (exact in binary64)
    digits_y_train.npy  (1500,)     their labels 0..9, as int64 (`data y: i64[1500]`)
    digits_x_test.npy   (297, 64)   the last 297 images, held out
    digits_y_test.npy   (297,)
    digits_w1.npy (32, 64), digits_b1.npy (32,), digits_w2.npy (10, 32), digits_b2.npy (10,)
        the 64-32-10 MLP's initial weights, uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)) as
        torch's nn.Linear draws them, from PCG64(SEED)'s raw 64-bit stream (the one numpy
        promises to keep across versions): u = (raw >> 11) * 2^-53, w = b * (2u - 1)
    digits_cnn_k.npy (4, 9), digits_cnn_kb.npy (4,), digits_cnn_w1.npy (32, 36), digits_cnn_b1.npy
    (32,), digits_cnn_w2.npy (10, 32), digits_cnn_b2.npy (10,)
        the CNN's initial weights (examples/digits_cnn.alpha): nn.Conv2d(1, 4, 3)'s (fan_in 9,
        each kernel row-major) and its head's, drawn as above from PCG64(SEED + 1)
sequences (examples/seq_attention.alpha), drawn from PCG64(SEED + 2)'s raw stream, each token
its top 3 bits (0..7):
    seq_tok_train.npy (2000, 6), seq_tok_test.npy (500, 6)   6 tokens from a vocabulary of 8
    seq_y_train.npy (2000,), seq_y_test.npy (500,)           the rule: 1 when the first token
        (ids and labels: int64, as the digits' labels)
        occurs again among the other five, else 0 (1 - (7/8)^5, about 49% of them, are 1)
    seq_emb.npy (8, 8), seq_pos.npy (6, 8)   the token and position embeddings, uniform in
        +-1 (torch's nn.Embedding draws N(0, 1); a uniform draw needs no libm), then
    seq_wq.npy, seq_wk.npy, seq_wv.npy (8, 8), seq_w1.npy (16, 8), seq_b1.npy (16,),
    seq_w2.npy (2, 16), seq_b2.npy (2,)   as nn.Linear draws them; from PCG64(SEED + 3)
breast cancer (569 x 30, labels 0/1; for a logistic regression):
    cancer_x_train.npy (469, 30), cancer_y_train.npy, cancer_x_test.npy (100, 30), cancer_y_test.npy
        the first 469 rows train, the last 100 test; every feature standardized with the train
        rows' mean and (population) standard deviation, each computed with math.fsum, so
        correctly rounded on any machine

Every file is float64 little-endian (the labels and token ids int64, `<i8`), C order, written by
this script's own .npy writer (format 1.0), so the bytes depend on nothing but the data: the
same files on every run and machine.
"""
import argparse
import math
import os
from pathlib import Path

SEED = 20240516
HIDDEN = 32
SPLITS = ("x_train", "y_train", "x_test", "y_test")
CNN = (("k", 9, (4, 9)), ("kb", 9, (4,)), ("w1", 36, (HIDDEN, 36)), ("b1", 36, (HIDDEN,)),
       ("w2", HIDDEN, (10, HIDDEN)), ("b2", HIDDEN, (10,)))     # name, fan_in, shape
SEQ = (("emb", 1, (8, 8)), ("pos", 1, (6, 8)), ("wq", 8, (8, 8)), ("wk", 8, (8, 8)),
       ("wv", 8, (8, 8)), ("w1", 8, (16, 8)), ("b1", 8, (16,)), ("w2", 16, (2, 16)),
       ("b2", 16, (2,)))        # name, fan_in (1: the embeddings' +-1), shape
FILES = tuple(sorted([f"digits_{s}" for s in SPLITS] + [f"cancer_{s}" for s in SPLITS] +
                     [f"digits_{w}" for w in ("w1", "b1", "w2", "b2")] +
                     [f"digits_cnn_{w[0]}" for w in CNN] + [f"seq_{w[0]}" for w in SEQ] +
                     [f"seq_{s}" for s in ("tok_train", "y_train", "tok_test", "y_test")]))   # what main writes
HERE = Path(__file__).resolve().parent


def npy(path: Path, a) -> None:
    """A .npy file, format 1.0: the header padded with spaces to a multiple of 64 bytes."""
    import numpy as np
    descr = "<i8" if a.dtype.kind in "iu" else "<f8"      # integers: labels and token ids
    a = np.ascontiguousarray(a, dtype=descr)
    head = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(a.shape)!r}, }}"
    head += " " * (-(10 + len(head) + 1) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode()
                     + a.tobytes())


def uniform(bits, bound: float, shape: tuple):
    import numpy as np
    raw = bits.random_raw(math.prod(shape))
    u = (raw >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return (bound * (2.0 * u - 1.0)).reshape(shape)


def standardize(x, train: int):
    out = x.copy()
    for j in range(x.shape[1]):
        col = [float(v) for v in x[:train, j]]
        mean = math.fsum(col) / len(col)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in col) / len(col))
        out[:, j] = (x[:, j] - mean) / std
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--list", action="store_true", help="print the files' paths, write nothing")
    args = ap.parse_args()
    if args.list:
        print(" ".join(os.path.relpath(args.out / f"{n}.npy") for n in FILES))
        return
    import numpy as np
    from sklearn.datasets import load_breast_cancer, load_digits
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    d = load_digits()
    x, y = d.data.astype(np.float64) / 16.0, d.target.astype(np.int64)
    assert x.shape == (1797, 64)
    files = {"digits_x_train": x[:1500], "digits_y_train": y[:1500],
             "digits_x_test": x[1500:], "digits_y_test": y[1500:]}
    bits = np.random.PCG64(SEED)
    for name, fan_in, shape in (("w1", 64, (HIDDEN, 64)), ("b1", 64, (HIDDEN,)),
                                ("w2", HIDDEN, (10, HIDDEN)), ("b2", HIDDEN, (10,))):
        files[f"digits_{name}"] = uniform(bits, 1.0 / math.sqrt(fan_in), shape)
    bits = np.random.PCG64(SEED + 1)
    for name, fan_in, shape in CNN:
        files[f"digits_cnn_{name}"] = uniform(bits, 1.0 / math.sqrt(fan_in), shape)

    raw = np.random.PCG64(SEED + 2).random_raw(2500 * 6)
    tok = (raw >> np.uint64(61)).astype(np.int64).reshape(2500, 6)
    y = (tok[:, 1:] == tok[:, :1]).any(axis=1).astype(np.int64)
    files |= {"seq_tok_train": tok[:2000], "seq_y_train": y[:2000],
              "seq_tok_test": tok[2000:], "seq_y_test": y[2000:]}
    bits = np.random.PCG64(SEED + 3)
    for name, fan_in, shape in SEQ:
        files[f"seq_{name}"] = uniform(bits, 1.0 / math.sqrt(fan_in), shape)

    c = load_breast_cancer()
    cx, cy = standardize(c.data.astype(np.float64), 469), c.target.astype(np.float64)
    files |= {"cancer_x_train": cx[:469], "cancer_y_train": cy[:469],
              "cancer_x_test": cx[469:], "cancer_y_test": cy[469:]}
    assert tuple(sorted(files)) == FILES
    for name, a in sorted(files.items()):
        npy(out / f"{name}.npy", a)
    print(f"wrote {len(files)} files to {out}")


if __name__ == "__main__":
    main()
