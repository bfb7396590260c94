"""LLM admission and KV cache sizing, with the `openai` client against the real binary serving
SmolLM2 (docs/llm.md#admission):

- `--kv-cache-memory` and the model parameter `kv_cache_memory` size the paged KV cache
  (blocks = bytes // bytes per block), logged at load; nonsense values are refused naming the
  flag or the parameter;
- the engine's sequence budget (max_seqs) and waiting queue (max_waiting): a request that
  finds the queue full is refused at once with 503 and Retry-After, while every admitted
  request completes;
- a prompt that can never fit the KV cache is a 400;
- under KV pressure, admitted sequences are preempted and recomputed, never dropped, and
  their greedy output is the same as when they run alone.
"""
import concurrent.futures
import os
import re
import subprocess
import threading
import time
import urllib.request

import openai
import pytest

from cinfer_server import BIN, Server, copy_repo

MODEL = "smollm2"
# SmolLM2-135M: 30 layers x 16 tokens x 3 KV heads x 64 dims x (K, V) x fp16
BLOCK_BYTES = 30 * 16 * 3 * 64 * 2 * 2


def repo_with(params):
    """A repository with smollm2 and these extra model parameters."""
    repo = copy_repo([MODEL])
    cfg = os.path.join(repo, MODEL, "config.pbtxt")
    with open(cfg) as f:
        text = f.read()
    for k in params:
        text = re.sub(r'parameters \{ key: "%s".*\n' % k, "", text)
    with open(cfg, "w") as f:
        f.write(text)
        for k, v in params.items():
            f.write('parameters { key: "%s" value: { string_value: "%s" } }\n' % (k, v))
    return repo


def metric(server, name):
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{MODEL}"}}'):
            return float(line.split()[-1])
    return None


def wait_metric(server, name, pred, timeout=120):
    deadline = time.monotonic() + timeout
    v = None
    while time.monotonic() < deadline:
        v = metric(server, name)
        if v is not None and pred(v):
            return v
        time.sleep(0.02)
    raise AssertionError(f"{name} never satisfied the condition (last {v})")


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


def machine_memory():
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            v = f.read().strip()
        if v.isdigit() and 0 < int(v) < mem:
            mem = int(v)
    except OSError:
        pass
    return mem


# ---- --kv-cache-memory ------------------------------------------------------------------


def test_kv_cache_memory_flag_sizes_the_cache():
    with Server(repo_with({}), ["--kv-cache-memory", "64MiB"]) as s:
        s.wait_ready()
        blocks = 64 * 1024 * 1024 // BLOCK_BYTES
        assert metric(s, "cinfer_llm_kv_cache_blocks") == blocks
        assert metric(s, "cinfer_llm_kv_cache_bytes") == blocks * BLOCK_BYTES
        log = "".join(s.log)
        assert f"KV cache {blocks} blocks of 16 tokens" in log, log
        assert "from --kv-cache-memory '64MiB'" in log, log
        # the cache works: a request is answered
        r = client_of(s).completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0)
        assert r.usage.completion_tokens >= 1


def test_kv_cache_memory_fraction_of_memory():
    with Server(repo_with({}), ["--kv-cache-memory", "0.5%"]) as s:
        s.wait_ready()
        want = int(0.005 * machine_memory()) // BLOCK_BYTES
        assert metric(s, "cinfer_llm_kv_cache_blocks") == want


def test_model_parameter_overrides_the_flag():
    with Server(repo_with({"kv_cache_memory": "8M"}), ["--kv-cache-memory", "64MiB"]) as s:
        s.wait_ready()
        assert metric(s, "cinfer_llm_kv_cache_blocks") == 8 * 1024 * 1024 // BLOCK_BYTES
        assert "from parameter kv_cache_memory '8M'" in "".join(s.log)


@pytest.mark.parametrize("value,why", [
    ("", "empty"), ("abc", "is not a size"), ("-1G", "is not a size"), ("0", "is not a positive size"),
    ("2X", "unknown unit 'X'"), ("1.5", "must be in (0, 1]"), ("150%", "must be in (0, 1]"),
    ("1000T", "more than the machine's memory")])
def test_bad_kv_cache_memory_flag_is_refused(value, why):
    p = subprocess.run([BIN, "serve", "--model-repository", repo_with({}), "--http-port", "0",
                        "--kv-cache-memory", value], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--kv-cache-memory" in p.stderr and why in p.stderr, p.stderr


def load_failure(params):
    """The reason the model failed to load, from the log of a server that started without it."""
    with Server(repo_with(params), ["--strict-readiness", "false"]) as s:
        s.wait_ready()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = "".join(s.log)
            m = re.search(r"failed to load model.*reason=(.*)", text)
            if m:
                return m.group(1)
            time.sleep(0.05)
        raise AssertionError("no load failure logged:\n" + "".join(s.log))


@pytest.mark.parametrize("params,why", [
    ({"kv_cache_memory": "lots"}, "parameter kv_cache_memory 'lots' is not a size"),
    ({"kv_cache_memory": "1K"}, "holds 0 blocks of 368640 bytes"),
    ({"kv_cache_memory": "2", "kv_blocks": "8"}, "give one of the parameters kv_cache_memory, kv_bytes and kv_blocks"),
    ({"max_waiting": "-2"}, "parameter 'max_waiting' = '-2' is not an integer"),
])
def test_bad_kv_cache_parameter_fails_the_load(params, why):
    reason = load_failure(params)
    assert why in reason, reason
    if "1K" in params.values():
        assert "KV cache from parameter kv_cache_memory '1K'" in reason, reason


# ---- admission --------------------------------------------------------------------------


def test_full_engine_refuses_at_once_and_admitted_requests_complete():
    # One running sequence, two waiting: a fourth and fifth request find the queue full.
    repo = repo_with({"max_seqs": "1", "max_waiting": "2"})
    with Server(repo) as s:
        s.wait_ready()
        c = client_of(s)
        long_tokens, short_tokens = 400, 8

        def gen(n, prompt):
            return c.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0,
                                        extra_body={"ignore_eos": True})

        pool = concurrent.futures.ThreadPoolExecutor(4)
        first = pool.submit(gen, long_tokens, "Once upon a time")
        wait_metric(s, "cinfer_llm_running_sequences", lambda v: v == 1)
        queued = [pool.submit(gen, short_tokens, f"Question {i}:") for i in range(2)]
        wait_metric(s, "cinfer_llm_waiting_sequences", lambda v: v == 2)
        # the engine is full: both refusals come back while the first request still runs
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as ei:
                gen(short_tokens, "One more")
            e = ei.value
            assert e.status_code == 503, e
            assert e.response.headers.get("retry-after") == "1"
            assert "max_waiting 2" in e.message, e.message
        assert not first.done()
        # every admitted request completes, with all its tokens
        r = first.result(600)
        assert r.usage.completion_tokens == long_tokens and r.choices[0].finish_reason == "length"
        for q in queued:
            r = q.result(600)
            assert r.usage.completion_tokens == short_tokens and r.choices[0].finish_reason == "length"
        assert metric(s, "cinfer_llm_refused_waiting_total") == 2
        assert metric(s, "cinfer_llm_max_waiting") == 2
        # the gauges are published before a sequence's final event: with every response in
        # hand, nothing reads as running or waiting (a stale "1 running" here once let the
        # second round's queued requests race its long one)
        assert metric(s, "cinfer_llm_running_sequences") == 0
        assert metric(s, "cinfer_llm_waiting_sequences") == 0
        # a refused stream is refused the same way, before any event
        first = pool.submit(gen, long_tokens, "Once upon a time")
        wait_metric(s, "cinfer_llm_running_sequences", lambda v: v == 1)
        queued = [pool.submit(gen, short_tokens, f"Question {i}:") for i in range(2)]
        wait_metric(s, "cinfer_llm_waiting_sequences", lambda v: v == 2)
        with pytest.raises(openai.APIStatusError) as ei:
            list(c.completions.create(model=MODEL, prompt="x", max_tokens=4, stream=True))
        assert ei.value.status_code == 503 and ei.value.response.headers.get("retry-after") == "1"
        for f in [first] + queued:
            assert f.result(600).choices[0].finish_reason == "length"
        pool.shutdown()
        assert metric(s, "cinfer_llm_refused_waiting_total") == 3


def test_prompt_that_can_never_fit_the_kv_cache_is_400():
    # 12 blocks = 192 tokens of KV cache, context 2048: a 300-token prompt can never run
    with Server(repo_with({"kv_cache_memory": str(12 * BLOCK_BYTES)})) as s:
        s.wait_ready()
        c = client_of(s)
        with pytest.raises(openai.BadRequestError) as ei:
            c.completions.create(model=MODEL, prompt="word " * 300, max_tokens=4)
        assert "KV cache" in ei.value.message, ei.value.message
        assert metric(s, "cinfer_llm_refused_too_long_total") == 1
        assert metric(s, "cinfer_llm_refused_waiting_total") == 0


def test_preempted_sequences_are_recomputed_not_dropped():
    # 12 KV blocks (192 tokens) for 4 sequences that each grow to ~110 tokens: the engine must
    # preempt; each answer is still complete and equal to the answer computed alone.
    prompts = [f"Write a long story about the number {i}." for i in range(4)]
    n = 90
    with Server(repo_with({"kv_cache_memory": str(12 * BLOCK_BYTES), "max_seqs": "4"})) as s:
        s.wait_ready()
        c = client_of(s)

        def gen(p):
            return c.completions.create(model=MODEL, prompt=p, max_tokens=n, temperature=0,
                                        extra_body={"ignore_eos": True})

        alone = [gen(p).choices[0].text for p in prompts]
        assert metric(s, "cinfer_llm_preemptions_total") == 0
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            together = list(pool.map(gen, prompts))
        assert metric(s, "cinfer_llm_preemptions_total") > 0
        for r, want in zip(together, alone):
            assert r.usage.completion_tokens == n
            assert r.choices[0].text == want
        assert metric(s, "cinfer_llm_refused_waiting_total") == 0


def test_prefix_cache_hit_ratio_metric():
    with Server(repo_with({})) as s:
        s.wait_ready()
        c = client_of(s)
        system = "You are a helpful assistant. " * 8
        for q in ("What is 2+2?", "Name a color."):
            c.chat.completions.create(model=MODEL, max_tokens=2, temperature=0,
                                      messages=[{"role": "system", "content": system},
                                                {"role": "user", "content": q}])
        hits = metric(s, "cinfer_llm_prefix_cache_hits_total")
        queries = metric(s, "cinfer_llm_prefix_cache_queries_total")
        assert hits > 0
        assert metric(s, "cinfer_llm_prefix_cache_hit_ratio") == pytest.approx(hits / queries)


# ---- cinfer bench --conversation --------------------------------------------------------


def run_bench(server, *args):
    import json
    import tempfile
    out = tempfile.mktemp(suffix=".json")
    p = subprocess.run([BIN, "bench", "--url", server.url, "--openai", "chat", "--model", MODEL,
                        "--conversation", "--json", out, "--quiet", *args],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out) as f:
        return json.load(f)["levels"][0], p.stdout


def test_bench_conversation_reuses_the_history():
    with Server(repo_with({})) as s:
        s.wait_ready()
        # 2 users x 2 conversations of 2 turns: every second turn carries the first answer
        lv, _ = run_bench(s, "--concurrency", "2", "--turns", "2", "--requests", "8", "--max-tokens", "8",
                          "--prompt-len", "6", "--system-prompt-len", "40", "--stream")
        assert lv["requests"] == 8 and lv["errors"] == 0, lv
        assert lv["output_tokens"] == 8 * 8
        # the shared system prompt and each conversation's first turn come from the prefix cache
        assert metric(s, "cinfer_llm_prefix_cache_hits_total") > 0
        assert metric(s, "cinfer_llm_prefix_cache_hit_ratio") > 0.3


def test_bench_conversation_counts_refusals_as_the_server_does():
    with Server(repo_with({"max_seqs": "1", "max_waiting": "1"})) as s:
        s.wait_ready()
        # the refused users ask again after thinking 0.1-0.3 s
        lv, table = run_bench(s, "--concurrency", "6", "--turns", "2", "--requests", "20", "--max-tokens", "16",
                              "--prompt-len", "6", "--think-ms", "200", "--window-ms", "60000")
        refused = lv["http_status_errors"].get("503", 0)
        assert refused >= 1, lv
        assert lv["refused"]["count"] == refused
        assert refused + lv["requests"] == 20
        assert metric(s, "cinfer_llm_refused_waiting_total") == refused
        assert "refusal p99 ms" in table
