"""torch.optim's single-tensor path on the gradients alphac computes: the oracle of
tests/test_optim.py, run as a subprocess by a Python that has torch (the test's own, or
$ALPHAC_TORCH_PYTHON), under ATEN_CPU_CAPABILITY=default (so torch fuses no multiply-add).

Reads a JSON list of jobs on stdin, each {"kind", "hypers", "x": samples (rows of floats), "w":
the initial param, "steps"}. The loss is `sum(0.5 * (w - x[i])^2)`, whose per-sample gradient is exactly w - x[i]
(docs/language.md): the mean gradient is their left fold from the first sample over n, as alphac
sums it. Prints one JSON list per job, of one object per step: the param's and each torch state's
coordinates as hex; first, one line naming torch's and numpy's versions.
torch's float64 sqrt is not correctly rounded (about 1 input in 100): Tensor.sqrt is replaced by
numpy's, which is; that is the one operation replaced.
"""
import json
import sys

import numpy as np
import torch

torch.Tensor.sqrt = lambda t: torch.from_numpy(np.sqrt(t.detach().numpy()))
torch.Tensor.sqrt_ = lambda t: t.copy_(torch.from_numpy(np.sqrt(t.detach().numpy())))
assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
def steps(job: dict) -> list[dict]:
    x = [np.array(r, dtype=np.float64) for r in job["x"]]
    w = torch.tensor(job["w"], dtype=torch.float64, requires_grad=True)
    hypers = {k: tuple(v) if isinstance(v, list) else v for k, v in job["hypers"].items()}
    opt = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
           "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}[job["kind"]](
        [w], foreach=False, **hypers)
    out = []
    for _ in range(job["steps"]):
        wn = w.detach().numpy()
        g = wn - x[0]
        for r in x[1:]:
            g = g + (wn - r)
        w.grad = torch.from_numpy(g / len(x))
        opt.step()
        out.append({"w": [float(v).hex() for v in w.detach().numpy()]})
        for k, v in sorted(opt.state[w].items()):
            if k != "step" and v is not None:
                out[-1][k] = [float(c).hex() for c in v.detach().numpy()]
    return out


print(f"torch {torch.__version__}, numpy {np.__version__}", flush=True)
for job in json.load(sys.stdin):
    print(json.dumps(steps(job)), flush=True)
