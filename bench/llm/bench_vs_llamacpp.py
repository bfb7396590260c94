#!/usr/bin/env python3
"""bench_vs_llamacpp.py: single-stream prefill and decode tokens/s of cinfer's LLM engine
vs llama.cpp (llama-cpp-python, flash attention off, its defaults otherwise) on the same
GGUF, same thread count, in one run. Greedy decoding for both; the run also reports whether
the generated ids are identical.

Usage: build/venv/bin/python bench/llm/bench_vs_llamacpp.py [--threads N] [--prompt-tokens N]
                                                             [--gen N] [--reps N] [MODEL.gguf]
cinfer is timed through `cinfer generate --ids` (TTFT -> prefill tok/s; the rest -> decode).
Also reports tokens per CPU-second (process CPU time, all threads; for cinfer by difference
of runs so model loading is excluded), which a shared, loaded machine distorts far less than
wall time. Prints a markdown table; docs/benchmarks-llm.md records results with this command.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def llamacpp_run(llm, prompt_ids, n_gen):
    """wall tok/s (prefill, decode), CPU tok/s (tokens per CPU-second of the process, all
    threads), generated ids"""
    llm.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    llm.eval(prompt_ids)
    t1, c1 = time.perf_counter(), time.process_time()
    out = []
    for _ in range(n_gen):
        t = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))
        out.append(t)
        if len(out) == n_gen:
            break
        llm.eval([t])
    t2, c2 = time.perf_counter(), time.process_time()
    n = len(prompt_ids)
    return (n / (t1 - t0), (n_gen - 1) / (t2 - t1)), (n / (c1 - c0), (n_gen - 1) / (c2 - c1)), out


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cinfer_once(binary, model, prompt, n_gen, threads):
    c0 = child_cpu()
    r = subprocess.run([binary, "generate", "-m", model, "-p", prompt, "-n", str(n_gen), "-t", str(threads),
                        "--ids"], capture_output=True, text=True, check=True)
    cpu = child_cpu() - c0
    m = re.search(r"prompt (\d+) tokens, generated (\d+); TTFT ([0-9.]+) s; decode ([0-9.]+) tok/s", r.stderr)
    n_prompt, _, ttft, dec = int(m.group(1)), int(m.group(2)), float(m.group(3)), float(m.group(4))
    return n_prompt, ttft, dec, cpu, [int(x) for x in r.stdout.split()]


def cinfer_run(binary, model, prompt, n_gen, threads):
    """as llamacpp_run. CPU time of the child process by difference, so model loading is
    excluded: prefill = (prompt, 1 token) - (one-word prompt, 1 token); decode = (prompt,
    n_gen tokens) - (prompt, 1 token)."""
    n_prompt, ttft, dec, cpu_full, ids = cinfer_once(binary, model, prompt, n_gen, threads)
    _, _, _, cpu_one, _ = cinfer_once(binary, model, prompt, 1, threads)
    n_tiny, _, _, cpu_tiny, _ = cinfer_once(binary, model, prompt.split()[0], 1, threads)
    cpu_prefill = max(cpu_one - cpu_tiny, 1e-6)
    cpu_decode = max(cpu_full - cpu_one, 1e-6)
    return (n_prompt / ttft, dec), ((n_prompt - n_tiny) / cpu_prefill, (n_gen - 1) / cpu_decode), ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cinfer", default=os.path.join(ROOT, "build/src/cli/cinfer"))
    ap.add_argument("--extra-bufts", action="store_true",
                    help="let llama.cpp repack weights into its extra buffer types (AMX/AVX-512 repack); off by "
                         "default: on this project's AMX host the repacked path crashes on Gemma 3")
    a = ap.parse_args()
    model = a.model or subprocess.run([os.path.join(ROOT, "scripts/find_smollm2.sh")], capture_output=True,
                                      text=True, check=True).stdout.strip()
    orig = llama_cpp.llama_cpp.llama_model_default_params
    if not a.extra_bufts:  # Llama() has no such argument: patch the defaults it starts from
        def no_extra_bufts():
            p = orig()
            p.use_extra_bufts = False
            return p
        llama_cpp.llama_cpp.llama_model_default_params = no_extra_bufts
    llm = llama_cpp.Llama(model_path=model, n_ctx=2048, n_batch=512, n_threads=a.threads,
                          n_threads_batch=a.threads, verbose=False, flash_attn=False)
    llama_cpp.llama_cpp.llama_model_default_params = orig
    # a prompt of about prompt-tokens tokens (no digits, so both tokenise identically)
    words = "the quick brown fox jumps over the lazy dog while seven clever cats watch quietly".split()
    prompt = " ".join(words[i % len(words)] for i in range(a.prompt_tokens))
    # the model's special tokens as `cinfer generate` adds them (BOS for Gemma/SPM vocabularies)
    ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
    res = {"llama.cpp": [], "cinfer": []}
    same = True
    for _ in range(a.reps):
        wall, cpu, out_l = llamacpp_run(llm, ids, a.gen)
        res["llama.cpp"].append(wall + cpu)
        wall, cpu, out_c = cinfer_run(a.cinfer, model, prompt, a.gen, a.threads)
        res["cinfer"].append(wall + cpu)
        same &= out_l == out_c[:len(out_l)]
    print(f"model {os.path.basename(model)}, threads {a.threads}, prompt {len(ids)} tokens, "
          f"generate {a.gen}, median of {a.reps}; llama-cpp-python {llama_cpp.__version__}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| engine | prefill tok/s | decode tok/s | prefill tok/CPU-s | decode tok/CPU-s |")
    print("| --- | --- | --- | --- | --- |")
    med = {}
    for k, v in res.items():
        med[k] = [statistics.median(x[i] for x in v) for i in range(4)]
        print(f"| {k} | " + " | ".join(f"{m:.1f}" for m in med[k]) + " |")
    r = [med["cinfer"][i] / med["llama.cpp"][i] for i in range(4)]
    print(f"cinfer/llama.cpp: wall prefill {r[0]:.2f}x, decode {r[1]:.2f}x; per CPU-second prefill {r[2]:.2f}x, "
          f"decode {r[3]:.2f}x; identical greedy ids: {same}")


if __name__ == "__main__":
    sys.exit(main())
