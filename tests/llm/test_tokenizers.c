/* A GGUF vocabulary's tokenization against llama.cpp's ids for the same
 * strings (tests/llm/fixtures/tokenizers/NAME.tsv, written by
 * scripts/llama-fixtures.sh --tokenizer-fixtures with llama_ref): every
 * string gives exactly llama.cpp's ids (parse_special on, BOS as the file
 * asks), and the ids' bytes give the string back (for SentencePiece: with
 * the space prefix and its U+2581 marks read back as spaces).
 * A vocab.txt instead of a GGUF is BERT's WordPiece, checked against the
 * `tokenizers` package's ids (lowercasing makes it lossy: no round trip).
 * usage: test_tokenizers VOCAB.gguf|vocab.txt FIXTURE.tsv
 * Exits 77 (skipped) when the vocabulary file is absent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

#include "tokenizer.h"
#include "wordpiece.h"

static int failures;
#define EXPECT(cond, ...)                                       \
    do {                                                        \
        if (!(cond)) {                                          \
            failures++;                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);         \
            printf(__VA_ARGS__);                                \
            printf("\n");                                       \
        }                                                       \
    } while (0)

static int hex_value(char c) { return c >= 'a' ? c - 'a' + 10 : c - '0'; }

static const llm_wordpiece *wordpiece;      /* set: the vocabulary is BERT's */

static void check_one(const llm_tokenizer *tok, const char *hex, size_t hex_len, const char *ids_text) {
    size_t len = hex_len / 2;
    char *text = malloc(len + 1);
    for (size_t i = 0; i < len; i++) text[i] = (char)(hex_value(hex[2 * i]) << 4 | hex_value(hex[2 * i + 1]));
    text[len] = 0;
    static int32_t want[1 << 16];
    int n_want = 0, used;
    for (const char *p = ids_text; n_want < (1 << 16) && sscanf(p, "%d%n", &want[n_want], &used) == 1; p += used) n_want++;
    int32_t *got = NULL;
    int64_t n_got = 0;
    tf_status s = wordpiece ? llm_wordpiece_tokenize(wordpiece, text, len, true, true, &got, &n_got)
                            : llm_tokenize(tok, text, len, llm_add_bos(tok), true, &got, &n_got);
    EXPECT(s == TF_OK, "tokenize failed: %s", llm_error());
    bool same = s == TF_OK && n_got == n_want;
    for (int64_t i = 0; same && i < n_got; i++) same = got[i] == want[i];
    EXPECT(same, "tokens of \"%.60s\" differ from the reference's (%lld ids, want %d)", text, (long long)n_got, n_want);
    if (!same && s == TF_OK) {
        printf("   got :");
        for (int64_t i = 0; i < n_got; i++) printf(" %d", got[i]);
        printf("\n   want:");
        for (int i = 0; i < n_want; i++) printf(" %d", want[i]);
        printf("\n");
    }
    /* The ids' text is the string again, except where SentencePiece put a
     * space after a special token (as it does: the text after one is a
     * new fragment with its own space prefix). */
    bool spaced = wordpiece != NULL;
    for (int64_t i = 0; s == TF_OK && !spaced && llm_tokenizer_is_spm(tok) && i < n_got; i++) {
        int type = llm_token_type(tok, got[i]);
        spaced = spaced || ((type == 2 || type == 3 || type == 4) && got[i] != llm_token_bos(tok));
    }
    char *back = NULL;
    size_t n_back = 0;
    if (s == TF_OK && !spaced && llm_detokenize(tok, got, n_got, &back, &n_back) == TF_OK)
        EXPECT(n_back == len && !memcmp(back, text, len), "decoding \"%.60s\" gives \"%.*s\"", text, (int)n_back, back);
    free(back);
    free(got);
    free(text);
}

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: test_tokenizers VOCAB.gguf|vocab.txt FIXTURE.tsv\n"), 2;
    tf_gguf *f = NULL;
    llm_tokenizer *tok = NULL;
    llm_wordpiece *wp = NULL;
    size_t name_len = strlen(argv[1]);
    bool txt = name_len > 4 && !strcmp(argv[1] + name_len - 4, ".txt");
    FILE *probe = fopen(argv[1], "rb");
    if (!probe || (!txt && tf_gguf_open(argv[1], &f) != TF_OK)) {
        printf("skipped: %s is absent or unreadable\n", argv[1]);
        if (probe) fclose(probe);
        return 77;
    }
    fclose(probe);
    tf_status s = txt ? llm_wordpiece_load_txt(argv[1], true, &wp) : llm_tokenizer_load(f, &tok);
    wordpiece = wp;
    EXPECT(s == TF_OK, "load: %s", llm_error());
    FILE *in = fopen(argv[2], "r");
    EXPECT(in != NULL, "cannot read %s", argv[2]);
    static char line[1 << 18];
    int cases = 0;
    while (s == TF_OK && in && fgets(line, sizeof line, in)) {
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        check_one(tok, line, (size_t)(tab - line), tab + 1);
        cases++;
    }
    if (in) fclose(in);
    EXPECT(cases >= 20, "only %d cases", cases);
    printf("%s: %s: %d strings compared with the reference's ids, %d failures\n", failures ? "FAILED" : "passed", argv[1],
           cases, failures);
    llm_tokenizer_free(tok);
    llm_wordpiece_free(wp);
    tf_gguf_close(f);
    return failures ? 1 : 0;
}
