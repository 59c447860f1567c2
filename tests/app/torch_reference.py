"""What the Hugging Face checks share (hf_check.py, peft_check.py): the loss of one sequence under a transformers
model, the losses of a few torch AdamW steps on it (the reference Tandem's losses must equal), and the losses a
Tandem run wrote to its metrics.jsonl."""
import json
import os

import torch


def loss_of(model, tokens, seq):
    """Mean next-token cross-entropy of tokens[:seq] predicting tokens[1:] (seq + 1 tokens), plus a mixture of
    experts' load-balancing loss times router_aux_loss_coef where the config puts it in the loss
    (output_router_logits), as transformers' own loss does."""
    x = torch.tensor(tokens[:seq], dtype=torch.long)[None]
    y = torch.tensor(tokens[1:], dtype=torch.long)
    out = model(input_ids=x)
    loss = torch.nn.functional.cross_entropy(out.logits[0].float(), y)
    if getattr(model.config, "output_router_logits", False):
        loss = loss + model.config.router_aux_loss_coef * out.aux_loss
    return loss


def adamw_losses(model, tokens, seq, steps, opt, eval_last=False):
    """The loss before each of `steps` AdamW steps on the trainable parameters, and after the last (in eval mode with
    `eval_last`: no dropout). Weight decay on matrices and embeddings only, as Tandem decays."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": opt["weight_decay"]},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    adamw = torch.optim.AdamW(groups, lr=opt["lr"], betas=tuple(opt["betas"]), eps=opt["eps"])
    out = []
    for _ in range(steps):
        adamw.zero_grad()
        loss = loss_of(model, tokens, seq)
        out.append(loss.item())
        loss.backward()
        adamw.step()
    if eval_last:
        model.eval()
    with torch.no_grad():
        out.append(loss_of(model, tokens, seq).item())
    return out


def tandem_losses(run_dir):
    """The loss of each step a Tandem run wrote."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]
