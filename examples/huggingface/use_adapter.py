"""Loads a LoRA adapter Tandem exported with --format peft in PEFT, and the merged model it exported with
--format hf --merge in transformers, measures them and generates from them.

Usage: use_adapter.py ADAPTER_DIR BASE_DIR MERGED_DIR VAL_TOKENS SEQ_LEN

ADAPTER_DIR must load onto BASE_DIR with PeftModel.from_pretrained without a missing-key warning; its loss on the
SEQ_LEN windows of VAL_TOKENS (an llm.c token file), over the targets its loss mask (VAL_TOKENS minus .bin plus
.mask.bin) counts, must be below the base model's; MERGED_DIR must load with no missing or unexpected keys and give
the adapter's logits. Then the adapter continues a prompt greedily. Exits 1 when a check fails.
"""

import math
import sys
import warnings

import numpy as np
import peft
import torch
import transformers

HEADER_BYTES = 256 * 4


def read(path, dtype=None):
    header = np.fromfile(path, dtype="<i4", count=256)
    dtype = dtype or ("<u2" if header[0] == 20240520 else "<u4")
    return np.fromfile(path, dtype=dtype, count=int(header[2]), offset=HEADER_BYTES).astype(np.int64)


def masked_loss(model, tokens, mask, seq_len):
    windows = len(tokens) // (seq_len + 1)
    x = torch.from_numpy(tokens[:windows * (seq_len + 1)]).view(windows, seq_len + 1)
    m = torch.from_numpy(mask[:windows * (seq_len + 1)]).view(windows, seq_len + 1)
    labels = torch.where(m[:, 1:] > 0, x[:, 1:], torch.full_like(x[:, 1:], -100))
    with torch.no_grad():
        logits = model(input_ids=x[:, :-1]).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    return loss.item(), windows, logits


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    adapter_dir, base_dir, merged_dir, val_path, seq_len = sys.argv[1:5] + [int(sys.argv[5])]
    transformers.utils.logging.disable_progress_bar()
    failed = False
    base = lambda: transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned = peft.PeftModel.from_pretrained(base(), adapter_dir).eval()
    missing = [str(w.message) for w in caught if "missing" in str(w.message).lower()]
    print(f"loaded the adapter {adapter_dir} onto {base_dir} with PeftModel.from_pretrained: "
          + ("no missing keys" if not missing else "FAIL " + "; ".join(missing)))
    failed |= bool(missing)

    tokens, mask = read(val_path), read(val_path[:-4] + ".mask.bin", np.uint8)
    before, windows, _ = masked_loss(base().eval(), tokens, mask, seq_len)
    after, _, logits = masked_loss(tuned, tokens, mask, seq_len)
    ok = math.isfinite(after) and after < before
    print(f"val loss over the completions of {windows} windows of {seq_len}: {before:.4f} for the base, "
          f"{after:.4f} with the adapter" + ("" if ok else "  FAIL: not finite and lower"))
    failed |= not ok

    merged, info = transformers.AutoModelForCausalLM.from_pretrained(merged_dir, output_loading_info=True,
                                                                     dtype=torch.float32)
    problems = {k: v for k, v in info.items() if v}
    _, _, merged_logits = masked_loss(merged.eval(), tokens, mask, seq_len)
    diff = float((merged_logits - logits).abs().max())
    ok = not problems and diff <= 1e-4
    keys = f"{problems} " if problems else "no missing or unexpected keys, "
    print(f"loaded the merged model {merged_dir}: {keys}logits within {diff:.1e} of the adapter's"
          + ("" if ok else "  FAIL"))
    failed |= not ok

    tokenizer = transformers.AutoTokenizer.from_pretrained(merged_dir)
    prompt = "Continue the paragraph: This License"
    ids = tokenizer(prompt + "\n", return_tensors="pt").input_ids
    out = tuned.generate(input_ids=ids, max_new_tokens=12, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.eos_token_id)
    new = out[0, ids.shape[1]:]
    print(f"generated {len(new)} tokens: {prompt!r} -> {tokenizer.decode(new, skip_special_tokens=True)!r}")
    failed |= len(new) == 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
