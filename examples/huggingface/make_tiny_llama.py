"""Makes a tiny Llama folder as a Hugging Face hub download looks: config.json, model.safetensors, tokenizer.json and
tokenizer_config.json.

Usage: make_tiny_llama.py CORPUS OUT_DIR

A byte-level BPE tokenizer of 512 ids with "</s>" as its end-of-sequence token is trained on CORPUS, and a randomly
initialized LlamaForCausalLM (hidden 64, 2 layers, 4 heads, 2 key-value heads, tied embeddings) is saved beside it.
"""

import json
import os
import sys

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 512


def make_tokenizer(corpus, out_dir):
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().splitlines()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"]))
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>"}, f, indent=2)
    return tok


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    corpus, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    transformers.utils.logging.disable_progress_bar()
    tok = make_tokenizer(corpus, out_dir)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128, tie_word_embeddings=True,
                                      bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"saved a LlamaForCausalLM of {params:,} parameters and a tokenizer of {tok.get_vocab_size()} ids "
          f"to {out_dir}")


if __name__ == "__main__":
    main()
