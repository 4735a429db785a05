"""Optimizers of PyTorch and transformers, run in float64 as references for
tests/unit/optim/optimizers_test.cpp (written by others than gputrain's authors).

usage: optim_reference.py PROBLEM OPTIONS_JSON OUT
  PROBLEM: a safetensors file with each parameter's initial value "param.<i>"
  and its gradient at each step "grad.<step>.<i>" (steps 1..N; a missing one
  means no gradient that step). OPTIONS_JSON: {"optimizer": "sgd" | "adamw" |
  "adafactor", "steps": N, "lr": [per parameter], "weight_decay": [per
  parameter], and the optimizer's own arguments}. Every parameter is its own
  group (its lr and weight decay). Writes the parameters after N steps to OUT.
"""
import json
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers.optimization import Adafactor

problem = load_file(sys.argv[1])
options = json.loads(sys.argv[2])
count = len([k for k in problem if k.startswith("param.")])
params = [torch.nn.Parameter(problem[f"param.{i}"].double().clone()) for i in range(count)]
groups = [{"params": [p], "lr": lr, "weight_decay": wd}
          for p, lr, wd in zip(params, options["lr"], options["weight_decay"])]

name = options["optimizer"]
if name == "sgd":
    opt = torch.optim.SGD(groups, lr=options["lr"][0], momentum=options["momentum"], dampening=options["dampening"],
                          nesterov=options["nesterov"])
elif name == "adamw":
    opt = torch.optim.AdamW(groups, lr=options["lr"][0], betas=tuple(options["betas"]), eps=options["eps"],
                            foreach=False)
elif name == "adafactor":
    if options["relative_step"]:
        for g in groups:
            g["lr"] = None
    opt = Adafactor(groups, lr=None if options["relative_step"] else options["lr"][0], eps=tuple(options["eps"]),
                    clip_threshold=options["clip_threshold"], decay_rate=options["decay_rate"],
                    beta1=options["beta1"] if options["beta1"] > 0 else None,
                    scale_parameter=options["scale_parameter"], relative_step=options["relative_step"],
                    warmup_init=False)
else:
    sys.exit(f"unknown optimizer {name}")

for step in range(1, options["steps"] + 1):
    for i, p in enumerate(params):
        g = problem.get(f"grad.{step}.{i}")
        p.grad = None if g is None else g.double().clone()
    opt.step()
save_file({f"param.{i}": p.detach().contiguous() for i, p in enumerate(params)}, sys.argv[3])
print(type(opt).__module__ + "." + type(opt).__name__)
