"""Makes a small instruction data set of prompt/completion pairs from a text, one JSON object a line.

Usage: make_instructions.py CORPUS OUT.jsonl

Every paragraph (lines between blank lines) of two lines or more gives one pair: the prompt asks to continue the
paragraph's first line, the completion is the rest of the paragraph. Only the completions count in the loss once
tools/prepare_data.py has made the token files and their loss mask.
"""

import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        paragraphs = [p.strip().splitlines() for p in f.read().split("\n\n")]
    pairs = 0
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        for lines in paragraphs:
            lines = [l.strip() for l in lines if l.strip()]
            if len(lines) < 2:
                continue
            prompt = "Continue the paragraph: " + lines[0] + "\n"
            out.write(json.dumps({"prompt": prompt, "completion": " ".join(lines[1:])}) + "\n")
            pairs += 1
    print(f"wrote {pairs} prompt/completion pairs to {sys.argv[2]}")


if __name__ == "__main__":
    main()
