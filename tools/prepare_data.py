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

Instruction data: a JSONL line with "prompt" and "completion" strings is the prompt's tokens then the completion's
(each tokenized on its own); one with "messages" (a list of {"role", "content"}) is the conversation rendered by the
chat template of the tokenizer's folder (tokenizer_config.json's "chat_template", or chat_template.jinja;
--chat-template FILE overrides; rendering needs jinja2) and tokenized whole. When the inputs hold such lines,
OUT.mask.bin is written beside OUT.bin (and OUT_val.mask.bin beside OUT_val.bin): the same header with magic
20240522, version 1 and the token count, then one byte per token, 1 where that token counts as a target (its
prediction is in the loss): the completion's tokens, the assistant messages' tokens (what the template renders for
them, their end-of-turn markup included), and the end-of-sequence token after a document whose last token counts; 0
for the prompt and the other messages. Documents of other lines count whole. The `tokens` dataset reads OUT.mask.bin
when it lies beside OUT.bin.
"""
import argparse
import json
import os
import struct
import sys
import time

HEADER_INTS = 256
FORMATS = {2: (20240520, 1, "<u2"), 4: (20240801, 7, "<u4")}
MASK_MAGIC, MASK_VERSION = 20240522, 1


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
    """Yields (path, bytes read so far in that file, document): a text, or a JSONL line's record holding "messages" or
    "prompt" and "completion"."""
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
                    if not isinstance(record, dict):
                        sys.exit(f"error: {path}:{number} is not a JSON object")
                    if "messages" in record or "prompt" in record or "completion" in record:
                        yield path, done, dict(record, _where=f"{path}:{number}")
                        continue
                    if field not in record or not isinstance(record[field], str):
                        sys.exit(f"error: {path}:{number} has no string field {field!r} (set --field), nor "
                                 f"\"prompt\" and \"completion\", nor \"messages\"")
                    yield path, done, record[field]
                else:
                    yield path, done, line.rstrip("\n")


def special_token(config, name):
    """A special token of tokenizer_config.json as text (it may be an AddedToken object)."""
    value = config.get(name)
    return value.get("content") if isinstance(value, dict) else value


class ChatTemplate:
    """The tokenizer folder's chat template, rendered as transformers' apply_chat_template renders it."""

    def __init__(self, tokenizer_path, override):
        folder = os.path.dirname(os.path.abspath(tokenizer_path))
        config_path = os.path.join(folder, "tokenizer_config.json")
        config = {}
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        source, text = override, None
        if override:
            with open(override, encoding="utf-8") as f:
                text = f.read()
        elif isinstance(config.get("chat_template"), str):
            source, text = config_path, config["chat_template"]
        elif isinstance(config.get("chat_template"), list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in config["chat_template"]}
            source, text = config_path, named.get("default")
        elif os.path.exists(os.path.join(folder, "chat_template.jinja")):
            source = os.path.join(folder, "chat_template.jinja")
            with open(source, encoding="utf-8") as f:
                text = f.read()
        if not text:
            sys.exit(f"error: messages need a chat template, and {config_path} has no \"chat_template\" (nor is "
                     f"there a chat_template.jinja beside it): give one with --chat-template FILE")
        try:
            import jinja2
            import jinja2.sandbox
        except ImportError:
            sys.exit("error: rendering a chat template needs the jinja2 package: pip install jinja2")

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                           extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
        self.source = source
        self.template = env.from_string(text)
        self.tokens = {k: special_token(config, k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}

    def render(self, messages, add_generation_prompt):
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.tokens)


class Encoder:
    """A document's token ids and, for instruction data, which of them count as targets."""

    def __init__(self, tokenizer, tokenizer_path, chat_template):
        self.tokenizer, self.tokenizer_path, self.chat_template_path = tokenizer, tokenizer_path, chat_template
        self.chat = None

    def ids(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode(self, doc):
        """(ids, mask): mask None for a plain text, else one 0/1 per id."""
        if isinstance(doc, str):
            return self.ids(doc), None
        where = doc["_where"]
        if "messages" in doc:
            return self.conversation(doc["messages"], where)
        prompt, completion = doc.get("prompt"), doc.get("completion")
        if not isinstance(prompt, str) or not isinstance(completion, str):
            sys.exit(f"error: {where} needs \"prompt\" and \"completion\" strings (or \"messages\")")
        p, c = self.ids(prompt), self.ids(completion)
        return p + c, [0] * len(p) + [1] * len(c)

    def conversation(self, messages, where):
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            sys.exit(f"error: {where}: \"messages\" must be a non-empty list of {{\"role\", \"content\"}} strings")
        if self.chat is None:
            self.chat = ChatTemplate(self.tokenizer_path, self.chat_template_path)
        text = self.chat.render(messages, False)
        # Each assistant message's span: what the template adds for it, between the conversation up to it with the
        # generation prompt and the conversation through it.
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = self.chat.render(messages[:i], True)
            through = self.chat.render(messages[:i + 1], False)
            if not through.startswith(before) or not text.startswith(through):
                sys.exit(f"error: {where}: the chat template {self.chat.source} does not render the conversation up "
                         f"to message {i} as the start of the whole, so its assistant tokens cannot be told apart")
            spans.append((len(before), len(through)))
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        mask = [int(any(a <= start < b for a, b in spans)) for start, _ in enc.offsets]
        return enc.ids, mask


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
        # The loss mask beside it: written as the tokens come, kept only when some document has one.
        stem, _ = os.path.splitext(path)
        self.mask_path = stem + ".mask.bin"
        self.mask_tmp = self.mask_path + ".tmp"
        self.mask = open(self.mask_tmp, "wb")
        self.mask.write(b"\0" * (4 * HEADER_INTS))
        self.masked = False
        self.counted = 0

    def write(self, ids, mask):
        self.f.write(self.np.asarray(ids, dtype=self.dtype).tobytes())
        self.count += len(ids)
        self.masked = self.masked or mask is not None
        counts = self.np.asarray(mask if mask is not None else [1] * len(ids), dtype=self.np.uint8)
        self.mask.write(counts.tobytes())
        self.counted += int(counts.sum())

    def discard(self):
        for f, tmp in ((self.f, self.tmp), (self.mask, self.mask_tmp)):
            f.close()
            if os.path.exists(tmp):
                os.remove(tmp)

    def close(self):
        for f, magic, version, tmp, path in ((self.f, self.magic, self.version, self.tmp, self.path),
                                             (self.mask, MASK_MAGIC, MASK_VERSION, self.mask_tmp, self.mask_path)):
            header = [0] * HEADER_INTS
            header[0], header[1], header[2] = magic, version, self.count
            f.seek(0)
            f.write(struct.pack("<%di" % HEADER_INTS, *header))
            f.close()
            if path == self.mask_path and not self.masked:
                os.remove(tmp)
                if os.path.exists(path):
                    os.remove(path)  # an older mask of the file being replaced no longer fits it
                continue
            os.replace(tmp, path)  # a file that exists is complete


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
    p.add_argument("--chat-template", help="a Jinja chat template file for \"messages\" lines (default: the "
                   "tokenizer folder's)")
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
    if not a.out.endswith(".bin"):
        sys.exit(f"error: --out {a.out!r} must end with .bin (its loss mask, when there is one, is OUT minus .bin plus "
                 f".mask.bin)")
    for path in [a.out] + ([val_path] if a.val_fraction > 0 else []):
        for existing in (path, os.path.splitext(path)[0] + ".mask.bin"):
            if os.path.exists(existing) and not a.overwrite:
                sys.exit(f"error: {existing} exists: choose another --out, or pass --overwrite to replace it")

    tokenizer = Tokenizer.from_file(a.tokenizer)
    eos_name, eos_id = find_eos(tokenizer, a.tokenizer, a.eos)
    encoder = Encoder(tokenizer, a.tokenizer, a.chat_template)
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
    try:
        for path, done, text in documents(a.inputs, a.field, a.by_line):
            if path != current:
                if current is not None:
                    before += os.path.getsize(current)
                current = path
            ids, mask = encoder.encode(text)
            if mask is not None:  # the end of sequence counts when the document's last token does
                mask = mask + [mask[-1] if mask else 0]
            (val if every and docs % every == every - 1 else train).write(ids + [eos_id], mask)
            docs += 1
            now = time.time()
            if now - last >= 0.5 or before + done >= total:
                last = now
                read = before + done
                rate = read / max(now - start, 1e-9) / 1e6
                print(f"\r{read / 1e6:.1f} of {total / 1e6:.1f} MB ({100 * read / max(total, 1):.0f}%), "
                      f"{docs:,} documents, {train.count + (val.count if val else 0):,} tokens, {rate:.1f} MB/s",
                      end="", file=sys.stderr)
    except BaseException:
        for f in (train, val):  # a failed run leaves no partial files
            if f:
                f.discard()
        raise
    print(file=sys.stderr)
    train.close()
    if val:
        val.close()
    kind = "uint16" if width == 2 else "uint32"
    print(f"wrote {train.count:,} {kind} tokens of {docs - (docs // every if every else 0):,} documents to {a.out}"
          + (f" and {val.count:,} tokens of {docs // every:,} documents to {val_path}" if val else "")
          + f" (vocab {vocab:,}, documents end with {eos_name!r} = {eos_id}); "
          f"train with \"model\": {{\"vocab_size\": {vocab}}} or more")
    for f in (train, val):
        if f and f.masked:
            print(f"wrote the loss mask {f.mask_path}: {f.counted:,} of {f.count:,} tokens count as targets")


if __name__ == "__main__":
    main()
