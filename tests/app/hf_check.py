"""Hugging Face interchange end to end, against transformers and torch.

Usage: hf_check.py TANDEM_BINARY FAMILY, FAMILY one of gpt2, llama, llama-tied, mistral, qwen2, qwen3.

A tiny model of the family is made with a fixed seed and saved with save_pretrained. Tandem trains it from
{"model": {"from_pretrained": DIR, "seq_len": 16}} for 3 steps on a token file holding exactly one window, so every
step sees the same batch; its losses must equal transformers' loss on that window before and after torch's AdamW
steps (configured like Tandem's). Then the final checkpoint is exported with --format hf and loaded by
AutoModelForCausalLM with no missing or unexpected keys; its loss must equal torch's after 3 steps, and its
config.json must name the architecture and model_type read, with that family's own keys as read.
Prints one PASS or FAIL line per check and "N passed, M failed".
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

import transformers
from torch_reference import adamw_losses, loss_of, tandem_losses

SEQ = 16
VOCAB = 64
STEPS = 3
TOL = 1e-5
OPT = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-6, "weight_decay": 0.1}

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail), flush=True)
    results["passed" if ok else "failed"] += 1
    return ok


def make_model(family):
    torch.manual_seed(0)
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                      eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg)
    if family in ("llama", "llama-tied"):
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                                       tie_word_embeddings=family == "llama-tied", bos_token_id=0, eos_token_id=0)
        return transformers.LlamaForCausalLM(cfg)
    if family == "mistral":
        # A window no shorter than the training windows: the attention is full, as Tandem's.
        cfg = transformers.MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                                         sliding_window=2 * SEQ, bos_token_id=0, eos_token_id=0)
        return transformers.MistralForCausalLM(cfg)
    if family == "qwen2":
        cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                                       use_sliding_window=False, max_window_layers=1, tie_word_embeddings=True,
                                       bos_token_id=0, eos_token_id=0)
        return transformers.Qwen2ForCausalLM(cfg)
    if family == "qwen3":
        # q_norm and k_norm on heads of 16 where hidden_size / num_attention_heads is 8; gains drawn away from their
        # initial ones, so a gain read from the wrong tensor or never applied changes the loss.
        cfg = transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       max_position_embeddings=SEQ, attention_bias=False, use_sliding_window=False,
                                       max_window_layers=1, bos_token_id=0, eos_token_id=0)
        model = transformers.Qwen3ForCausalLM(cfg)
        with torch.no_grad():
            for layer in model.model.layers:
                for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                    norm.weight.copy_(1.0 + 0.5 * torch.randn(norm.weight.shape))
        return model
    if family == "mixtral":
        # Every MLP a mixture of 4 experts, top 2; the balance loss measured but not in the loss (transformers'
        # default), so the pipeline run applies.
        cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                         num_experts_per_tok=2, max_position_embeddings=SEQ, sliding_window=None,
                                         bos_token_id=0, eos_token_id=0)
        return transformers.MixtralForCausalLM(cfg)
    if family == "qwen3_moe":
        # Layer 0 sparse (4 experts of 16, top 2, weights renormalised), layer 1 dense (mlp_only_layers); the balance
        # loss in the loss with a weight large enough to move the losses.
        cfg = transformers.Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                          moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                                          output_router_logits=True, router_aux_loss_coef=0.05,
                                          max_position_embeddings=SEQ, bos_token_id=0, eos_token_id=0)
        return transformers.Qwen3MoeForCausalLM(cfg)
    if family == "qwen2_moe":
        # Qwen2's attention (biases on q, k and v); layer 0 sparse (4 experts of 16, top 2, weights not renormalised,
        # and the shared expert of 24 with its sigmoid gate), layer 1 dense; the balance loss in the loss.
        cfg = transformers.Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                          moe_intermediate_size=16, shared_expert_intermediate_size=24,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                          num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                                          decoder_sparse_step=1, mlp_only_layers=[1], output_router_logits=True,
                                          router_aux_loss_coef=0.05, max_position_embeddings=SEQ, bos_token_id=0,
                                          eos_token_id=0)
        return transformers.Qwen2MoeForCausalLM(cfg)
    if family == "olmoe":
        # Every MLP a mixture of 4 experts of 16, top 2, not renormalised; q and k each normalised over the whole
        # projection; the balance loss in the loss. No pad_token_id: transformers would freeze that embedding row
        # (padding_idx), which Tandem trains (docs/huggingface.md).
        cfg = transformers.OlmoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=4, num_experts=4,
                                       num_experts_per_tok=2, norm_topk_prob=False, output_router_logits=True,
                                       router_aux_loss_coef=0.05, max_position_embeddings=SEQ, pad_token_id=None,
                                       bos_token_id=0, eos_token_id=0)
        return transformers.OlmoeForCausalLM(cfg)
    raise SystemExit("unknown family " + family)


# The keys each family's export must carry as the folder Tandem read had them.
OWN_KEYS = {"gpt2": [], "llama": [], "llama-tied": [], "mistral": ["sliding_window"],
            "qwen2": ["use_sliding_window", "sliding_window", "max_window_layers"],
            "qwen3": ["use_sliding_window", "sliding_window", "max_window_layers", "attention_bias", "head_dim"],
            "mixtral": ["sliding_window", "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                        "output_router_logits"],
            "qwen3_moe": ["use_sliding_window", "sliding_window", "max_window_layers", "attention_bias", "head_dim",
                          "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
                          "mlp_only_layers", "router_aux_loss_coef", "output_router_logits"],
            "olmoe": ["num_experts", "num_experts_per_tok", "norm_topk_prob", "router_aux_loss_coef",
                      "output_router_logits", "clip_qkv"],
            # Qwen2-MoE's configuration writes sliding_window 0 without use_sliding_window: read as none, written null.
            "qwen2_moe": ["use_sliding_window", "max_window_layers", "num_experts_per_tok",
                          "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
                          "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef", "output_router_logits",
                          "qkv_bias"]}


def main():
    tandem, family = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")

    model = make_model(family)
    hf_dir = os.path.join(work, "hf")
    model.save_pretrained(hf_dir, safe_serialization=True)
    rng = np.random.default_rng(7)
    tokens = [int(t) for t in rng.integers(0, VOCAB, SEQ + 1)]
    np.array(tokens, dtype=np.uint16).tofile(os.path.join(work, "window.bin"))  # exactly one window of SEQ + 1
    moe = hasattr(model.config, "num_experts_per_tok")
    if moe:
        # The load-balancing loss at the first step's weights, unweighted, as transformers computes it.
        with torch.no_grad():
            x = torch.tensor(tokens[:SEQ], dtype=torch.long)[None]
            want_balance = model(input_ids=x, output_router_logits=True).aux_loss.item()
    want = adamw_losses(model, tokens, SEQ, STEPS, OPT)

    def config(dp):
        return {"model": {"from_pretrained": hf_dir, "seq_len": SEQ},
                "data": {"type": "tokens", "path": os.path.join(work, "window.bin"), "dtype": "uint16"},
                "train_batch_size": dp, "steps": STEPS, "seed": 1,
                "optimizer": {"type": "AdamW", "params": OPT}, "scheduler": {"type": "Constant"},
                "gradient_clipping": 0.0}

    runs = [("one process", 1, None, 1), ("4 as 2: virtual_gpus 2, pipeline 2", 4,
                                          {"virtual_gpus": 2, "pipeline": 2}, 2),
            ("4 as 2: virtual_gpus 2, tensor 2", 4, {"virtual_gpus": 2, "tensor": 2}, 2)]
    if family == "olmoe":
        # Its whole-projection norms split over tp (each token's sums over the slots); the experts also spread over 2 of
        # 4 replicas.
        runs.append(("4 processes: virtual_gpus 4, the experts over 2 (expert parallelism)", 4,
                     {"virtual_gpus": 4, "expert": 2}, 4))
    last_run = None
    for name, n, parallel, dp in runs:
        cfg = config(dp)
        if parallel:
            cfg["parallel"] = parallel
        cfg_path = os.path.join(work, "train.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        run_dir = os.path.join(work, "run_%d_%d" % (n, len(name)))
        cmd = [tandem, "train", cfg_path, "--out", run_dir] + (["-n", str(n)] if n > 1 else [])
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if not check(family + " trains from_pretrained on " + name, p.returncode == 0, (p.stdout + p.stderr)[-2000:]):
            continue
        got = tandem_losses(run_dir)
        d1, d2 = abs(got[0] - want[0]), abs(got[1] - want[1])
        print("  %s: step-1 loss %.8f (transformers %.8f, |diff| %.3g), step-2 %.8f (torch AdamW %.8f, |diff| %.3g)"
              % (name, got[0], want[0], d1, got[1], want[1], d2))
        check(family + " step-1 loss equals transformers' on " + name, d1 <= TOL)
        check(family + " step-2 loss equals torch's after one AdamW step on " + name, d2 <= TOL)
        if moe:
            with open(os.path.join(run_dir, "metrics.jsonl")) as f:
                balance = json.loads(f.readline()).get("moe_balance_loss")
            check(family + " step-1 moe_balance_loss equals transformers' aux_loss on " + name,
                  balance is not None and abs(balance - want_balance) <= TOL, "%r vs %r" % (balance, want_balance))
        last_run = last_run or run_dir

    if last_run is None:
        return
    out_dir = os.path.join(work, "exported")
    p = subprocess.run([tandem, "export", last_run, "--to", out_dir, "--format", "hf"], env=env,
                       capture_output=True, text=True, timeout=300)
    if not check(family + " tandem export --format hf", p.returncode == 0, (p.stdout + p.stderr)[-2000:]):
        return
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(out_dir, output_loading_info=True,
                                                                     dtype=torch.float32)
    problems = {k: v for k, v in info.items() if v}
    check(family + " the export loads in transformers with no missing or unexpected keys", not problems, str(problems))
    with open(os.path.join(hf_dir, "config.json")) as f:
        read = json.load(f)
    with open(os.path.join(out_dir, "config.json")) as f:
        written = json.load(f)
    same = {k: (read.get(k), written.get(k)) for k in ["architectures", "model_type"] + OWN_KEYS[family]}
    check(family + " the export's config.json keeps the architecture, model_type and own keys read",
          all(a == b for a, b in same.values()) and type(loaded).__name__ == read["architectures"][0], str(same))
    with torch.no_grad():
        final = loss_of(loaded.eval(), tokens, SEQ).item()
    print("  exported: loss %.8f (torch after %d steps %.8f, |diff| %.3g)" % (final, STEPS, want[-1],
                                                                             abs(final - want[-1])))
    check(family + " the exported model's loss equals torch's after %d steps" % STEPS, abs(final - want[-1]) <= TOL)

    # Sharded export: a small shard size writes an index, which Tandem reads back and transformers loads.
    shard_dir = os.path.join(work, "sharded")
    p = subprocess.run([tandem, "export", last_run, "--to", shard_dir, "--format", "hf", "--max-shard-size", "20KB"],
                       env=env, capture_output=True, text=True, timeout=300)
    shards = [f for f in os.listdir(shard_dir) if f.endswith(".safetensors")] if p.returncode == 0 else []
    check(family + " export in shards with model.safetensors.index.json",
          p.returncode == 0 and len(shards) > 1 and os.path.exists(os.path.join(shard_dir, "model.safetensors.index.json")),
          (p.stdout + p.stderr)[-2000:])
    if shards:
        sharded = transformers.AutoModelForCausalLM.from_pretrained(shard_dir, dtype=torch.float32)
        with torch.no_grad():
            s = loss_of(sharded.eval(), tokens, SEQ).item()
        check(family + " the sharded export loads with the same loss", abs(s - final) <= 1e-7, "%r vs %r" % (s, final))


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    sys.exit(1 if results["failed"] else 0)
