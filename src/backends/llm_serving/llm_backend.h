/* llm_backend.h: the `llm` backend: a GGUF model served by the LLM engine
 * (src/backends/llm) behind the backend ABI, so LLM models live in the model repository
 * with states, versions, reload and unload like every other model. The OpenAI frontend
 * reaches the engine of a loaded model through llm_backend_engine(). */
#ifndef CINFER_LLM_BACKEND_H
#define CINFER_LLM_BACKEND_H

#include "backends/llm/llm.h"
#include "cinfer/backend.h"

extern const cinfer_backend_iface cinfer_llm_backend;

/* The engine of a loaded `llm` model's backend state (cinfer_model_backend_state). */
llm_engine *llm_backend_engine(void *model_state);

#endif
