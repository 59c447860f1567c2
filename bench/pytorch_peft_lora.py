"""The LoRA baseline: transformers' LlamaForCausalLM with a Hugging Face PEFT adapter, trained the way PEFT's users
train it.

Random weights from a LlamaConfig (nothing is downloaded) held in bf16 and frozen, a LoRA adapter from
peft.get_peft_model (its weights in fp32, as PEFT casts them beside a bf16 base), bf16 autocast, SDPA attention,
gradient checkpointing of each decoder layer, torch.compile of each decoder layer, fused AdamW on the adapters,
gradient accumulation. bench/gpu_lora.sh runs Tandem's LoRA against it on the same shape in the same call.

  python3 bench/pytorch_peft_lora.py --shape 8b --micro 2 --accum 8 --seq 2048 --r 16 --compile --checkpoint
Shapes: 8b = Llama-3-8B (d4096 L32 h32 kv8 ffn 14336, V 128256, untied); tiny (d64 L2 h4 kv2 ffn 128, V 512) for a
dry run on the CPU (--device cpu). Prints `RESULT {json}`: tokens/s, peak memory, the loss of each timed step.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

SHAPES = {
    "8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512, tie_word_embeddings=False),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro", type=int, default=2)
    p.add_argument("--accum", type=int, default=8)
    p.add_argument("--steps", type=int, default=3, help="timed steps, after 3 warm-up steps")
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32)
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing of each decoder layer")
    a = p.parse_args()

    import peft
    from transformers import LlamaConfig, LlamaForCausalLM
    dev = torch.device(a.device)
    torch.manual_seed(0)
    cfg = LlamaConfig(**SHAPES[a.shape], max_position_embeddings=max(a.seq, 2048), rope_theta=500000.0,
                      rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    out = {"shape": a.shape, "micro": a.micro, "accum": a.accum, "seq": a.seq, "r": a.r,
           "mode": "peft" + ("+compile" if a.compile else "") + ("+ckpt" if a.checkpoint else "")}
    try:
        with dev:
            base = LlamaForCausalLM(cfg).to(torch.bfloat16)
        if a.checkpoint:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            base.enable_input_require_grads()  # the frozen embedding's output must carry a gradient for checkpointing
        lora = peft.LoraConfig(r=a.r, lora_alpha=a.alpha, lora_dropout=0.0, target_modules=TARGETS,
                               task_type="CAUSAL_LM")
        model = peft.get_peft_model(base, lora)  # adapters in fp32 beside the bf16 base (autocast_adapter_dtype)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if a.compile:
            for layer in model.base_model.model.model.layers:
                layer.compile()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4, fused=a.device == "cuda")
        V, T = cfg.vocab_size, a.seq
        gen = torch.Generator(device=dev).manual_seed(1)

        def step():
            opt.zero_grad(set_to_none=True)
            total = 0.0
            for _ in range(a.accum):
                x = torch.randint(0, V, (a.micro, T), device=dev, generator=gen)
                y = torch.randint(0, V, (a.micro, T), device=dev, generator=gen)
                with torch.autocast(a.device, dtype=torch.bfloat16):
                    logits = model(input_ids=x).logits
                    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1)) / a.accum
                loss.backward()
                total += loss.detach()
            opt.step()
            return float(total)

        sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
        for _ in range(3):
            step()
        sync()
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter()
        losses = [step() for _ in range(a.steps)]
        sync()
        dt = (time.perf_counter() - t0) / a.steps
        tokens = a.micro * a.accum * T
        out.update(trainable_params=trainable, tokens_per_s=tokens / dt, step_s=dt, losses=losses,
                   peak_mem_GiB=torch.cuda.max_memory_allocated(dev) / 2**30 if a.device == "cuda" else None)
    except torch.cuda.OutOfMemoryError:
        out["oom"] = True
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
