"""Writes configs/data/chat-sample.jsonl, the small chat file configs/chat-lora.yaml fine-tunes on:
conversations asking to say a line of tinyshakespeare's last tenth (which llama-shakespeare.yaml's
base never trained on) back as it is or in capitals, a skill learnable from a few hundred rows,
as {"messages": [...]} rows and some prompt/completion rows. Deterministic; run from the
repository root:
  python3 scripts/dev/make_chat_sample.py ../shared/data/tinyshakespeare.txt configs/data/chat-sample.jsonl
"""
import json
import sys


def main():
    src, dst = sys.argv[1:3]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    lines = [l for l in text[int(len(text) * 0.9):].split("\n") if len(l.strip()) > 20][:400]
    with open(dst, "w", encoding="utf-8") as out:
        for i, line in enumerate(lines):
            shout = i % 2 == 1
            ask = ("Shout it: " if shout else "Say it back: ") + line
            answer = line.upper() if shout else line
            if i % 5 == 0:
                row = {"prompt": ask, "completion": answer}
            else:
                row = {"messages": [
                    {"role": "system", "content": "You repeat lines from the plays."},
                    {"role": "user", "content": ask},
                    {"role": "assistant", "content": answer},
                ]}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
