#!/usr/bin/env python3
"""make_gemma3_tiny.py: writes gemma3_tiny.gguf (here, and a copy as a seed of fuzz_gguf in
fuzz/corpus/gguf): a complete gemma3 model (dim 8, 2 heads of 4, one KV head, 6 layers so both sliding-window and global layers
exist, F32 weights) with an SPM vocabulary, window 4: so test_llm_gemma3 runs
the sliding-window path far past its window in a few steps (under ASan in CI), and fuzz
mutations reach the gemma3 branches of llm_model_create and the tokenizer.
Run: python3 tests/data/llm/make_gemma3_tiny.py"""
import os
import struct

DIM, HEADS, KV, HD, FFN, LAYERS = 8, 2, 1, 4, 16, 6
TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "\u2581a", "b", "\n"]
TYPES = [3, 3, 3, 2, 3, 3, 1, 1, 4]


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv_u32(k, v):
    return s(k) + struct.pack("<II", 4, v)


def kv_f32(k, v):
    return s(k) + struct.pack("<If", 6, v)


kvs = [s("general.architecture") + struct.pack("<I", 8) + s("gemma3"),
       kv_u32("gemma3.embedding_length", DIM), kv_u32("gemma3.block_count", LAYERS),
       kv_u32("gemma3.attention.head_count", HEADS), kv_u32("gemma3.attention.head_count_kv", KV),
       kv_u32("gemma3.feed_forward_length", FFN), kv_u32("gemma3.context_length", 64),
       kv_u32("gemma3.attention.key_length", HD), kv_u32("gemma3.attention.value_length", HD),
       kv_u32("gemma3.attention.sliding_window", 4), kv_f32("gemma3.rope.freq_base", 1e6),
       kv_f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6),
       s("tokenizer.ggml.model") + struct.pack("<I", 8) + s("llama"),
       s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(TOKENS)) + b"".join(s(t) for t in TOKENS),
       s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, len(TOKENS)) + struct.pack(f"<{len(TOKENS)}f", *([-1.0] * len(TOKENS))),
       s("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, len(TOKENS)) + struct.pack(f"<{len(TOKENS)}i", *TYPES),
       kv_u32("tokenizer.ggml.bos_token_id", 2), kv_u32("tokenizer.ggml.eos_token_id", 1),
       s("tokenizer.ggml.add_space_prefix") + struct.pack("<I?", 7, False)]

tensors = [("token_embd.weight", [DIM, len(TOKENS)]), ("output_norm.weight", [DIM])]
for l in range(LAYERS):
    for n, shape in [("attn_norm", [DIM]), ("attn_q", [DIM, HEADS * HD]), ("attn_k", [DIM, KV * HD]),
                     ("attn_v", [DIM, KV * HD]), ("attn_output", [HEADS * HD, DIM]), ("attn_q_norm", [HD]),
                     ("attn_k_norm", [HD]), ("post_attention_norm", [DIM]), ("ffn_norm", [DIM]),
                     ("ffn_gate", [DIM, FFN]), ("ffn_up", [DIM, FFN]), ("ffn_down", [FFN, DIM]),
                     ("post_ffw_norm", [DIM])]:
        tensors.append((f"blk.{l}.{n}.weight", shape))

info, data, off = b"", b"", 0
for i, (name, shape) in enumerate(tensors):
    n = 1
    for d in shape:
        n *= d
    info += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
    info += struct.pack("<IQ", 0, off)
    vals = [((i * 7 + j * 3) % 11 - 5) / 8.0 for j in range(n)]
    blob = struct.pack(f"<{n}f", *vals)
    blob += b"\0" * (-len(blob) % 32)
    data += blob
    off += len(blob)
head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + info
head += b"\0" * (-len(head) % 32)
here = os.path.dirname(os.path.abspath(__file__))
for out in (os.path.join(here, "gemma3_tiny.gguf"),
            os.path.join(here, "..", "..", "..", "fuzz", "corpus", "gguf", "gemma3_tiny.gguf")):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(head + data)
    print(os.path.normpath(out), len(head + data), "bytes")
