/* The tokenizers of GGUF files: byte-level BPE and SentencePiece. The
 * byte-level BPE tokenizer of GPT-2-style models, read from a GGUF
 * file's metadata (tokenizer.ggml.*): the vocabulary, the merges with their
 * ranks, the token types (control tokens are matched in text as a whole),
 * the pre-tokenizer named by tokenizer.ggml.pre, and BOS/EOS. It reproduces
 * llama.cpp's tokenization of the same file token for token (checked
 * against its ids in tests/llm). */
#ifndef LLM_TOKENIZER_H
#define LLM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tensorframe/tensorframe.h>

typedef struct llm_tokenizer llm_tokenizer;

/* TF_ERR_FORMAT with a message in tf_last_error()-style text (llm_error())
 * when the metadata is missing, of the wrong type, or not a byte-level BPE
 * vocabulary with a pre-tokenizer this file knows. */
tf_status llm_tokenizer_load(const tf_gguf *f, llm_tokenizer **out);
void llm_tokenizer_free(llm_tokenizer *t);

/* Token ids of text[0..len): control tokens written in the text become their
 * ids when parse_special (the chat template needs it), BOS goes first when
 * add_bos. *ids is malloc'ed (free it); *n is the count. */
tf_status llm_tokenize(const llm_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                       int32_t **ids, int64_t *n);

/* As the file asks when add_special: BOS first (add_bos_token) and EOS last
 * (add_eos_token). */
tf_status llm_tokenize_special(const llm_tokenizer *t, const char *text, size_t len, bool add_special,
                               bool parse_special, int32_t **ids, int64_t *n);

/* The bytes a token stands for (a byte-level token decoded to raw bytes;
 * a control token as its text). May be a partial UTF-8 sequence. */
const char *llm_token_bytes(const llm_tokenizer *t, int32_t id, size_t *len);
/* The text of ids: their bytes joined, without the BOS tokenizing put
 * first and (SentencePiece) the space it put before the text. *out is
 * malloc'ed and NUL-terminated. */
tf_status llm_detokenize(const llm_tokenizer *t, const int32_t *ids, int64_t n, char **out, size_t *len);
int64_t llm_vocab_size(const llm_tokenizer *t);
/* llama.cpp's token type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; -1 out of range. */
int llm_token_type(const llm_tokenizer *t, int32_t id);
bool llm_tokenizer_is_spm(const llm_tokenizer *t);
int32_t llm_token_bos(const llm_tokenizer *t);
int32_t llm_token_eos(const llm_tokenizer *t);
bool llm_add_bos(const llm_tokenizer *t);
/* End of generation: EOS, and the control tokens that end a turn. */
bool llm_token_is_end(const llm_tokenizer *t, int32_t id);
/* The id of a token's exact text, or -1. */
int32_t llm_token_id(const llm_tokenizer *t, const char *text, size_t len);

/* The last error's message in this program's llm code. */
const char *llm_error(void);
tf_status llm_fail(tf_status s, const char *fmt, ...);

#endif
