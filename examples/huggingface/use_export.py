"""Loads a model Tandem exported with --format hf in transformers, measures it and generates from it.

Usage: use_export.py EXPORTED_DIR START_DIR VAL_TOKENS SEQ_LEN

EXPORTED_DIR must load with no missing or unexpected keys; its mean loss over the SEQ_LEN windows of VAL_TOKENS (an
llm.c token file) must be finite and below that of START_DIR, the model training started from. Then it continues a
prompt greedily and prints the text. Exits 1 when a check fails.
"""

import math
import sys

import numpy as np
import torch
import transformers

HEADER_BYTES = 256 * 4


def read_tokens(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    dtype = "<u2" if header[0] == 20240520 else "<u4"
    return np.fromfile(path, dtype=dtype, count=int(header[2]), offset=HEADER_BYTES).astype(np.int64)


def mean_loss(model, tokens, seq_len):
    windows = len(tokens) // (seq_len + 1)
    x = torch.from_numpy(tokens[:windows * (seq_len + 1)]).view(windows, seq_len + 1)
    with torch.no_grad():
        logits = model(input_ids=x[:, :-1]).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    return loss.item(), windows


def load(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, dtype=torch.float32)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    exported_dir, start_dir, val_path, seq_len = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    transformers.utils.logging.disable_progress_bar()
    failed = False

    trained, info = load(exported_dir)
    problems = {k: v for k, v in info.items() if v}
    print(f"loaded {type(trained).__name__} from {exported_dir}: "
          + ("no missing or unexpected keys" if not problems else f"FAIL {problems}"))
    failed |= bool(problems)

    tokens = read_tokens(val_path)
    start, _ = load(start_dir)
    before, windows = mean_loss(start.eval(), tokens, seq_len)
    after, _ = mean_loss(trained.eval(), tokens, seq_len)
    ok = math.isfinite(after) and after < before
    print(f"val loss on {windows} windows of {seq_len}: {before:.4f} before training, {after:.4f} after"
          + ("" if ok else "  FAIL: not finite and lower"))
    failed |= not ok

    tokenizer = transformers.AutoTokenizer.from_pretrained(exported_dir)
    prompt = "This License"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    out = trained.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                           pad_token_id=tokenizer.eos_token_id)
    new = out[0, ids.shape[1]:]
    print(f"generated {len(new)} tokens: {prompt!r} -> {tokenizer.decode(new, skip_special_tokens=True)!r}")
    failed |= len(new) == 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
