#!/usr/bin/env python3
"""compare_logprobs.py: cinfer's per-token logprobs and perplexity against llama.cpp's on the
same GGUF file and the same text (issue 17).

Both score the text the way llama.cpp's llama-perplexity does: the tokens (cinfer's
tokenizer; llama.cpp's gives the same ids, checked) are cut into chunks of --ctx, each
chunk's first token becomes BOS when the model adds one, and the second half of every chunk
is scored. cinfer runs `cinfer generate --perplexity --logprobs-out` (prompt logprobs from
the engine's prefill); llama.cpp runs through llama-cpp-python with logits for every
position (logits_all), one chunk at a time, and its log-softmax is taken here in float64.

Prints, per model: tokens, both perplexities and their ratio, the max and mean absolute
logprob difference over every position, the share of positions whose argmax differs, and
the worst positions (with both logprobs) for a closer look.

Usage: bench/llm/compare_logprobs.py [--text FILE] [--ctx 512] [--models A.gguf,B.gguf]
  default text: Debian's licence texts (GPL-3, GPL-2, LGPL-2.1, Apache-2.0: ~21k tokens);
  default models: SmolLM2 Q4_1 (examples/model_repository/smollm2/1/model.gguf) and, when
  the test suite has made it, build/smollm2-q4km.gguf (Q4_K_M).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LICENSES = ["GPL-3", "GPL-2", "LGPL-2.1", "Apache-2.0"]


def cinfer_scores(binary, model, text_path, ctx):
    with tempfile.NamedTemporaryFile(suffix=".tsv") as out:
        r = subprocess.run([binary, "generate", "-m", model, "--perplexity", text_path, "--ctx", str(ctx),
                            "--logprobs-out", out.name], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"cinfer failed: {r.stderr}")
        rows = np.loadtxt(out.name, delimiter="\t", skiprows=1)
        final = [l for l in r.stdout.splitlines() if l.startswith("Final estimate")]
    return rows, final[0] if final else "?"


def llama_model(model, ctx):
    import llama_cpp
    import llama_cpp.llama
    # llama.cpp's AMX weight repacking (an "extra buffer type", chosen on CPUs with AMX such
    # as Sapphire Rapids) crashes in ggml_backend_amx_mul_mat on this model in 0.3.36; plain
    # CPU buffers are what llama-perplexity --no-repack uses and what other CPUs run anyway.
    default = llama_cpp.llama_model_default_params

    def no_repack():
        p = default()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama.llama_cpp.llama_model_default_params = no_repack
    return llama_cpp.Llama(model_path=model, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx, logits_all=True,
                           n_threads=os.cpu_count(), verbose=False, flash_attn=False)


def llama_scores(llm, tokens_by_chunk):
    ctx = len(tokens_by_chunk[0])
    lps, best = [], []
    for toks in tokens_by_chunk:
        llm.reset()
        llm.eval(list(map(int, toks)))
        logits = np.array(llm.scores[:ctx], dtype=np.float64)  # row p predicts token p + 1
        mx = logits.max(axis=1, keepdims=True)
        lsm = logits - (np.log(np.exp(logits - mx).sum(axis=1, keepdims=True)) + mx)
        nxt = np.asarray(toks[1:], dtype=np.int64)
        lps.append(lsm[np.arange(ctx - 1), nxt])
        best.append(lsm[:ctx - 1].argmax(axis=1))
    return np.array(lps), np.array(best)


def ppl(lp, ctx):
    first = ctx // 2  # positions first+1 .. ctx-1 are scored (as llama-perplexity)
    scored = lp[:, first:]  # lp[:, j] is position j + 1
    return float(np.exp(-scored.mean())), scored.size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--models")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/src/cli/cinfer"))
    a = ap.parse_args()
    tmp = None
    if not a.text:
        tmp = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        for name in LICENSES:
            tmp.write(open(f"/usr/share/common-licenses/{name}", encoding="utf-8").read())
        tmp.close()
        a.text = tmp.name
    models = a.models.split(",") if a.models else [
        m for m in (os.path.join(ROOT, "examples/model_repository/smollm2/1/model.gguf"),
                    os.path.join(ROOT, "build/smollm2-q4km.gguf")) if os.path.exists(m)]
    print(f"text: {a.text if not tmp else '+'.join(LICENSES)}; chunks of {a.ctx}")
    for model in models:
        rows, final = cinfer_scores(a.bin, model, a.text, a.ctx)
        chunk, pos, tok = rows[:, 0].astype(int), rows[:, 1].astype(int), rows[:, 2].astype(np.int64)
        n_chunks = chunk.max() + 1
        c_lp = rows[:, 3].reshape(n_chunks, a.ctx - 1)
        c_best = rows[:, 4].astype(np.int64).reshape(n_chunks, a.ctx - 1)
        toks = np.zeros((n_chunks, a.ctx), dtype=np.int64)
        toks[chunk, pos] = tok
        probe = llama_model(model, a.ctx)
        bos = probe.tokenize(b"", add_bos=True, special=False)
        text = open(a.text, "rb").read()
        ref_ids = probe.tokenize(text, add_bos=True, special=False)
        ours = [t for c in range(n_chunks) for t in toks[c, 1:]]
        theirs = [t for c in range(n_chunks) for t in ref_ids[c * a.ctx + 1:(c + 1) * a.ctx]]
        same_tokens = ours == theirs
        toks[:, 0] = bos[0] if bos else np.asarray(ref_ids[0::a.ctx][:n_chunks])
        l_lp, l_best = llama_scores(probe, toks)
        del probe
        d = np.abs(c_lp - l_lp)
        p_c, n_scored = ppl(c_lp, a.ctx)
        p_l, _ = ppl(l_lp, a.ctx)
        print(f"\n{os.path.basename(os.path.realpath(model))}: {n_chunks} chunks, {n_scored} scored tokens, "
              f"tokenization identical to llama.cpp: {same_tokens}")
        print(f"  perplexity cinfer {p_c:.4f}  llama.cpp {p_l:.4f}  ratio {p_c / p_l:.5f}   ({final})")
        print(f"  |logprob difference| over {d.size} positions: max {d.max():.4f}, mean {d.mean():.5f}, "
              f"p99 {np.quantile(d, 0.99):.4f}")
        print(f"  argmax differs at {100.0 * (c_best != l_best).mean():.2f}% of positions")
        worst = np.argsort(-d, axis=None)[:5]
        for w in worst:
            c, j = divmod(int(w), a.ctx - 1)
            print(f"    chunk {c} pos {j + 1} token {toks[c, j + 1]}: cinfer {c_lp[c, j]:.4f} llama.cpp {l_lp[c, j]:.4f}")
    if tmp:
        os.unlink(tmp.name)


if __name__ == "__main__":
    main()
