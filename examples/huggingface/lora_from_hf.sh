#!/usr/bin/env bash
# LoRA on a Hugging Face model with instruction data, trained in Tandem on 4 processes, the adapter loaded back in PEFT
# and the merged model in transformers: the five steps of README.md's "Fine-tune with LoRA", as they are written there.
#
# Usage: lora_from_hf.sh [WORK_DIR [TANDEM_BINARY]]
#   WORK_DIR (default build/lora_example) receives the model folder, the instruction data and its token files, the
#   config, the run and the exports; files of an earlier run there are replaced. The binary is TANDEM_BINARY, else
#   $TANDEM, else build/release/apps/tandem/tandem; Python is $PYTHON, else build/pyvenv/bin/python
#   (tools/install-deps.sh --tests makes it, with torch, transformers and peft).
# Exits non-zero at the first step that fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${1:-$root/build/lora_example}
tandem=${2:-${TANDEM:-$root/build/release/apps/tandem/tandem}}
python=${PYTHON:-$root/build/pyvenv/bin/python}
corpus=/usr/share/common-licenses/GPL-3

[ -x "$tandem" ] || { echo "error: no tandem binary at $tandem (build it, or give its path)" >&2; exit 1; }
[ -x "$python" ] || {
  echo "error: no Python at $python (run tools/install-deps.sh --tests, or set PYTHON)" >&2
  exit 1
}
[ -r "$corpus" ] || { echo "error: $corpus is not readable (the text this example trains on)" >&2; exit 1; }
tandem=$(realpath "$tandem")
python=$(realpath -s "$python")
mkdir -p "$work"
cd "$work"
start=$SECONDS

step() { printf '\n== %s\n' "$*"; }

step "1. a Hugging Face model folder, and instruction data: prompt/completion pairs, one JSON object a line"
"$python" "$here/make_tiny_llama.py" "$corpus" tiny-llama
"$python" "$here/make_instructions.py" "$corpus" instructions.jsonl

step "2. token files and their loss masks: only the completions count, one pair in ten held out"
"$python" "$root/tools/prepare_data.py" --tokenizer tiny-llama/tokenizer.json --val-fraction 0.1 --overwrite \
  --out train.bin instructions.jsonl

step "3. train a LoRA adapter on every projection: 4 processes as 2 virtual GPUs of 2 tensor-parallel slots, ZeRO-3"
cat >config.json <<'JSON'
{
  "model": { "from_pretrained": "tiny-llama", "seq_len": 64 },
  "lora": { "r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "target_modules": "all-linear" },
  "data": { "type": "tokens", "path": "train.bin" },
  "eval": { "data": { "type": "tokens", "path": "train_val.bin" }, "every": 10, "steps": 1 },
  "train_batch_size": 16,
  "train_micro_batch_size_per_gpu": 4,
  "steps": 30,
  "steps_per_print": 10,
  "optimizer": { "type": "AdamW", "params": { "lr": 1e-2 } },
  "parallel": { "virtual_gpus": 2, "tensor": 2 },
  "zero_optimization": { "stage": 3 }
}
JSON
cat config.json
"$tandem" train -n 4 config.json --out run --overwrite

step "4. export the adapter as a PEFT folder, and the model with the adapter merged as a Hugging Face folder"
"$tandem" export run --to adapter --format peft --overwrite
"$tandem" export run --to merged --format hf --merge --overwrite
cp tiny-llama/tokenizer.json tiny-llama/tokenizer_config.json merged/

step "5. load the adapter in PEFT and the merged model in transformers, measure them and generate"
"$python" "$here/use_adapter.py" adapter tiny-llama merged train_val.bin 64

printf '\ndone in %d s: %s\n' $((SECONDS - start)) "$work"
