"""Reference ids for chat rows: transformers' apply_chat_template with the chatml or llama3 template
written in Jinja (as models ship them, without the BOS, which gputrain's framing adds), tokenized
by HF tokenizers from the same tokenizer.json.

usage: chat_reference.py TOKENIZER_JSON TEMPLATE INPUT_JSONL OUTPUT
  OUTPUT a JSON list with the ids of each row, and the ids of each row's assistant contents + end tokens
"""
import json
import sys

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

TEMPLATES = {
    "chatml": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
    "llama3": "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}"
              "<|eot_id|>{% endfor %}",
}
END = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>"}


def ids_of(result):
    return list(result["input_ids"] if hasattr(result, "keys") else result)


def main():
    path, template, src, dst = sys.argv[1:5]
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(path))
    out = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            messages = row.get("messages") or [{"role": "user", "content": row["prompt"]},
                                               {"role": "assistant", "content": row["completion"]}]
            ids = ids_of(tok.apply_chat_template(messages, chat_template=TEMPLATES[template], tokenize=True))
            trained = []
            for m in messages:
                if m["role"] == "assistant":
                    trained += tok.encode(m["content"], add_special_tokens=False) + [tok.convert_tokens_to_ids(END[template])]
            out.append({"ids": ids, "trained": trained})
    with open(dst, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
