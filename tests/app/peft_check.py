"""LoRA adapters end to end, against Hugging Face PEFT, transformers and torch.

Usage: peft_check.py TANDEM_BINARY FAMILY, FAMILY one of llama, qwen3, qwen2_moe, qwen3_moe, gpt2.

A tiny model of the family is made by transformers and saved with save_pretrained; PEFT adds an adapter with
init_lora_weights=False (so B is not zero and the first step already moves both factors) on every projection, saved with
save_pretrained (qwen3_moe: on attention's projections and, through target_parameters, on the experts' stacked
gate_up_proj and down_proj, an adapter per expert). Tandem continues it from {"lora": {"from_pretrained": ADAPTER}} on
the base {"model": {"from_pretrained": BASE}} for 3 steps of fp32 on a token file holding exactly one window (every step
sees the same batch), on one process, on 4 used as tp2 x dp2 with ZeRO-3, (all but gpt2) as pp2 x dp2 with ZeRO-1 and
(qwen3_moe) as dp4 with the experts and their adapters over 2 of the replicas at ZeRO-3; its losses must equal PEFT's
with torch's AdamW (configured like Tandem's) within 1e-5. Each run's checkpoint is exported with --format peft, loaded
by PeftModel.from_pretrained with no missing-key warning, and its logits compared with the torch-trained model's (1e-4);
and with --format hf --merge, whose weights (read back by transformers, which stacks the experts Tandem writes one a
tensor) must equal PEFT's merge_and_unload of that adapter within 1e-5 (relative to each tensor's largest element) and
whose loss must equal the torch-trained model's. Prints one PASS or FAIL line per check and "N passed, M failed".
"""

import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import peft
import torch
import transformers
from torch_reference import adamw_losses, loss_of, tandem_losses

SEQ = 16
VOCAB = 64
STEPS = 3
TOL = 1e-5
OPT = {"lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-6, "weight_decay": 0.1}
LORA = {"r": 4, "lora_alpha": 8}
TARGETS = {"llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
           "gpt2": ["c_attn", "c_proj", "c_fc"]}
TARGETS["qwen3"] = TARGETS["llama"]
# Qwen2-MoE: "all-linear" reaches the dense layer's MLP, the sparse layer's shared expert (mlp.shared_expert.gate_proj,
# up_proj, down_proj) and its gate (mlp.shared_expert_gate, C -> 1), as PEFT selects them.
TARGETS["qwen2_moe"] = "all-linear"
# Qwen3-MoE: attention's projections, and the experts' 3-D parameters through target_parameters (PEFT's ParamWrapper:
# both on one module, so gate_up_proj's tensors are named after experts.base_layer).
TARGETS["qwen3_moe"] = ["q_proj", "k_proj", "v_proj", "o_proj"]
TARGET_PARAMETERS = {"qwen3_moe": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]}

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail), flush=True)
    results["passed" if ok else "failed"] += 1
    return ok


def make_base(family):
    torch.manual_seed(0)
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                      eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg)
    if family == "qwen3":
        # The per-head norms' gains (frozen under LoRA) drawn away from one, on heads of 16 where hidden / heads is 8.
        cfg = transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       max_position_embeddings=SEQ, bos_token_id=0, eos_token_id=0)
        model = transformers.Qwen3ForCausalLM(cfg)
        with torch.no_grad():
            for layer in model.model.layers:
                for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                    norm.weight.copy_(1.0 + 0.5 * torch.randn(norm.weight.shape))
        return model
    if family == "qwen2_moe":
        # Layer 0 sparse (4 experts of 16, top 2, and the shared expert of 24 with its sigmoid gate), layer 1 dense; the
        # balance loss in the loss, its sums carried between the pipeline run's stages.
        cfg = transformers.Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                          moe_intermediate_size=16, shared_expert_intermediate_size=24,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                          num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                                          decoder_sparse_step=1, mlp_only_layers=[1], output_router_logits=True,
                                          router_aux_loss_coef=0.05, max_position_embeddings=SEQ, bos_token_id=0,
                                          eos_token_id=0)
        return transformers.Qwen2MoeForCausalLM(cfg)
    if family == "qwen3_moe":
        # Layer 0 sparse (4 experts of 16, top 2 renormalised), layer 1 dense; the balance loss in the loss.
        cfg = transformers.Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                          moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                                          output_router_logits=True, router_aux_loss_coef=0.05,
                                          max_position_embeddings=SEQ, bos_token_id=0, eos_token_id=0)
        return transformers.Qwen3MoeForCausalLM(cfg)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                                   bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def run(cmd, env, timeout=600):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def main():
    tandem, family = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    transformers.utils.logging.disable_progress_bar()

    base_dir, adapter_dir = os.path.join(work, "base"), os.path.join(work, "adapter")
    make_base(family).save_pretrained(base_dir, safe_serialization=True)
    torch.manual_seed(1)
    config = peft.LoraConfig(r=LORA["r"], lora_alpha=LORA["lora_alpha"], target_modules=TARGETS[family],
                             target_parameters=TARGET_PARAMETERS.get(family), init_lora_weights=False,
                             task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GPT-2's Conv1D: PEFT sets fan_in_fan_out itself and says so
        start = peft.get_peft_model(transformers.AutoModelForCausalLM.from_pretrained(base_dir), config)
    start.save_pretrained(adapter_dir)
    if family == "qwen2_moe":
        adapted = [n for n, _ in start.named_modules() if n.endswith(("shared_expert.gate_proj", "shared_expert_gate"))]
        check("qwen2_moe PEFT adapts the shared expert's gate_proj and its gate", len(adapted) == 2, str(adapted))
    if family == "qwen3_moe":
        names = set(start.state_dict())
        nested = "base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.default.weight"
        check("qwen3_moe PEFT adapts the experts' two parameters, gate_up_proj's inside down_proj's wrapper",
              nested in names and nested.replace("base_layer.", "") in names,
              str(sorted(n for n in names if "experts" in n)))
    rng = np.random.default_rng(7)
    tokens = [int(t) for t in rng.integers(0, VOCAB, SEQ + 1)]
    np.array(tokens, dtype=np.uint16).tofile(os.path.join(work, "window.bin"))  # exactly one window of SEQ + 1
    want = adamw_losses(start, tokens, SEQ, STEPS, OPT, eval_last=True)  # `start` is now the torch-trained model
    x = torch.tensor(tokens[:SEQ], dtype=torch.long)[None]
    with torch.no_grad():
        want_logits = start(input_ids=x).logits[0].float().numpy()

    runs = [("one process", 1, None, 0), ("4 as tp2 x dp2, ZeRO-3", 4, {"virtual_gpus": 2, "tensor": 2}, 3)]
    if family != "gpt2":  # the frozen base loaded as ZeRO-1 shards and gathered, over two pipeline stages
        runs.append(("4 as pp2 x dp2, ZeRO-1", 4, {"virtual_gpus": 2, "pipeline": 2}, 1))
    if family == "qwen3_moe":  # each expert's adapter read, trained and exported on its expert's slot
        runs.append(("4 as dp4, the experts over 2, ZeRO-3", 4, {"virtual_gpus": 4, "expert": 2}, 3))
    for name, n, parallel, zero in runs:
        dp = parallel["virtual_gpus"] if parallel else 1
        cfg = {"model": {"from_pretrained": base_dir, "seq_len": SEQ},
               "lora": {"from_pretrained": adapter_dir},
               "data": {"type": "tokens", "path": os.path.join(work, "window.bin"), "dtype": "uint16"},
               "train_batch_size": dp, "steps": STEPS, "seed": 1,
               "optimizer": {"type": "AdamW", "params": OPT}, "scheduler": {"type": "Constant"},
               "gradient_clipping": 0.0}
        if parallel:
            cfg["parallel"] = parallel
            cfg["zero_optimization"] = {"stage": zero}
        tag = "%d_%d%s" % (n, zero, "_ep" if parallel and "expert" in parallel else "")
        cfg_path = os.path.join(work, "train_%s.json" % tag)
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        run_dir = os.path.join(work, "run_%s" % tag)
        p = run([tandem, "train", cfg_path, "--out", run_dir] + (["-n", str(n)] if n > 1 else []), env)
        if not check("%s LoRA continues a PEFT adapter on %s" % (family, name), p.returncode == 0,
                     (p.stdout + p.stderr)[-2000:]):
            continue
        got = tandem_losses(run_dir)
        diffs = [abs(a - b) for a, b in zip(got, want[:STEPS])]
        print("  %s: losses %s, PEFT + torch AdamW %s, largest |diff| %.3g"
              % (name, ["%.8f" % v for v in got], ["%.8f" % v for v in want[:STEPS]], max(diffs)))
        check("%s the %d losses equal PEFT's and torch AdamW's on %s" % (family, STEPS, name),
              len(got) == STEPS and max(diffs) <= TOL)

        out_dir = os.path.join(work, "peft_%s" % tag)
        p = run([tandem, "export", run_dir, "--to", out_dir, "--format", "peft"], env)
        if check("%s tandem export --format peft from %s" % (family, name), p.returncode == 0,
                 (p.stdout + p.stderr)[-2000:]):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loaded = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base_dir),
                                                        out_dir)
            missing = [str(w.message) for w in caught if "missing" in str(w.message).lower()]
            check("%s the export loads with PeftModel.from_pretrained with no missing keys" % family, not missing,
                  "; ".join(missing))
            with torch.no_grad():
                logits = loaded.eval()(input_ids=x).logits[0].float().numpy()
            d = float(np.abs(logits - want_logits).max())
            print("  exported adapter: logits |diff| %.3g against the torch-trained model" % d)
            check("%s the exported adapter's logits equal the torch-trained model's within 1e-4" % family, d <= 1e-4)
            # PEFT's merge of the same adapter, for the merged export below.
            merged_want = {k: v.detach().float().numpy() for k, v in loaded.merge_and_unload().state_dict().items()}
        else:
            merged_want = None

        merged_dir = os.path.join(work, "merged_%s" % tag)
        p = run([tandem, "export", run_dir, "--to", merged_dir, "--format", "hf", "--merge"], env)
        if check("%s tandem export --format hf --merge from %s" % (family, name), p.returncode == 0,
                 (p.stdout + p.stderr)[-2000:]) and merged_want:
            # Read through transformers, which stacks the mixtures' experts (written one expert a tensor) as its
            # modules hold them.
            merged = transformers.AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
            got_w = {k: v.detach().float().numpy() for k, v in merged.state_dict().items()}
            worst, where, missing = 0.0, "", []
            for k, v in merged_want.items():
                if k not in got_w:
                    missing.append(k)
                    continue
                scale = max(float(np.abs(v).max()), 1e-30)
                d = float(np.abs(got_w[k] - v).max()) / scale
                if d > worst:
                    worst, where = d, k
            print("  merged: largest relative |diff| %.3g (%s) against PEFT's merge_and_unload of the exported adapter"
                  % (worst, where))
            check("%s the merged export equals PEFT's merge_and_unload within 1e-5" % family,
                  not missing and worst <= TOL, "missing %s" % missing if missing else where)
            with torch.no_grad():
                final = loss_of(merged.eval(), tokens, SEQ).item()
            check("%s the merged export's loss equals torch's after %d steps" % (family, STEPS),
                  abs(final - want[-1]) <= TOL, "%r vs %r" % (final, want[-1]))


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    sys.exit(1 if results["failed"] else 0)
