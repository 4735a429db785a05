"""Reference for gputrain's Muon: torch.optim.Muon and torch.optim.AdamW training a transformers model.

usage: muon_reference.py updates PROBLEM OPTIONS_JSON OUT
  torch.optim.Muon alone on given gradients. PROBLEM: a safetensors file with each parameter's initial
  value "param.<i>" and its gradient at each step "grad.<step>.<i>" (steps 1..N). OPTIONS_JSON: {"steps":
  N, "muon": Muon's arguments (and "ns_dtype"), "bands": per parameter, the rows of each matrix it
  stacks}: each band is its own torch parameter. Writes the parameters after N steps ("param.<i>", the
  bands stacked again) and Muon's momentum buffers ("momentum.<i>", stacked the same way) to OUT.
usage: muon_reference.py MODEL_DIR TOKENS OPTIONS_JSON OUT
  Saves a random LlamaForCausalLM (seed 0, float32; OPTIONS["config"] as LlamaConfig's arguments) to
  MODEL_DIR, then trains it on the int64 "tokens" [steps, batch, seq_len + 1] of the safetensors file
  TOKENS, one step per batch: next-token cross-entropy over every position, Muon (OPTIONS["muon"]:
  torch.optim.Muon's arguments, "ns_dtype": "bf16" | "fp32") for every 2-D parameter but the
  embedding and the head, AdamW (OPTIONS["adamw"]: lr, betas, eps, weight_decay) for the rest, its
  weight decay on the head only (norms and the embedding undecayed). Writes {"losses": each step's
  loss, then the loss of the first batch after the last step} as JSON to OUT.
"""
import json
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.optim import _muon
from transformers import LlamaConfig, LlamaForCausalLM


def muon_with(muon_options, params):
    """torch.optim.Muon over params; "ns_dtype": "fp32" runs its own iteration with float32 for bfloat16."""
    muon_options = dict(muon_options)
    if muon_options.pop("ns_dtype", "bf16") == "fp32":
        bf16_iteration = _muon._zeropower_via_newtonschulz

        def fp32_iteration(grad, ns_coefficients, ns_steps, eps):
            real_bfloat16 = torch.Tensor.bfloat16
            torch.Tensor.bfloat16 = lambda t: t.float().clone()  # a copy, as bfloat16() makes: the iteration is in place
            try:
                return bf16_iteration(grad, ns_coefficients, ns_steps, eps)
            finally:
                torch.Tensor.bfloat16 = real_bfloat16

        _muon._zeropower_via_newtonschulz = fp32_iteration
    return torch.optim.Muon(params, **muon_options)


if sys.argv[1] == "updates":
    problem, options = load_file(sys.argv[2]), json.loads(sys.argv[3])
    stacked = []  # per parameter, its bands as parameters
    for i, rows in enumerate(options["bands"]):
        whole = problem[f"param.{i}"]
        stacked.append([torch.nn.Parameter(band.clone()) for band in whole.split(rows)])
    muon = muon_with(options["muon"], [band for bands in stacked for band in bands])
    for step in range(1, options["steps"] + 1):
        for i, bands in enumerate(stacked):
            for band, grad in zip(bands, problem[f"grad.{step}.{i}"].split(options["bands"][i])):
                band.grad = grad.clone()
        muon.step()
    result = {f"param.{i}": torch.cat([b.detach() for b in bands]) for i, bands in enumerate(stacked)}
    for i, bands in enumerate(stacked):
        result[f"momentum.{i}"] = torch.cat([muon.state[b]["momentum_buffer"] for b in bands])
    save_file(result, sys.argv[4])
    sys.exit(0)

model_dir, tokens_file, options, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(**options["config"]))
model.config._attn_implementation = "eager"
with torch.no_grad():  # weights large enough that every step visibly moves the loss
    for p in model.parameters():
        p.normal_(0.0, 0.1) if p.dim() > 1 else p.uniform_(0.8, 1.2)
model.save_pretrained(model_dir)

matrices, decayed, undecayed = [], [], []
for name, p in model.named_parameters():
    if p.dim() == 2 and "embed_tokens" not in name and "lm_head" not in name:
        matrices.append(p)
    else:
        (decayed if "lm_head" in name else undecayed).append(p)
a = options["adamw"]
muon = muon_with(options["muon"], matrices)
adamw = torch.optim.AdamW([{"params": decayed, "weight_decay": a["weight_decay"]},
                           {"params": undecayed, "weight_decay": 0.0}],
                          lr=a["lr"], betas=tuple(a["betas"]), eps=a["eps"])

batches = load_file(tokens_file)["tokens"]


def loss_on(batch):
    logits = model(batch[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))


model.train()
losses = []
for batch in batches:
    loss = loss_on(batch)
    losses.append(loss.item())
    loss.backward()
    muon.step()
    adamw.step()
    muon.zero_grad()
    adamw.zero_grad()
with torch.no_grad():
    losses.append(loss_on(batches[0]).item())
json.dump({"losses": losses, "muon_matrices": len(matrices)}, open(out, "w"))
