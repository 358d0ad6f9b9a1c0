"""Writes tests/golden/schedules.json: learning rates of torch.optim.lr_scheduler schedules and
parameters after AdamW steps, for tests/optim/test_lr_schedule.cpp. Run by hand with PyTorch installed:
    /usr/bin/python3 tests/golden/make_schedules.py
"""
import json
import math
import os

import torch


def lrs(make_sched, steps, base_lr=0.1):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr, momentum=0.9)
    sched = make_sched(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def main():
    S = torch.optim.lr_scheduler
    out = {"torch_version": torch.__version__}
    out["multistep"] = {"base_lr": 0.1, "milestones": [3, 6], "gamma": 0.1,
                        "lrs": lrs(lambda o: S.MultiStepLR(o, [3, 6], 0.1), 9)}
    out["cosine"] = {"base_lr": 0.1, "t_max": 8, "eta_min": 0.001,
                     "lrs": lrs(lambda o: S.CosineAnnealingLR(o, 8, 0.001), 8)}
    out["linear_warmup"] = {"base_lr": 0.1, "start_factor": 0.1, "total_iters": 4,
                            "lrs": lrs(lambda o: S.LinearLR(o, 0.1, 1.0, 4), 7)}
    out["onecycle"] = {"max_lr": 0.2, "total_steps": 20, "pct_start": 0.3, "div_factor": 25.0,
                       "final_div_factor": 1e4,
                       "lrs": lrs(lambda o: S.OneCycleLR(o, 0.2, total_steps=20, pct_start=0.3,
                                                         anneal_strategy="cos",
                                                         cycle_momentum=False), 20)}
    # AdamW on a small quadratic, 5 steps.
    torch.manual_seed(0)
    w0 = torch.randn(6, dtype=torch.float64)
    target = torch.randn(6, dtype=torch.float64)
    w = torch.nn.Parameter(w0.clone())
    opt = torch.optim.AdamW([w], lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
    for _ in range(5):
        opt.zero_grad()
        loss = ((w - target) ** 2 * torch.arange(1, 7, dtype=torch.float64)).sum()
        loss.backward()
        opt.step()
    out["adamw"] = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.05,
                    "w0": w0.tolist(), "target": target.tolist(), "steps": 5,
                    "w": w.detach().tolist()}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schedules.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
