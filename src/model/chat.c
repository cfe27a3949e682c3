/* Chat templates: the common formats a GGUF's tokenizer.chat_template
 * (Jinja) writes, recognized as llama.cpp recognizes them
 * (llm_chat_detect_template) and applied without a Jinja engine. What
 * each writes is checked against the template's own Jinja rendering in
 * tests/llm/fixtures/chat. */
#define _POSIX_C_SOURCE 200809L   /* strdup */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"   /* llm_fail */

static const char *const names[] = {"chatml", "llama3", "gemma", "phi3", "zephyr", "mistral-v1",
                                    "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama2", "llama2-sys"};

const char *llm_chat_names(void) {
    return "chatml, llama3, gemma, phi3, zephyr, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, llama2, llama2-sys";
}

static bool contains(const char *s, const char *what) { return strstr(s, what) != NULL; }

/* A template's format from its text, in llama.cpp's order of tests. */
static const char *detect(const char *t) {
    if (contains(t, "<|im_start|>")) return contains(t, "<|im_sep|>") || contains(t, "<end_of_utterance>") ? NULL : "chatml";
    if (!strncmp(t, "mistral", 7) || contains(t, "[INST]")) {
        if (contains(t, "[SYSTEM_PROMPT]")) return "mistral-v7";
        if (contains(t, "' [INST] ' + system_message") || contains(t, "[AVAILABLE_TOOLS]"))
            return contains(t, " [INST]") ? "mistral-v1" : contains(t, "\"[INST]\"") ? "mistral-v3-tekken" : "mistral-v3";
        if (contains(t, "content.strip()") || contains(t, "bos_token + '[INST]")) return NULL;   /* variants not written here */
        return contains(t, "<<SYS>>") ? "llama2-sys" : "llama2";
    }
    if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return "phi3";
    /* Zephyr's turns end in <|endoftext|>; llama.cpp takes a template that
     * also names <|assistant|> for Falcon 3 or GLM-Edge, which end
     * theirs otherwise (neither is written here). */
    if (contains(t, "<|user|>") && contains(t, "<|endoftext|>")) return "zephyr";
    if (contains(t, "<|assistant|>") && contains(t, "<|user|>")) return NULL;
    if (contains(t, "<start_of_turn>")) return "gemma";
    if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return "llama3";
    return NULL;
}

tf_status llm_chat_detect(const char *template_or_name, const char **name) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(template_or_name, names[i])) return *name = names[i], TF_OK;
    if (!(*name = detect(template_or_name)))
        return llm_fail(TF_ERR_UNSUPPORTED, "chat: the template is none of the formats known here (%s); name one",
                        llm_chat_names());
    return TF_OK;
}

/* ---- a growing string ------------------------------------------------------- */

typedef struct text {
    char *s;
    size_t n, cap;
    bool failed;
} text;

static void put_n(text *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *grown = realloc(t->s, cap);
        if (!grown) {
            t->failed = true;
            return;
        }
        t->s = grown;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

static void put(text *t, const char *s) { put_n(t, s, strlen(s)); }

/* s without leading and trailing whitespace, as Jinja's trim. */
static void put_trimmed(text *t, const char *s) {
    size_t n = strlen(s);
    while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    put_n(t, s, n);
}

/* ---- the formats ---------------------------------------------------------------- */

/* ChatML writes the template's own default system message (SmolLM2's,
 * Qwen's) when the conversation has none: the text of its literal
 * "<|im_start|>system\n...<|im_end|>" block. */
static void chatml_default_system(text *t, const char *tmpl) {
    static const char open[] = "<|im_start|>system";
    static const char *const newlines[] = {"\n", "\\n"};   /* a real newline, or Jinja's escape */
    for (const char *at = tmpl ? strstr(tmpl, open) : NULL; at; at = strstr(at + 1, open))
        for (int i = 0; i < 2; i++) {
            const char *from = at + sizeof open - 1;
            if (strncmp(from, newlines[i], strlen(newlines[i]))) continue;
            from += strlen(newlines[i]);
            const char *end = strstr(from, "<|im_end|>");
            /* a literal message: no quote or Jinja between the markers */
            if (!end || end == from || memchr(from, '\'', (size_t)(end - from)) || memchr(from, '{', (size_t)(end - from)))
                continue;
            put(t, "<|im_start|>system\n");
            put_n(t, from, (size_t)(end - from));
            put(t, "<|im_end|>\n");
            return;
        }
}

static void chatml(text *t, const char *tmpl, const llm_chat_message *m, size_t n, bool add) {
    if (n == 0 || strcmp(m[0].role, "system")) chatml_default_system(t, tmpl);
    for (size_t i = 0; i < n; i++) {
        put(t, "<|im_start|>");
        put(t, m[i].role);
        put(t, "\n");
        put(t, m[i].content);
        put(t, "<|im_end|>\n");
    }
    if (add) put(t, "<|im_start|>assistant\n");
}

/* Llama 3.1 and later write a system turn whatever the conversation,
 * opening with the knowledge cutoff and a date ("26 Jul 2024", what their
 * templates write without strftime_now), then the system message. */
static void llama3(text *t, const char *tmpl, const llm_chat_message *m, size_t n, bool add) {
    size_t first = 0;
    if (tmpl && strstr(tmpl, "Cutting Knowledge Date")) {
        put(t, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
               "Today Date: 26 Jul 2024\n\n");
        if (n > 0 && !strcmp(m[0].role, "system")) put_trimmed(t, m[first++].content);
        put(t, "<|eot_id|>");
    }
    for (size_t i = first; i < n; i++) {
        put(t, "<|start_header_id|>");
        put(t, m[i].role);
        put(t, "<|end_header_id|>\n\n");
        put_trimmed(t, m[i].content);
        put(t, "<|eot_id|>");
    }
    if (add) put(t, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma has no system role: a system message goes before the next user turn. */
static void gemma(text *t, const llm_chat_message *m, size_t n, bool add) {
    text system = {0};
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
            put_trimmed(&system, m[i].content);
            continue;
        }
        bool model = !strcmp(m[i].role, "assistant");
        put(t, "<start_of_turn>");
        put(t, model ? "model" : m[i].role);
        put(t, "\n");
        if (system.n && !model) {
            put(t, system.s);
            put(t, "\n\n");
            system.n = 0;
        }
        put_trimmed(t, m[i].content);
        put(t, "<end_of_turn>\n");
    }
    t->failed = t->failed || system.failed;
    free(system.s);
    if (add) put(t, "<start_of_turn>model\n");
}

/* Phi-3 and Zephyr: <|role|>\ncontent then an end marker. */
static void tagged(text *t, const llm_chat_message *m, size_t n, bool add, const char *end) {
    for (size_t i = 0; i < n; i++) {
        put(t, "<|");
        put(t, m[i].role);
        put(t, "|>\n");
        put(t, m[i].content);
        put(t, end);
    }
    if (add) put(t, "<|assistant|>\n");
}

static void mistral_v7(text *t, const llm_chat_message *m, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role;
        put(t, !strcmp(r, "system") ? "[SYSTEM_PROMPT] " : !strcmp(r, "user") ? "[INST] " : " ");
        put(t, m[i].content);
        put(t, !strcmp(r, "system") ? "[/SYSTEM_PROMPT]" : !strcmp(r, "user") ? "[/INST]" : "</s>");
    }
}

/* Mistral v1 writes a system message at the start of the first turn;
 * v3 and v3-tekken (Mistral Nemo, Small) before the last user message,
 * as their templates do, and nowhere when the conversation ends otherwise. */
static void mistral(text *t, const llm_chat_message *m, size_t n, const char *name) {
    bool v1 = !strcmp(name, "mistral-v1"), tekken = !strcmp(name, "mistral-v3-tekken"), v3 = !strcmp(name, "mistral-v3");
    const char *lead = v1 ? " " : "", *trail = tekken ? "" : " ";
    const char *system = NULL;
    for (size_t i = 0; !v1 && i < n; i++)
        if (!strcmp(m[i].role, "system")) system = m[i].content;
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        bool is_system = !strcmp(m[i].role, "system");
        if (is_system && !v1) continue;
        if (!inside) {
            put(t, lead);
            put(t, "[INST]");
            put(t, trail);
            inside = true;
        }
        if (is_system) {
            put(t, m[i].content);
            put(t, "\n\n");
        } else if (!strcmp(m[i].role, "user")) {
            if (system && i == n - 1) {
                put(t, system);
                put(t, "\n\n");
            }
            put(t, m[i].content);
            put(t, lead);
            put(t, "[/INST]");
        } else {
            put(t, trail);
            if (v3) put_trimmed(t, m[i].content);
            else put(t, m[i].content);
            put(t, "</s>");
            inside = false;
        }
    }
}

static void llama2(text *t, const llm_chat_message *m, size_t n, bool with_system) {
    bool inside = true;
    put(t, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            inside = true;
            put(t, "[INST] ");
        }
        if (!strcmp(m[i].role, "system")) {
            put(t, with_system ? "<<SYS>>\n" : "");
            put(t, m[i].content);
            put(t, with_system ? "\n<</SYS>>\n\n" : "\n");
        } else if (!strcmp(m[i].role, "user")) {
            put(t, m[i].content);
            put(t, " [/INST]");
        } else {
            put(t, m[i].content);
            put(t, "</s>");
            inside = false;
        }
    }
}

tf_status llm_chat_apply(const char *template_or_name, const char *model_template, const llm_chat_message *m, size_t n,
                         bool add_assistant, char **out) {
    *out = NULL;
    const char *name;
    tf_status s = llm_chat_detect(template_or_name, &name);
    if (s != TF_OK) return s;
    for (size_t i = 0; i < n; i++)
        if (!m[i].role || !m[i].content) return llm_fail(TF_ERR_INVALID_ARGUMENT, "chat: message %zu has no role or content", i);
    /* A template's own text is where its default system message is read. */
    const char *tmpl = strcmp(template_or_name, name) ? template_or_name : model_template;
    text t = {0};
    put(&t, "");
    if (!strcmp(name, "chatml")) chatml(&t, tmpl, m, n, add_assistant);
    else if (!strcmp(name, "llama3")) llama3(&t, tmpl, m, n, add_assistant);
    else if (!strcmp(name, "gemma")) gemma(&t, m, n, add_assistant);
    else if (!strcmp(name, "phi3")) tagged(&t, m, n, add_assistant, "<|end|>\n");
    else if (!strcmp(name, "zephyr")) tagged(&t, m, n, add_assistant, "<|endoftext|>\n");
    else if (!strcmp(name, "mistral-v7")) mistral_v7(&t, m, n);
    else if (!strncmp(name, "mistral", 7)) mistral(&t, m, n, name);
    else llama2(&t, m, n, !strcmp(name, "llama2-sys"));
    if (t.failed) {
        free(t.s);
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "chat: out of memory");
    }
    *out = t.s;
    return TF_OK;
}
