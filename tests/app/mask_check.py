"""Instruction data with loss masks end to end, against transformers and torch.

Usage: mask_check.py TANDEM_BINARY SOURCE_DIR

A byte-level BPE tokenizer (with a ChatML-style chat template in its tokenizer_config.json) and a tiny Llama of its
vocabulary are made here. tools/prepare_data.py turns prompt/completion and messages lines into train.bin and
train.mask.bin; the conversation's ids must be transformers' apply_chat_template's, and the tokens that count must be
the completion's and the assistant turns' (with their end-of-turn markup) and the end of sequence after them. The
first SEQ + 1 tokens of the pair make a one-window file (every sample is that window): Tandem trains the model from
from_pretrained on it for 3 steps on one process and on 4 (dp2 x tp2), and its losses must equal transformers' loss
with labels -100 at the masked positions, before and after torch's AdamW steps, within 1e-5 (the mean over the
targets that count); the full-window loss must differ, so the mask is what makes them equal.
Prints one PASS or FAIL line per check and "N passed, M failed".
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SEQ = 48
STEPS = 3
TOL = 1e-5
OPT = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-6, "weight_decay": 0.1}
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CONVERSATION = [{"role": "system", "content": "Answer in one sentence."},
                {"role": "user", "content": "May I share the program?"},
                {"role": "assistant", "content": "Yes, you may convey verbatim copies."},
                {"role": "user", "content": "And change it?"},
                {"role": "assistant", "content": "Yes, under the same terms."}]

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail), flush=True)
    results["passed" if ok else "failed"] += 1
    return ok


def write_pair(path, ids, mask):
    """An llm.c token file and its loss mask."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(ids)] + [0] * 253)))
        f.write(np.asarray(ids, dtype="<u2").tobytes())
    with open(path[:-4] + ".mask.bin", "wb") as f:
        f.write(struct.pack("<256i", *([20240522, 1, len(ids)] + [0] * 253)))
        f.write(np.asarray(mask, dtype=np.uint8).tobytes())


def masked_loss(model, ids, mask):
    x = torch.tensor(ids[:SEQ], dtype=torch.long)[None]
    labels = torch.tensor([i if m else -100 for i, m in zip(ids[1:], mask[1:])], dtype=torch.long)
    logits = model(input_ids=x).logits[0].float()
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100)


def torch_losses(model, ids, mask):
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": OPT["weight_decay"]},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=OPT["lr"], betas=tuple(OPT["betas"]), eps=OPT["eps"])
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = masked_loss(model, ids, mask)
        out.append(loss.item())
        loss.backward()
        opt.step()
    return out


def main():
    tandem, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    transformers.utils.logging.disable_progress_bar()
    os.chdir(work)

    text = open("/usr/share/common-licenses/GPL-3").read()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text[i:i + 2000] for i in range(0, len(text), 2000)],
                            trainers.BpeTrainer(vocab_size=320, special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>",
                                                                                "<|im_end|>"]))
    os.makedirs("model")
    tok.save("model/tokenizer.json")
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    with open("model/tokenizer_config.json", "w") as f:
        json.dump(dict(special, tokenizer_class="PreTrainedTokenizerFast", chat_template=TEMPLATE), f)
    vocab = tok.get_vocab_size()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                                   bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained("model", safe_serialization=True)

    prompt, completion = "Is it free software? ", "Yes: it respects your freedom."
    with open("inst.jsonl", "w") as f:
        f.write(json.dumps({"messages": CONVERSATION}) + "\n")
        f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
    p = subprocess.run([sys.executable, os.path.join(source, "tools/prepare_data.py"), "--tokenizer",
                        "model/tokenizer.json", "--out", "train.bin", "inst.jsonl"], capture_output=True, text=True)
    if not check("prepare_data writes the tokens and their loss mask", p.returncode == 0 and
                 os.path.exists("train.mask.bin"), (p.stdout + p.stderr)[-2000:]):
        return
    raw, mraw = open("train.bin", "rb").read(), open("train.mask.bin", "rb").read()
    ids = np.frombuffer(raw[1024:], dtype="<u2").tolist()
    mask = list(mraw[1024:])
    header = list(np.frombuffer(mraw[:12], dtype="<i4"))
    check("the mask has llm.c's header (magic 20240522, version 1, the token count) and a byte per token",
          header == [20240522, 1, len(ids)] and len(mask) == len(ids), str(header))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file="model/tokenizer.json", **special)
    hf.chat_template = TEMPLATE
    chat = hf.apply_chat_template(CONVERSATION, tokenize=True)
    chat = list(chat["input_ids"] if hasattr(chat, "keys") else chat)
    n = len(chat)
    check("the conversation's ids are transformers' apply_chat_template's, then the end of sequence",
          ids[:n + 1] == chat + [2])
    counted = tok.decode([i for i, m in zip(ids[:n + 1], mask[:n + 1]) if m], skip_special_tokens=False)
    want = "".join(m["content"] + "<|im_end|>\n" for m in CONVERSATION if m["role"] == "assistant") + "</s>"
    check("the tokens that count are the assistant turns with their end of turn, and the end of sequence",
          counted == want, repr(counted))
    rest, rest_mask = ids[n + 1:], mask[n + 1:]
    p_ids = tok.encode(prompt, add_special_tokens=False).ids
    c_ids = tok.encode(completion, add_special_tokens=False).ids
    check("a prompt/completion line is the prompt's ids (not counted) then the completion's and the end (counted)",
          rest == p_ids + c_ids + [2] and rest_mask == [0] * len(p_ids) + [1] * (len(c_ids) + 1))

    # One window of SEQ + 1 tokens from the conversation's start: every sample of every step is this window.
    window, window_mask = ids[:SEQ + 1], mask[:SEQ + 1]
    write_pair(os.path.join(work, "window.bin"), window, window_mask)
    with torch.no_grad():
        x = torch.tensor(window[:SEQ])[None]
        whole = torch.nn.functional.cross_entropy(model(input_ids=x).logits[0].float(), torch.tensor(window[1:])).item()
    want_losses = torch_losses(model, window, window_mask)
    check("the masked loss differs from the whole window's (the mask matters here)", abs(whole - want_losses[0]) > 1e-3,
          "%r vs %r" % (whole, want_losses[0]))
    for name, n_proc, parallel in (("one process", 1, None), ("4 as dp2 x tp2", 4, {"virtual_gpus": 2, "tensor": 2})):
        dp = parallel["virtual_gpus"] if parallel else 1
        cfg = {"model": {"from_pretrained": "model", "seq_len": SEQ},
               "data": {"type": "tokens", "path": "window.bin"},
               "train_batch_size": 2 * dp, "train_micro_batch_size_per_gpu": 1, "steps": STEPS, "seed": 1,
               "optimizer": {"type": "AdamW", "params": OPT}, "gradient_clipping": 0.0}
        if parallel:
            cfg["parallel"] = parallel
        with open("cfg.json", "w") as f:
            json.dump(cfg, f)
        run_dir = "run_%d" % n_proc
        launch = ["-n", str(n_proc)] if n_proc > 1 else []
        p = subprocess.run([tandem, "train", "cfg.json", "--out", run_dir] + launch, env=env, capture_output=True,
                           text=True, timeout=600)
        if not check("tandem trains on the masked window on " + name, p.returncode == 0,
                     (p.stdout + p.stderr)[-2000:]):
            continue
        check("the data line names the loss mask", "loss mask" in p.stdout, p.stdout[-500:])
        got = [json.loads(l)["loss"] for l in open(os.path.join(run_dir, "metrics.jsonl"))]
        diffs = [abs(a - b) for a, b in zip(got, want_losses)]
        print("  %s: losses %s, transformers with labels -100 and torch AdamW %s" %
              (name, ["%.8f" % v for v in got], ["%.8f" % v for v in want_losses]))
        check("the %d losses equal transformers' with labels -100 on %s" % (STEPS, name),
              len(got) == STEPS and max(diffs) <= TOL, "largest |diff| %.3g" % max(diffs))


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    sys.exit(1 if results["failed"] else 0)
