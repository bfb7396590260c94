#!/usr/bin/env python3
"""make_spm_fixture.py: builds the SentencePiece tokenizer fixtures of the LLM tests.

  spm_tiny.gguf         a vocab-only GGUF (tokenizer.ggml.model = "llama") holding a small
                        SentencePiece BPE model trained here on an inline multilingual text
                        (vocab 600, byte_fallback on), with tokens, scores, token types,
                        BOS/EOS/UNK ids, add_bos and add_space_prefix
  tokenizer_spm.json    corpus strings -> llama.cpp's token ids (no BOS; specials parsed or
                        not, per case), llama.cpp's detokenisation of those ids
                        (llama_detokenize, remove_special=false, unparse_special=false) and
                        each token's piece (llama_token_to_piece, lstrip 0, special=false)

Two steps, two Pythons (sentencepiece/gguf are only needed to make the GGUF; the golden ids
come from llama-cpp-python, pinned in scripts/setup.sh's venv):
  python3 -m venv /tmp/spmvenv && /tmp/spmvenv/bin/pip install sentencepiece gguf numpy
  /tmp/spmvenv/bin/python tests/data/llm/make_spm_fixture.py gguf
  build/venv/bin/python tests/data/llm/make_spm_fixture.py golden
"""
import json
import os
import sys

OUT = os.path.dirname(os.path.abspath(__file__))
GGUF = os.path.join(OUT, "spm_tiny.gguf")

TRAIN = """The quick brown fox jumps over the lazy dog. Hello world, hello there!
Tokenizers split text into pieces; the pieces are looked up in a vocabulary.
Bonjour, comment ça va ? L'été est très chaud à Paris. Où est la gare ?
Größe, Straße, über, schön, Mädchen. ¿Dónde está la biblioteca? Año nuevo.
日本語のテキストです。東京は大きい。中文测试：今天天气很好。
def add(a, b):
    return a + b

for (int i = 0; i < n; i++) { sum += x[i]; }
if x == 1 and y != 2: print("yes")
Emoji are fun 😀 👍 and numbers 12345 67890 3.14159
    indented    lines	with	tabs and   runs of   spaces
"""


def make_gguf():
    import numpy as np
    import sentencepiece as spm
    import gguf

    work = "/tmp/spm_fixture_work"
    os.makedirs(work, exist_ok=True)
    corpus = os.path.join(work, "train.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(20):
            f.write(TRAIN)
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(work, "m"), model_type="bpe", vocab_size=600,
        byte_fallback=True, character_coverage=0.9995, split_digits=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity",
        user_defined_symbols=["<|user|>"], control_symbols=["<|end|>"],
        allow_whitespace_only_pieces=True, max_sentencepiece_length=16,
        num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "m.model"))
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            t = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            t = gguf.TokenType.UNUSED
        elif sp.is_byte(i):
            t = gguf.TokenType.BYTE
        elif sp.id_to_piece(i) == "<|user|>":
            t = gguf.TokenType.USER_DEFINED
        else:
            t = gguf.TokenType.NORMAL
        types.append(int(t))
    w = gguf.GGUFWriter(GGUF, "llama")
    w.add_name("spm-tiny")
    # hparams llama.cpp reads before it looks at the vocabulary (no tensors: vocab_only)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(GGUF, os.path.getsize(GGUF), "bytes,", len(tokens), "tokens")


CORPUS = [
    ("Hello world", False),
    ("hello there, the quick brown fox", False),
    ("The lazy dog jumps over the quick brown fox.", False),
    (" leading space", False),
    ("trailing space ", False),
    ("  two leading and two trailing  ", False),
    ("", False),
    (" ", False),
    ("   ", False),
    ("multiple   spaces\tand\ttabs\n\nand newlines\n", False),
    ("    indented code\n        more", False),
    ("def add(a, b):\n    return a + b\n", False),
    ("for (int i = 0; i < n; i++) { sum += x[i]; }", False),
    ("numbers 12345 and 3.14159 and 2024", False),
    ("Bonjour, comment ça va ? L'été est très chaud à Paris.", False),
    ("Größe Straße über schön Mädchen", False),
    ("¿Dónde está la biblioteca? Año nuevo.", False),
    ("日本語のテキストです。東京は大きい。", False),
    ("中文测试：今天天气很好。", False),
    ("Привет, как дела?", False),          # Cyrillic: not in the training text -> bytes
    ("한국어 문장", False),                 # Hangul: byte fallback
    ("مرحبا بالعالم", False),              # Arabic: byte fallback
    ("Emoji 😀 👍 and 🇫🇷 👨‍👩‍👧 ❤️", False),
    ("zzzz qqqq xxxx ~~~~ @@@@", False),
    ("a\u00a0b\u2003c\u3000d", False),
    ("\r\n\r\n", False),
    ("<|user|> is user-defined, <|end|> is control", False),
    ("<|user|> is user-defined, <|end|> is control", True),
    ("<s>hello</s><unk>", False),
    ("<s>hello</s><unk>", True),
    ("<|end|>hello<|end|> world", True),
    ("<0x41> is not a byte token in text", False),
    ("▁already▁escaped", False),
]


def golden():
    import llama_cpp

    llm = llama_cpp.Llama(model_path=GGUF, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    cases = []
    for text, special in CORPUS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        cap = 16 * len(text.encode("utf-8")) + 64
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, False, False)
        assert n >= 0
        detok = buf.raw[:n]
        pieces = []
        for t in ids:
            pb = ctypes.create_string_buffer(64)
            k = llama_cpp.llama_token_to_piece(vocab, t, pb, 64, 0, False)
            assert k >= 0
            pieces.append(list(pb.raw[:k]))
        cases.append({"text": text, "special": special, "ids": ids,
                      "detok": detok.decode("utf-8", errors="strict"), "pieces": pieces})
    with_bos = llm.tokenize(b"Hello world", add_bos=True, special=False)
    meta = {
        "llama_cpp_python": llama_cpp.__version__,
        "model": "spm_tiny.gguf",
        "command": "/tmp/spmvenv/bin/python tests/data/llm/make_spm_fixture.py gguf && "
                   "build/venv/bin/python tests/data/llm/make_spm_fixture.py golden",
        "bos": llm.token_bos(), "eos": llm.token_eos(), "n_vocab": llm.n_vocab(),
        "hello_world_with_bos": with_bos,
    }
    with open(os.path.join(OUT, "tokenizer_spm.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(len(cases), "cases")


if __name__ == "__main__":
    import ctypes
    if sys.argv[1:] == ["gguf"]:
        make_gguf()
    elif sys.argv[1:] == ["golden"]:
        golden()
    else:
        sys.exit(__doc__)
