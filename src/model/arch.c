/* The families the model library runs, as data: one descriptor each, read
 * by the one block builder in llm_forward.c. Each line follows llama.cpp's
 * src/models/<family>.cpp (graph) and load_arch_hparams (defaults). */
#include <string.h>

#include "llm_model.h"

static const llm_arch archs[] = {
    /* Llama 2/3, SmolLM, Mistral: the converter permutes q and k so that
     * rotated pairs are adjacent. */
    {.name = "llama", .rope_mode = TF_ROPE_INTERLEAVED, .act = LLM_ACT_SILU},
    /* Qwen2/2.5: q/k/v biases, which every family may have. */
    {.name = "qwen2", .rope_mode = TF_ROPE_HALF_SPLIT, .act = LLM_ACT_SILU},
    {.name = "qwen3", .rope_mode = TF_ROPE_HALF_SPLIT, .act = LLM_ACT_SILU, .qk_norm = true},
    /* Phi-3: fused attn_qkv and an ffn_up holding gate and up; its window
     * is read and ignored, as llama.cpp does. */
    {.name = "phi3", .rope_mode = TF_ROPE_HALF_SPLIT, .act = LLM_ACT_SILU, .swa_ignored = true},
    /* Gemma 2: every other layer local (window 4096 unless the file says),
     * attention scores and logits soft-capped, norms after each sublayer. */
    {.name = "gemma2", .rope_mode = TF_ROPE_HALF_SPLIT, .act = LLM_ACT_GELU_TANH, .post_norms = true,
     .scale_embeddings = true, .output_is_embeddings = true, .attn_softcap = true, .final_softcap_default = 30,
     .local_base_is_global = true, .swa_pattern = 2,
     .swa_window_default = 4096, .big_layers = 46},
    /* Gemma 3: five local layers of six (with their own RoPE base), q/k norms. */
    {.name = "gemma3", .rope_mode = TF_ROPE_HALF_SPLIT, .act = LLM_ACT_GELU_TANH, .qk_norm = true,
     .post_norms = true, .scale_embeddings = true, .swa_pattern = 6, .big_layers = 62},
};

const llm_arch *llm_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && !memcmp(archs[i].name, name, len)) return &archs[i];
    return NULL;
}

const char *llm_arch_names(void) { return "llama, qwen2, qwen3, phi3, gemma2, gemma3"; }
