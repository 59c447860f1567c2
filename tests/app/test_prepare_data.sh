#!/usr/bin/env bash
# tools/prepare_data.py end to end: a tokenizer made here (tokenizers' BPE trainer), text and JSONL documents
# tokenized into llm.c's format (header, count, documents ending with the EOS token, a held-out split), read back
# with numpy against the tokenizer's own encoding, trained on by tandem; a vocabulary past 65,536 ids gets uint32.
# Usage: test_prepare_data.sh TANDEM_BINARY PYTHON SOURCE_DIR. Prints one line per check and "N passed, M failed".
set -u
tandem=$(realpath "$1")
python=$(realpath -s "$2")
prepare="$3/tools/prepare_data.py"
source "$(dirname "$0")/check_lib.sh"
cd "$work" || exit 1

"$python" - <<'PY'
import json
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders
text = open("/usr/share/common-licenses/GPL-3").read()
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator([text[i:i + 2000] for i in range(0, len(text), 2000)],
                        trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|endoftext|>"]))
tok.save("tokenizer.json")
with open("docs.jsonl", "w") as f:
    for i in range(0, 20000, 1000):
        f.write(json.dumps({"text": text[i:i + 1000]}) + "\n")
open("one.txt", "w").write(text[:5000])
# A word-level vocabulary of 70,000 ids: past what uint16 holds.
words = {f"w{i}": i for i in range(70000)}
words["<unk>"] = 70000
big = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
big.pre_tokenizer = pre_tokenizers.Whitespace()
big.add_special_tokens(["</s>"])
big.save("big.json")
open("big.txt", "w").write(" ".join(f"w{(i * 7919) % 70000}" for i in range(3000)))
PY

run 120 "$python" "$prepare" --tokenizer tokenizer.json --out train.bin --val-fraction 0.25 docs.jsonl one.txt
[ $rc -eq 0 ] && grep -q "wrote .* uint16 tokens of 16 documents to train.bin and .* of 5 documents to train_val.bin" out
check "text and JSONL documents tokenized, one in four held out" $? "$(tail -2 out)"
"$python" - <<'PY'
import json, sys
import numpy as np
from tokenizers import Tokenizer
tok = Tokenizer.from_file("tokenizer.json")
eos = tok.token_to_id("<|endoftext|>")
docs = [json.loads(l)["text"] for l in open("docs.jsonl")] + [open("one.txt").read()]
want_train, want_val = [], []
for i, d in enumerate(docs):
    (want_val if i % 4 == 3 else want_train).extend(tok.encode(d, add_special_tokens=False).ids + [eos])
for path, want in (("train.bin", want_train), ("train_val.bin", want_val)):
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    ids = np.frombuffer(raw[1024:], dtype="<u2")
    assert list(header[:3]) == [20240520, 1, len(want)], (path, header[:3], len(want))
    assert ids.tolist() == want, path
    assert tok.decode(ids[: ids.tolist().index(eos)].tolist()) == docs[0] or path != "train.bin"
PY
check "the files hold llm.c's header and exactly the tokenizer's ids, each document ending with EOS" $?

cat >gpt.json <<'JSON'
{ "model": { "type": "gpt", "vocab_size": 300, "seq_len": 32, "dim": 32, "layers": 2, "heads": 4 },
  "data": { "type": "tokens", "path": "train.bin" },
  "train_batch_size": 4, "steps": 3, "optimizer": { "type": "AdamW", "params": { "lr": 1e-3 } } }
JSON
run 120 "$tandem" train gpt.json --out run
[ $rc -eq 0 ] && grep -q "(llm.c format), vocab 300" out && grep -q "done: 3 steps" out
check "tandem trains on the prepared file" $? "$(grep -E 'data:|error|done' out)"

run 60 "$python" "$prepare" --tokenizer tokenizer.json --out train.bin docs.jsonl
[ $rc -ne 0 ] && grep -q "train.bin exists: choose another --out, or pass --overwrite" out
check "an existing output is not overwritten" $? "$(tail -1 out)"

run 120 "$python" "$prepare" --tokenizer big.json --out big.bin big.txt
"$python" - <<'PY'
import numpy as np
raw = open("big.bin", "rb").read()
header = np.frombuffer(raw[:1024], dtype="<i4")
ids = np.frombuffer(raw[1024:], dtype="<u4")
assert list(header[:3]) == [20240801, 7, 3001], header[:3]
assert ids[0] == 0 and ids[1] == 7919 and ids[-1] == 70001, (ids[:2], ids[-1])  # "</s>" is id 70,001
PY
check "a vocabulary past 65,536 ids is written as uint32 (llm.c's Llama 3 format)" $? "$(tail -1 out)"

# Instruction data needs its chat template: this tokenizer's folder has none.
echo '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}' >chat.jsonl
run 60 "$python" "$prepare" --tokenizer tokenizer.json --out chat.bin chat.jsonl
[ $rc -ne 0 ] && grep -q 'messages need a chat template.*--chat-template FILE' out && [ ! -e chat.bin ]
check "messages without a chat template are refused, saying how to give one" $? "$(tail -1 out)"
echo '{"prompt": "Q: ", "completion": "A."}' >pc.jsonl
run 60 "$python" "$prepare" --tokenizer tokenizer.json --out pc.bin pc.jsonl docs.jsonl
[ $rc -eq 0 ] && grep -q "wrote the loss mask pc.mask.bin" out && [ -e pc.mask.bin ] && [ ! -e train.mask.bin ]
check "prompt/completion lines write a loss mask beside the tokens; plain documents alone write none" $? "$(tail -2 out)"

report
