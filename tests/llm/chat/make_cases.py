#!/usr/bin/python3
"""The chat-template fixtures: each template's own Jinja rendering (jinja2, as
Hugging Face's apply_chat_template renders it: bos_token '' since the
tokenizer adds BOS, trim_blocks and lstrip_blocks) of the same
conversations, with and without a system message, for the formats the
model library recognizes. Templates come from llama.cpp's
models/templates (the model repositories' own), the SmolLM2 GGUF, and, for
the formats whose originals are not there, their published texts below.
A conversation the template refuses (raise_exception) is left out.
usage: make_cases.py LLAMA_CPP_DIR GGUF_PACKAGE_DIR SMOLLM2_GGUF > cases.txt"""
import os
import sys

import jinja2

LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
          "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
          "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
ZEPHYR = ("{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + "
          "'<|endoftext|>' + '\n'}}{% elif message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
          "'<|endoftext|>' + '\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n'  + message['content'] + "
          "'<|endoftext|>' + '\n'}}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>' + '\n' }}"
          "{% endif %}{% endfor %}")
MISTRAL_V1 = ("{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
              "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
              "{{- bos_token }}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
              "{%- if loop.first and system_message is defined %}"
              "{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}"
              "{%- else %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- endif %}"
              "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token}}{%- endif %}{%- endfor %}")

CONVERSATIONS = {
    "with-system": [("system", "You are terse."), ("user", "Hi there!"), ("assistant", " Hello. "),
                    ("user", "What is 2+2?\nAnswer with a number.")],
    "no-system": [("user", "Hi there!"), ("assistant", "Hello."), ("user", "  Café, naïve — 東京?  ")],
}


def templates(llama_cpp, gguf_dir, smollm2):
    sys.path.insert(0, gguf_dir)
    from gguf import GGUFReader
    t = os.path.join(llama_cpp, "models", "templates")
    read = lambda name: open(os.path.join(t, name), encoding="utf-8").read()
    smol = GGUFReader(smollm2).fields["tokenizer.chat_template"].contents()
    return [("smollm2", "chatml", smol),
            ("qwen2.5", "chatml", read("Qwen-Qwen2.5-7B-Instruct.jinja")),
            ("qwen3", "chatml", read("Qwen-Qwen3-0.6B.jinja")),
            ("llama3", "llama3", LLAMA3),
            ("llama3.1", "llama3", read("meta-llama-Llama-3.1-8B-Instruct.jinja")),
            ("llama3.2", "llama3", read("meta-llama-Llama-3.2-3B-Instruct.jinja")),
            ("llama3.3", "llama3", read("meta-llama-Llama-3.3-70B-Instruct.jinja")),
            ("gemma2", "gemma", read("google-gemma-2-2b-it.jinja")),
            ("phi3.5", "phi3", read("microsoft-Phi-3.5-mini-instruct.jinja")),
            ("zephyr", "zephyr", ZEPHYR),
            ("mistral-v1", "mistral-v1", MISTRAL_V1),
            ("mistral-nemo", "mistral-v3-tekken", read("mistralai-Mistral-Nemo-Instruct-2407.jinja"))]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    hexed = lambda s: s.encode("utf-8").hex()
    n = 0
    for label, fmt, text in templates(*sys.argv[1:4]):
        tmpl = env.from_string(text)
        for conv_name, conv in CONVERSATIONS.items():
            messages = [{"role": r, "content": c} for r, c in conv]
            try:
                out = tmpl.render(messages=messages, add_generation_prompt=True, bos_token="", eos_token="</s>")
            except jinja2.exceptions.TemplateError:
                continue
            print(f"case {label}/{conv_name} {fmt}")
            print("template", hexed(text))
            print("messages", len(conv))
            for role, content in conv:
                print(role, hexed(content))
            print("expect", hexed(out))
            n += 1
    print(f"{n} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
