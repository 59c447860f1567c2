#!/usr/bin/env python3
"""Tokenizes text or JSONL documents with a tokenizer.json into a token file Tandem trains on.

The output is llm.c's format: a header of 256 little-endian int32 (magic, version, token count), then the tokens:
uint16 (magic 20240520, version 1) when every id fits, else uint32 (magic 20240801, version 7). Documents are
separated by the tokenizer's end-of-sequence token, which ends every document. Point a config's data at it:
  "data": {"type": "tokens", "path": "train.bin"}

  python3 tools/prepare_data.py --tokenizer DIR/tokenizer.json --out train.bin corpus.txt more.jsonl
  python3 tools/prepare_data.py --tokenizer tokenizer.json --out train.bin --val-fraction 0.01 docs.jsonl

Inputs: a .jsonl file holds one JSON object per line, its document in --field (default "text"); any other file is
one document, or one per line with --by-line. With --val-fraction F every round(1/F)-th document goes to OUT_val.bin
instead (held out, for a config's "eval"). Needs the `tokenizers` package (pip install tokenizers) and numpy.
"""
import argparse
import json
import os
import struct
import sys
import time

HEADER_INTS = 256
FORMATS = {2: (20240520, 1, "<u2"), 4: (20240801, 7, "<u4")}


def find_eos(tokenizer, tokenizer_path, given):
    """The end-of-sequence token: --eos, else tokenizer_config.json's eos_token beside the tokenizer, else a
    token the usual families name so."""
    if given:
        token_id = tokenizer.token_to_id(given)
        if token_id is None:
            sys.exit(f"error: --eos {given!r} is not a token of {tokenizer_path}")
        return given, token_id
    config = os.path.join(os.path.dirname(os.path.abspath(tokenizer_path)), "tokenizer_config.json")
    candidates = []
    if os.path.exists(config):
        with open(config, encoding="utf-8") as f:
            eos = json.load(f).get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if eos:
            candidates.append(eos)
    candidates += ["<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<eos>"]
    for name in candidates:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return name, token_id
    sys.exit(f"error: {tokenizer_path} names no end-of-sequence token this script knows "
             f"(tried {', '.join(candidates)}): give it with --eos TOKEN")


def documents(paths, field, by_line):
    """Yields (path, bytes read so far in that file, document text)."""
    for path in paths:
        jsonl = path.endswith(".jsonl")
        with open(path, encoding="utf-8") as f:
            if not jsonl and not by_line:
                text = f.read()
                yield path, len(text.encode("utf-8")), text
                continue
            done = 0
            for number, line in enumerate(f, 1):
                done += len(line.encode("utf-8"))
                if not line.strip():
                    continue
                if jsonl:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as e:
                        sys.exit(f"error: {path}:{number} is not valid JSON: {e}")
                    if field not in record or not isinstance(record[field], str):
                        sys.exit(f"error: {path}:{number} has no string field {field!r} (set --field)")
                    yield path, done, record[field]
                else:
                    yield path, done, line.rstrip("\n")


class TokenFile:
    """An llm.c token file written as documents come; the header's count is filled in when it is closed."""

    def __init__(self, path, width):
        import numpy as np
        self.np = np
        self.path = path
        self.magic, self.version, self.dtype = FORMATS[width]
        self.tmp = path + ".tmp"
        self.f = open(self.tmp, "wb")
        self.f.write(b"\0" * (4 * HEADER_INTS))
        self.count = 0

    def write(self, ids):
        self.f.write(self.np.asarray(ids, dtype=self.dtype).tobytes())
        self.count += len(ids)

    def close(self):
        header = [0] * HEADER_INTS
        header[0], header[1], header[2] = self.magic, self.version, self.count
        self.f.seek(0)
        self.f.write(struct.pack("<%di" % HEADER_INTS, *header))
        self.f.close()
        os.replace(self.tmp, self.path)  # a file that exists is complete


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", help="text files (one document each, or one per line with --by-line) and "
                   ".jsonl files (one document per line, in --field)")
    p.add_argument("--tokenizer", required=True, help="a tokenizer.json (Hugging Face tokenizers)")
    p.add_argument("--out", required=True, help="the token file to write (llm.c format)")
    p.add_argument("--field", default="text", help="the JSONL field holding each document (default: text)")
    p.add_argument("--by-line", action="store_true", help="every line of a text file is a document")
    p.add_argument("--eos", help="the end-of-sequence token (default: tokenizer_config.json's, or a usual name)")
    p.add_argument("--val-fraction", type=float, default=0.0,
                   help="send this fraction of the documents (every round(1/F)-th) to OUT_val.bin")
    p.add_argument("--overwrite", action="store_true", help="replace --out (and its _val file) when they exist")
    a = p.parse_args()

    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("error: the tokenizers package is missing: pip install tokenizers")
    for path in a.inputs:
        if not os.path.isfile(path):
            sys.exit(f"error: input {path!r} is not a file")
    if not 0.0 <= a.val_fraction < 1.0:
        sys.exit(f"error: --val-fraction {a.val_fraction} must be in [0, 1)")
    stem, ext = os.path.splitext(a.out)
    val_path = stem + "_val" + (ext or ".bin")
    for path in [a.out] + ([val_path] if a.val_fraction > 0 else []):
        if os.path.exists(path) and not a.overwrite:
            sys.exit(f"error: {path} exists: choose another --out, or pass --overwrite to replace it")

    tokenizer = Tokenizer.from_file(a.tokenizer)
    eos_name, eos_id = find_eos(tokenizer, a.tokenizer, a.eos)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    width = 2 if vocab <= 1 << 16 else 4
    every = round(1 / a.val_fraction) if a.val_fraction > 0 else 0
    train = TokenFile(a.out, width)
    val = TokenFile(val_path, width) if every else None

    total = sum(os.path.getsize(path) for path in a.inputs)
    before = 0  # bytes of the inputs already finished
    start = last = time.time()
    docs = 0
    current = None
    for path, done, text in documents(a.inputs, a.field, a.by_line):
        if path != current:
            if current is not None:
                before += os.path.getsize(current)
            current = path
        ids = tokenizer.encode(text, add_special_tokens=False).ids + [eos_id]
        (val if every and docs % every == every - 1 else train).write(ids)
        docs += 1
        now = time.time()
        if now - last >= 0.5 or before + done >= total:
            last = now
            read = before + done
            rate = read / max(now - start, 1e-9) / 1e6
            print(f"\r{read / 1e6:.1f} of {total / 1e6:.1f} MB ({100 * read / max(total, 1):.0f}%), {docs:,} documents, "
                  f"{train.count + (val.count if val else 0):,} tokens, {rate:.1f} MB/s", end="", file=sys.stderr)
    print(file=sys.stderr)
    train.close()
    if val:
        val.close()
    kind = "uint16" if width == 2 else "uint32"
    print(f"wrote {train.count:,} {kind} tokens of {docs - (docs // every if every else 0):,} documents to {a.out}"
          + (f" and {val.count:,} tokens of {docs // every:,} documents to {val_path}" if val else "")
          + f" (vocab {vocab:,}, documents end with {eos_name!r} = {eos_id}); "
          f"train with \"model\": {{\"vocab_size\": {vocab}}} or more")


if __name__ == "__main__":
    main()
