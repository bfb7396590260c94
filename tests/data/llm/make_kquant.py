#!/usr/bin/env python3
"""make_kquant.py: derives a K-quant model from SmolLM2 Q4_1 with llama.cpp's own quantizer
(llama_model_quantize, requantising), so the engine is tested on Q4_K/Q6_K weights without
downloading another model. Deterministic for a given llama.cpp version.

Usage: python make_kquant.py IN.gguf OUT.gguf [--fixtures]
  --fixtures  also writes greedy_smollm2_q4km.json beside this script (greedy ids of
              llama.cpp on OUT.gguf, same procedure as make_fixtures.py)
"""
import ctypes
import json
import os
import sys

import llama_cpp
import numpy as np


def quantize(src, dst):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    p.allow_requantize = True
    p.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        raise SystemExit(f"quantize failed: {rc}")


PROMPTS = [
    {"name": "kq_plain_france", "text": "The capital of France is", "special": False, "n": 24},
    {"name": "kq_chat", "special": True, "n": 24,
     "text": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
             "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"},
]


def top_logprobs(logits, k=5):
    """[[id, logprob], ...] of the k most likely tokens: lets the test tell a real
    difference from a near tie that float summation order can flip."""
    l = logits.astype(np.float64)
    lp = l - (np.log(np.exp(l - l.max()).sum()) + l.max())
    return [[int(i), round(float(lp[i]), 5)] for i in np.argsort(-lp)[:k]]


def last_logits(llm):
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()


def fixtures(model, out_path):
    llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_batch=512, n_threads=1, verbose=False, flash_attn=False)
    gold = {"meta": {"llama_cpp_python": llama_cpp.__version__, "model": "SmolLM2-135M-Instruct Q4_1 requantised "
                     "to Q4_K_M by make_kquant.py", "flash_attn": False, "sampling": "argmax of the logits",
                     "command": "build/venv/bin/python tests/data/llm/make_kquant.py \"$(scripts/find_smollm2.sh)\" "
                                "build/smollm2-q4km.gguf --fixtures"},
            "cases": []}
    for p in PROMPTS:
        llm.reset()
        ids = llm.tokenize(p["text"].encode(), add_bos=False, special=p["special"])
        llm.eval(ids)
        out, top = [], []
        for _ in range(p["n"]):
            logits = last_logits(llm)
            t = int(np.argmax(logits))
            out.append(t)
            top.append(top_logprobs(logits))
            if t == llm.token_eos() or t == 2:
                break
            llm.eval([t])
        gold["cases"].append({"name": p["name"], "text": p["text"], "special": p["special"], "prompt_ids": ids,
                              "output_ids": out, "top_logprobs": top})
    with open(out_path, "w") as f:
        json.dump(gold, f, indent=1)


if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    if not os.path.exists(dst):
        quantize(src, dst)
    if "--fixtures" in sys.argv:
        fixtures(dst, os.path.join(os.path.dirname(os.path.abspath(__file__)), "greedy_smollm2_q4km.json"))
