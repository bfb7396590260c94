#!/usr/bin/env python3
"""llama_cpp_server.py: llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`)
with llama.cpp's CPU weight repacking turned off.

On this machine's CPU (AVX-512 + AMX) the prebuilt wheel's repacked ("extra") CPU buffers crash
in libggml-cpu.so on the first request (general protection fault). compare_logprobs.py avoids it
by loading the model with `use_extra_bufts = False`; llama_cpp.server has no option for it, so this
launcher patches the default model parameters the same way before the server loads the model,
then runs llama_cpp.server's own command line unchanged. Plain CPU buffers are what
`llama-server --no-repack` uses and what CPUs without those kernels run anyway.

  build/venv/bin/python bench/llm/llama_cpp_server.py --model M.gguf --host 127.0.0.1 --port 8001 \\
      --n_threads 2 --n_ctx 2048 --chat_format chatml

Every argument is llama_cpp.server's (see `--help`).
"""
import llama_cpp
import llama_cpp.llama

_default = llama_cpp.llama_model_default_params


def _no_repack():
    p = _default()
    p.use_extra_bufts = False
    return p


# llama.Llama reads the defaults through the module it imported them from
llama_cpp.llama.llama_cpp.llama_model_default_params = _no_repack
llama_cpp.llama_model_default_params = _no_repack

if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    main()
