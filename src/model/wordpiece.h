/* BERT's WordPiece tokenizer, as the `tokenizers` package runs
 * bert-base-uncased-style vocabularies (all-MiniLM-L6-v2's among them):
 *
 *   1. BertNormalizer: characters 0, U+FFFD and other (C*) characters are
 *      dropped, whitespace becomes a space, CJK ideographs get spaces
 *      around them; when lowercasing, accents are stripped (NFD, then the
 *      nonspacing marks removed) and the text is lowercased;
 *   2. BertPreTokenizer: words split at whitespace, each punctuation
 *      character (ASCII punctuation or P*) a word of its own;
 *   3. WordPiece: each word, greedily, the longest vocabulary piece from its
 *      start, then the longest "##" continuation, and so on; a word with a
 *      part no piece covers (or over 100 characters) is [UNK];
 *   4. [CLS] first and [SEP] last when asked.
 * Special tokens written in the text ([CLS], [SEP], [MASK], ...) are
 * matched first when parse_special. The vocabulary comes from a
 * vocab.txt (one piece a line, "##" marking continuations) or from a GGUF
 * (tokenizer.ggml.model "bert": llama.cpp's form, a word's first piece
 * prefixed with U+2581 and continuations bare). */
#ifndef LLM_WORDPIECE_H
#define LLM_WORDPIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tensorframe/tensorframe.h>

typedef struct llm_wordpiece llm_wordpiece;

tf_status llm_wordpiece_load_txt(const char *vocab_path, bool lowercase, llm_wordpiece **out);
tf_status llm_wordpiece_load_gguf(const tf_gguf *f, llm_wordpiece **out);
void llm_wordpiece_free(llm_wordpiece *w);

/* Ids of text[0..len) ([CLS] ... [SEP] when add_special); *ids malloc'ed. */
tf_status llm_wordpiece_tokenize(const llm_wordpiece *w, const char *text, size_t len, bool add_special,
                                 bool parse_special, int32_t **ids, int64_t *n);
/* A piece's text: a word's first piece with a space before it, a
 * continuation bare, a special token as written. */
const char *llm_wordpiece_token_bytes(const llm_wordpiece *w, int32_t id, size_t *len);
int64_t llm_wordpiece_size(const llm_wordpiece *w);
int32_t llm_wordpiece_cls(const llm_wordpiece *w);
int32_t llm_wordpiece_sep(const llm_wordpiece *w);

#endif
