#!/usr/bin/env bash
# Start from a Hugging Face model, train it in Tandem on 4 processes used as 2 virtual GPUs, and load the result back
# in transformers: the five steps of README.md's "Start from a Hugging Face model", as they are written there.
#
# Usage: start_from_hf.sh [WORK_DIR [TANDEM_BINARY]]
#   WORK_DIR (default build/hf_example) receives the model folder, token files, config, run and export; files of an
#   earlier run there are replaced. The binary is TANDEM_BINARY, else $TANDEM, else build/release/apps/tandem/tandem;
#   Python is $PYTHON, else build/pyvenv/bin/python (tools/install-deps.sh makes it, with torch and transformers).
# Exits non-zero at the first step that fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${1:-$root/build/hf_example}
tandem=${2:-${TANDEM:-$root/build/release/apps/tandem/tandem}}
python=${PYTHON:-$root/build/pyvenv/bin/python}
corpus=/usr/share/common-licenses/GPL-3

[ -x "$tandem" ] || { echo "error: no tandem binary at $tandem (build it, or give its path)" >&2; exit 1; }
[ -x "$python" ] || { echo "error: no Python at $python (run tools/install-deps.sh, or set PYTHON)" >&2; exit 1; }
[ -r "$corpus" ] || { echo "error: $corpus is not readable (the text this example trains on)" >&2; exit 1; }
tandem=$(realpath "$tandem")
python=$(realpath -s "$python")
mkdir -p "$work"
cd "$work"
start=$SECONDS

step() { printf '\n== %s\n' "$*"; }

step "1. a Hugging Face model folder: a tiny Llama and its tokenizer, saved with save_pretrained"
"$python" "$here/make_tiny_llama.py" "$corpus" tiny-llama

step "2. token files: every line of the text a document, one in ten held out"
"$python" "$root/tools/prepare_data.py" --tokenizer tiny-llama/tokenizer.json --by-line --val-fraction 0.1 \
  --overwrite --out train.bin "$corpus"

step "3. train it: 4 processes used as 2 virtual GPUs of 2 pipeline stages each"
cat >config.json <<'JSON'
{
  "model": { "from_pretrained": "tiny-llama", "seq_len": 64 },
  "data": { "type": "tokens", "path": "train.bin" },
  "eval": { "data": { "type": "tokens", "path": "train_val.bin" }, "every": 10, "steps": 1 },
  "train_batch_size": 16,
  "train_micro_batch_size_per_gpu": 4,
  "steps": 30,
  "steps_per_print": 10,
  "optimizer": { "type": "AdamW", "params": { "lr": 3e-3, "weight_decay": 0.1 } },
  "parallel": { "virtual_gpus": 2, "pipeline": 2 }
}
JSON
cat config.json
"$tandem" train -n 4 config.json --out run --overwrite

step "4. export the last checkpoint as a Hugging Face folder, with the tokenizer beside it"
"$tandem" export run --to exported --format hf --overwrite
cp tiny-llama/tokenizer.json tiny-llama/tokenizer_config.json exported/

step "5. load the export in transformers, measure it and generate"
"$python" "$here/use_export.py" exported tiny-llama train_val.bin 64

printf '\ndone in %d s: %s\n' $((SECONDS - start)) "$work"
