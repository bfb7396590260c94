"""lm-evaluation-harness against `cinfer serve` (seed 001: validate a cluster "with a standard
test set such as LM-Eval"), and the same task scored by llama.cpp through llama-cpp-python.

lm-eval runs as its users run it (`lm_eval --model local-completions`), from its own venv
(build/venv-lmeval, made by scripts/setup.sh: it needs numpy 2, the test venv numpy < 2). Its
tokenizer is the server's (`tokenizer_backend=remote`: /tokenizer_info, /tokenize,
/detokenize as vLLM serves them), so nothing is downloaded; the task is a local JSONL file
written here. lm-eval sends each (context, continuation) pair as token ids with echo +
logprobs and sums the continuation's prompt logprobs; the reference sums the same tokens'
log-softmax from llama.cpp's logits.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import urllib.request

from cinfer_server import SRC, Server, copy_repo

ROOT = os.path.abspath(SRC)

MODEL = "smollm2"
LM_EVAL = os.path.join(ROOT, "build", "venv-lmeval", "bin", "lm_eval")

# (question, choices, index of the answer): facts a 135M model mostly knows, and some it
# does not, so accuracy is neither 0 nor 1 by construction.
ITEMS = [
    ("The capital of France is", ["Paris", "London", "Berlin", "Madrid"], 0),
    ("The capital of Japan is", ["Seoul", "Tokyo", "Beijing", "Bangkok"], 1),
    ("The largest planet in the solar system is", ["Mars", "Venus", "Jupiter", "Mercury"], 2),
    ("Water is made of hydrogen and", ["carbon", "helium", "nitrogen", "oxygen"], 3),
    ("The opposite of hot is", ["cold", "warm", "loud", "tall"], 0),
    ("A week has seven", ["hours", "days", "months", "years"], 1),
    ("The color of the clear sky on a sunny day is", ["green", "red", "blue", "purple"], 2),
    ("Cats are animals that often chase", ["clouds", "cars", "stars", "mice"], 3),
    ("The sun rises in the", ["east", "west", "north", "south"], 0),
    ("Two plus two equals", ["three", "four", "five", "six"], 1),
    ("The chemical symbol for gold is", ["Ag", "Fe", "Au", "Pb"], 2),
    ("Bees make", ["milk", "silk", "wool", "honey"], 3),
    ("The author of Romeo and Juliet is William", ["Shakespeare", "Wordsworth", "Blake", "Golding"], 0),
    ("The freezing point of water in degrees Celsius is", ["ten", "zero", "fifty", "one hundred"], 1),
    ("The longest river in Africa is the", ["Amazon", "Danube", "Nile", "Thames"], 2),
    ("Penguins live mostly in the", ["Sahara", "Alps", "Arctic", "Antarctic"], 3),
    ("The first man to walk on the Moon was Neil", ["Armstrong", "Young", "Diamond", "Gaiman"], 0),
    ("A baby dog is called a", ["kitten", "puppy", "calf", "foal"], 1),
    ("The language mostly spoken in Brazil is", ["Spanish", "French", "Portuguese", "Italian"], 2),
    ("The Great Wall is in", ["Peru", "Egypt", "India", "China"], 3),
]


def write_task(d):
    data = os.path.join(d, "mc.jsonl")
    with open(data, "w") as f:
        for q, choices, a in ITEMS:
            f.write(json.dumps({"question": q, "choices": choices, "answer": a}) + "\n")
    with open(os.path.join(d, "cinfer_mc.yaml"), "w") as f:
        f.write(f"""task: cinfer_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
""")


@pytest.fixture(scope="module")
def server():
    with Server(copy_repo([MODEL])) as s:
        s.wait_ready()
        yield s


def test_tokenizer_endpoints_as_vllm(server):
    info = json.load(urllib.request.urlopen(server.url + "/tokenizer_info"))
    assert info["eos_token"] == "<|im_end|>" and info["chat_template"].startswith("{%")
    assert info["max_model_len"] > 0 and info["vocab_size"] == 49152

    def post(path, body):
        req = urllib.request.Request(server.url + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req))
    t = post("/tokenize", {"prompt": "Hello world<|im_end|>", "add_special_tokens": False})
    assert t["count"] == len(t["tokens"]) == 3 and t["tokens"][-1] == 2  # the special token parsed
    assert post("/detokenize", {"tokens": t["tokens"]})["prompt"] == "Hello world<|im_end|>"


def test_token_id_prompts_are_used_as_given(server):
    """A prompt of token ids is scored exactly as given (no BOS added), and echo returns its
    text; the same ids as text give the same logprobs."""
    def post(body):
        req = urllib.request.Request(server.url + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req))
    text = "The capital of France is"
    ids = [504, 3575, 282, 4649, 314]
    a = post({"model": MODEL, "prompt": [ids], "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0})
    b = post({"model": MODEL, "prompt": text, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0})
    la, lb = a["choices"][0]["logprobs"], b["choices"][0]["logprobs"]
    assert a["choices"][0]["text"].startswith(text) and a["usage"]["prompt_tokens"] == 5
    assert la["tokens"] == lb["tokens"] and la["token_logprobs"][0] is None
    assert np.allclose(la["token_logprobs"][1:], lb["token_logprobs"][1:], atol=1e-6)
    # bad ids are a 400 naming the token
    for bad, what in (([ids + [10 ** 6]], "token 5"), ([[1.5]], "prompt[0]"), ([[-1]], "prompt[0]")):
        try:
            post({"model": MODEL, "prompt": bad, "max_tokens": 1})
            raise AssertionError("accepted " + repr(bad))
        except urllib.error.HTTPError as e:
            assert e.code == 400 and what in e.read().decode()


def llama_logliks(model_path, requests):
    """Sum of log-softmax over the continuation tokens of each (tokens, ctxlen) with llama.cpp."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "llm"))
    from compare_logprobs import llama_model  # AMX repacking off, as on this host's CPUs
    llm = llama_model(model_path, 128)
    out = []
    for toks, ctxlen in requests:
        llm.reset()
        llm.eval(toks)
        logits = np.array(llm.scores[:len(toks)], dtype=np.float64)
        mx = logits.max(axis=1, keepdims=True)
        lsm = logits - (np.log(np.exp(logits - mx).sum(axis=1, keepdims=True)) + mx)
        out.append(float(sum(lsm[p - 1, toks[p]] for p in range(ctxlen, len(toks)))))
    return out


def test_lm_eval_multiple_choice_matches_llama_cpp(server, tmp_path):
    assert os.access(LM_EVAL, os.X_OK), f"{LM_EVAL} missing: run scripts/setup.sh"
    write_task(str(tmp_path))
    out = tmp_path / "out"
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               HF_HOME=str(tmp_path / "hf"))
    cmd = [LM_EVAL, "--model", "local-completions", "--model_args",
           f"model={MODEL},base_url={server.url}/v1/completions,tokenizer_backend=remote,num_concurrent=2,"
           "max_retries=1,timeout=120",
           "--tasks", "cinfer_mc", "--include_path", str(tmp_path), "--output_path", str(out), "--log_samples"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    results = [os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs if f.startswith("results")]
    samples = [os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs if f.startswith("samples")]
    assert len(results) == 1 and len(samples) == 1, (results, samples)
    acc = json.load(open(results[0]))["results"]["cinfer_mc"]["acc,none"]
    docs = [json.loads(line) for line in open(samples[0])]
    assert len(docs) == len(ITEMS)
    ours = {d["doc_id"]: [float(x[0]) for x in d["filtered_resps"]] for d in docs}

    # The same requests as lm-eval builds them: context and context + " " + choice tokenized
    # by the model's tokenizer (llama.cpp's, which the golden tests hold identical to ours).
    import llama_cpp
    gguf = os.path.join(server.repo, MODEL, "1", "model.gguf")
    tok = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)
    reqs = []
    for q, choices, _ in ITEMS:
        ctx = tok.tokenize(q.encode(), add_bos=False, special=True)
        for c in choices:
            whole = tok.tokenize((q + " " + c).encode(), add_bos=False, special=True)
            assert whole[:len(ctx)] == ctx
            reqs.append((whole, len(ctx)))
    ref = llama_logliks(gguf, reqs)
    ref_by_doc = [ref[4 * i:4 * i + 4] for i in range(len(ITEMS))]
    ref_acc = float(np.mean([int(np.argmax(r)) == a for r, (_, _, a) in zip(ref_by_doc, ITEMS)]))
    diffs = [abs(o - r) for i in range(len(ITEMS)) for o, r in zip(ours[i], ref_by_doc[i])]
    print(f"lm-eval acc on cinfer {acc:.3f}, on llama.cpp {ref_acc:.3f}; "
          f"|dloglik| mean {np.mean(diffs):.4f} max {np.max(diffs):.4f}")
    assert acc == pytest.approx(ref_acc), (acc, ref_acc)
    for i in range(len(ITEMS)):
        assert int(np.argmax(ours[i])) == int(np.argmax(ref_by_doc[i])), (ITEMS[i], ours[i], ref_by_doc[i])
    assert max(diffs) < 0.5, diffs


def test_vllm_prompt_logprobs(server):
    """vLLM's prompt_logprobs=k: per prompt token (the first None) the token's logprob and rank
    and its k best alternatives, equal to the echo + logprobs figures of the same prompt."""
    def post(body):
        req = urllib.request.Request(server.url + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req))
    ids = [504, 3575, 282, 4649, 314]
    r = post({"model": MODEL, "prompt": [ids], "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2})
    plp = r["choices"][0]["prompt_logprobs"]
    assert r["choices"][0]["logprobs"] is None and len(plp) == len(ids) and plp[0] is None
    e = post({"model": MODEL, "prompt": [ids], "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 2})
    lp = e["choices"][0]["logprobs"]
    for i in range(1, len(ids)):
        entry = plp[i]
        own = entry[str(ids[i])]
        assert abs(own["logprob"] - lp["token_logprobs"][i]) < 1e-5
        assert own["rank"] >= 1 and len(entry) in (2, 3)  # the token and its 2 best, deduplicated
        best = sorted(v["logprob"] for v in entry.values())[-1]
        assert abs(best - max(lp["top_logprobs"][i].values())) < 1e-5
        # rank 1 exactly when the token is the best one
        assert (own["rank"] == 1) == (abs(own["logprob"] - best) < 1e-9 and
                                     all(v["rank"] != 1 for k, v in entry.items() if k != str(ids[i])))
    for bad in ({"prompt_logprobs": 21}, {"prompt_logprobs": 1.5}, {"prompt_logprobs": 1, "stream": True}):
        try:
            post({"model": MODEL, "prompt": "hi", "max_tokens": 1, **bad})
            raise AssertionError("accepted " + repr(bad))
        except urllib.error.HTTPError as err:
            assert err.code == 400 and "prompt_logprobs" in err.read().decode()
