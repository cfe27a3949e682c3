/* tensorframe models: language models from GGUF files, as a library.
 *
 * libtensorframe_model runs the decoders of the common families (llama:
 * Llama 2/3, SmolLM, Mistral; qwen2; qwen3; phi3; gemma2; gemma3) from the
 * GGUF files people download, in any quantization tensorframe multiplies,
 * on any device, through tensorframe's public API only. The shape of the
 * API is llama.cpp's llama.h in this project's conventions: every call
 * returns a tf_status, outputs come last, and on failure
 * tf_model_last_error() says what was wrong (thread-local); nothing aborts,
 * and a failed call leaves its arguments as they were.
 *
 *   tf_model *m;
 *   tf_model_params mp = tf_model_default_params();   // device "auto", weights as stored
 *   tf_model_load("model.gguf", &mp, &m);
 *   tf_model_context *ctx;
 *   tf_model_context_new(m, 2048, 1, &ctx);
 *   int32_t *ids; int64_t n;
 *   tf_model_tokenize(m, text, strlen(text), true, true, &ids, &n);
 *   tf_tensor *logits;                                 // [1, n_vocab] f32
 *   tf_model_eval(ctx, ids, n, &logits);
 *   tf_sampler *s; tf_sampler_params sp = tf_sampler_default_params();
 *   tf_sampler_new(&sp, &s);
 *   int32_t next; tf_sampler_sample(s, logits, 0, &next);
 *
 * Weights are read from the file's mapping and kept in their stored dtypes
 * (quantized matrices stay quantized). Activations and the KV cache are
 * f32. Every metadata value is checked for what it means before use; a
 * file of a family, RoPE scaling or tensor this library does not run is
 * refused with a message that names it. */
#ifndef TENSORFRAME_MODEL_H
#define TENSORFRAME_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tensorframe/tensorframe.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tf_model tf_model;
typedef struct tf_model_context tf_model_context;
typedef struct tf_sampler tf_sampler;

/* The last failure's message in this thread's model calls. */
TF_API const char *tf_model_last_error(void);

typedef struct tf_model_params {
    const char *device;        /* "auto" (the best device by priority), "cpu", "cuda:0", ... */
    tf_dtype weights;          /* TF_DTYPE_COUNT: as stored (default); TF_F32, TF_F16, TF_BF16: decoded to it */
    int64_t n_ctx;             /* cells the caller means to use, for the memory check (0: 4096, at most the trained length) */
    int64_t n_seq;             /* sequences the caller means to run, for the same check (0: 1) */
    bool allow_split;          /* when the device is short: its first layers there, the rest on split_device */
    const char *split_device;  /* where the rest go (NULL: "cpu") */
} tf_model_params;
TF_API tf_model_params tf_model_default_params(void);

/* Loads a GGUF file's model. Before any weight is read, the bytes of the
 * weights and of a KV cache for params->n_ctx cells are compared with the
 * device's free memory. When they do not fit: TF_ERR_OUT_OF_MEMORY naming
 * both figures, or, with allow_split, as llama.cpp's -ngl but chosen by
 * free memory: the embeddings and as many first layers (with their cache)
 * as fit stay on the device, the other layers and an untied output matrix
 * go to split_device, and activations cross once per forward.
 * TF_ERR_UNSUPPORTED names what is not run (the family, a RoPE scaling);
 * TF_ERR_FORMAT names the key or tensor at fault. */
TF_API tf_status tf_model_load(const char *path, const tf_model_params *params, tf_model **out);
TF_API void tf_model_free(tf_model *m);

typedef struct tf_model_info {
    const char *architecture;      /* "llama", "qwen2", ... */
    const char *name;              /* general.name, or "" */
    const char *device;            /* where the weights are */
    int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    int64_t sliding_window;        /* 0: every layer attends all positions */
    int64_t n_layer_on_device;     /* layers on `device`; the rest are on split_device */
    const char *split_device;      /* NULL when the model is not split */
    uint64_t weight_bytes;         /* as loaded */
    bool has_tokenizer;
    int32_t bos, eos;              /* -1 when the file names none */
    bool add_bos;                  /* the file asks for BOS before a prompt */
    const char *chat_template;     /* tokenizer.chat_template (Jinja), NUL-terminated, or NULL */
} tf_model_info;
/* The strings live as long as the model. */
TF_API tf_status tf_model_get_info(const tf_model *m, tf_model_info *out);
/* KV-cache bytes for n_ctx cells (f32 keys and values of every layer). */
TF_API uint64_t tf_model_kv_bytes(const tf_model *m, int64_t n_ctx);

/* ---- tokens -------------------------------------------------------------- */

/* Token ids of text[0..len): when add_special, BOS first and EOS last as
 * the file asks (add_bos_token, add_eos_token; [CLS]/[SEP] for BERT); control tokens written in the text become their ids when
 * parse_special (a chat template's markers need it). *ids is malloc'ed
 * (free() it). TF_ERR_UNSUPPORTED when the file has no tokenizer. */
TF_API tf_status tf_model_tokenize(const tf_model *m, const char *text, size_t len, bool add_special,
                                   bool parse_special, int32_t **ids, int64_t *n);
/* The bytes a token stands for (a control token as its text). A token may
 * end in the middle of a UTF-8 character: a program that prints pieces
 * should keep the incomplete tail for the next one (tf_model_detokenize
 * does). The bytes live as long as the model. */
TF_API tf_status tf_model_token_bytes(const tf_model *m, int32_t id, const char **bytes, size_t *len);
/* End of generation: EOS, EOT and the control tokens that end a turn. */
TF_API bool tf_model_token_is_end(const tf_model *m, int32_t id);
/* Streams text safely: appends the bytes of id to *pending, then moves
 * every complete UTF-8 character of it into out (capacity out_cap, NUL-
 * terminated), keeping an incomplete tail in *pending (at most 3 bytes).
 * *n_out is the bytes written. TF_ERR_SIZE when out is too small. */
typedef struct tf_utf8_pending {
    char bytes[4];
    int n;
} tf_utf8_pending;
TF_API tf_status tf_model_detokenize(const tf_model *m, int32_t id, tf_utf8_pending *pending, char *out,
                                     size_t out_cap, size_t *n_out);

/* ---- chat templates ---------------------------------------------------------- */

/* A GGUF's tokenizer.chat_template is Jinja. The common formats are
 * recognized from it as llama.cpp recognizes them and written without a
 * Jinja engine: chatml (SmolLM2, Qwen2/2.5/3), llama3, gemma, phi3,
 * zephyr, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, llama2,
 * llama2-sys. Each writes what the model's own template writes for a
 * conversation of system/user/assistant messages (checked against the
 * templates' Jinja in tests/llm/fixtures/chat), except: BOS is left to
 * the tokenizer; ChatML copies a template's literal default system
 * message; Llama 3.1+ opens with its dated system turn; Mistral v3 puts
 * the system message before the last user turn. */
typedef struct tf_chat_message {
    const char *role;          /* "system", "user", "assistant" */
    const char *content;
} tf_chat_message;
/* The format of a template text (or the name itself, when it is one of
 * the names above); TF_ERR_UNSUPPORTED, listing the names, when it is none. */
TF_API tf_status tf_chat_template_detect(const char *template_or_name, const char **name);
/* The conversation as text, ending with the assistant's opening when
 * add_assistant. template_or_name NULL: the model's own template (m may
 * be NULL when it is not). *out is malloc'ed (free() it). An unknown
 * template is TF_ERR_UNSUPPORTED, never a guess. */
TF_API tf_status tf_model_chat_apply(const tf_model *m, const char *template_or_name, const tf_chat_message *messages,
                                     size_t n, bool add_assistant, char **out);

/* ---- contexts: a KV cache and the forward pass ----------------------------- */

/* A KV cache of n_ctx cells shared by n_seq sequences (1..64), as
 * llama.cpp's unified cache: sequences take cells as they grow, a prefix
 * copied between them is shared, not duplicated. */
TF_API tf_status tf_model_context_new(const tf_model *m, int64_t n_ctx, int64_t n_seq, tf_model_context **out);
TF_API void tf_model_context_free(tf_model_context *c);
/* Cells written so far (the next decode's tokens go after them). */
TF_API int64_t tf_model_context_used(const tf_model_context *c);
/* The largest position sequence `seq` holds, or -1 when it holds none. */
TF_API int64_t tf_model_seq_pos_max(const tf_model_context *c, int32_t seq);
/* Forgets positions [p0, p1) of a sequence (p1 < 0: to its end; seq < 0:
 * every sequence). Cells no sequence holds any more are freed; the
 * trailing ones are reused by the next decode. */
TF_API tf_status tf_model_seq_rm(tf_model_context *c, int32_t seq, int64_t p0, int64_t p1);
/* Sequence dst sees src's positions [p0, p1) (p1 < 0: to the end) as its
 * own: a shared system prompt is decoded once. */
TF_API tf_status tf_model_seq_cp(tf_model_context *c, int32_t src, int32_t dst, int64_t p0, int64_t p1);

/* A batch of tokens decoded in one forward: entry i is token ids[i] at
 * position pos[i] of sequence seq[i], and its logits are returned when
 * logits[i]. pos, seq and logits may be NULL: sequence 0, the positions
 * after the ones it holds, logits of the last entry only. Within a
 * sequence, positions must follow the ones it holds and increase. */
typedef struct tf_model_batch {
    const int32_t *ids;
    const int64_t *pos;
    const int32_t *seq;
    const bool *logits;
    int64_t n;
} tf_model_batch;
/* *logits (f32, on the model's device) is [entries with logits, n_vocab]
 * in batch order. Bad entries and a full cache are errors that leave the
 * context as it was. TF_ERR_NOT_FINITE when the logits hold NaN or Inf. */
TF_API tf_status tf_model_decode(tf_model_context *c, const tf_model_batch *batch, tf_tensor **logits);
/* The common case: ids[0..n) after the positions sequence 0 holds; *logits
 * is the last one's [1, n_vocab]. */
TF_API tf_status tf_model_eval(tf_model_context *c, const int32_t *ids, int64_t n, tf_tensor **logits);

/* ---- embeddings ------------------------------------------------------------ */

/* Encoders (BERT: a GGUF of architecture bert, or a Hugging Face
 * model.safetensors with its config.json and vocab.txt beside it, as
 * all-MiniLM-L6-v2 ships) pool their last layer; decoders their final
 * hidden state (after the output norm). */
typedef enum tf_pooling {
    TF_POOLING_DEFAULT = 0,    /* the model's: an encoder's file says (mean for sentence-transformers), a decoder's last token */
    TF_POOLING_MEAN = 1,       /* over the real tokens */
    TF_POOLING_CLS = 2,        /* the first token */
    TF_POOLING_LAST = 3        /* the last token */
} tf_pooling;
/* n texts' embeddings, [n, n_embd] f32 on the model's device (unit L2
 * length when normalize). Encoders add [CLS] and [SEP]; decoders BOS as
 * their file asks. */
TF_API tf_status tf_model_embed(const tf_model *m, const char *const *texts, int64_t n, tf_pooling pooling,
                                bool normalize, tf_tensor **out);
/* The same from ids: row i of ids [n, len] holds lengths[i] real tokens. */
TF_API tf_status tf_model_embed_tokens(const tf_model *m, const int32_t *ids, const int64_t *lengths, int64_t n,
                                       int64_t len, tf_pooling pooling, bool normalize, tf_tensor **out);

/* ---- sampling -------------------------------------------------------------- */

/* llama.cpp's default chain: penalties over the last penalty_last_n
 * accepted tokens, top-k, top-p and min-p on the probabilities at
 * temperature 1, then the temperature and a draw. Temperature <= 0 is
 * greedy. The draw uses SplitMix64 from `seed` on the host, so the same
 * seed and the same logits give the same tokens on every device. */
typedef struct tf_sampler_params {
    double temperature;        /* 0.8; <= 0: greedy */
    int64_t top_k;             /* 40; <= 0: no limit */
    double top_p;              /* 0.95; >= 1: no limit */
    double min_p;              /* 0.05; <= 0: no limit */
    double repeat_penalty;     /* 1: none */
    double frequency_penalty;  /* 0 */
    double presence_penalty;   /* 0 */
    int64_t penalty_last_n;    /* 64 */
    uint64_t seed;
} tf_sampler_params;
TF_API tf_sampler_params tf_sampler_default_params(void);
TF_API tf_status tf_sampler_new(const tf_sampler_params *p, tf_sampler **out);
TF_API void tf_sampler_free(tf_sampler *s);
/* Chooses from row `row` of logits ([rows, n_vocab] f32, any device) and
 * accepts the choice (it counts for the penalties from then on). */
TF_API tf_status tf_sampler_sample(tf_sampler *s, const tf_tensor *logits, int64_t row, int32_t *id);
/* Counts a token for the penalties without sampling it (a prompt's). */
TF_API tf_status tf_sampler_accept(tf_sampler *s, int32_t id);

#ifdef __cplusplus
}
#endif

#endif
