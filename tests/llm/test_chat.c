/* Chat templates through tensorframe/model.h against each template's own
 * Jinja rendering (tests/llm/fixtures/chat/cases.txt, written by
 * scripts/llama-fixtures.sh --chat-fixtures with jinja2): the format is
 * recognized from the template's text and the conversation's text is
 * byte for byte the rendering. Also: an unknown template is an error that
 * names the known ones, and a name picks a format.
 * usage: test_chat CASES */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/model.h>

static int failures;
#define EXPECT(cond, ...)                                       \
    do {                                                        \
        if (!(cond)) {                                          \
            failures++;                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);         \
            printf(__VA_ARGS__);                                \
            printf(" [%s]\n", tf_model_last_error());           \
        }                                                       \
    } while (0)

/* Hex to a malloc'ed NUL-terminated string. */
static char *unhex(const char *h) {
    size_t n = strspn(h, "0123456789abcdef") / 2;
    char *s = malloc(n + 1);
    for (size_t i = 0; s && i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        s[i] = (char)v;
    }
    if (s) s[n] = 0;
    return s;
}

static char line[1 << 17];

static char *field(FILE *f, const char *key) {
    if (!fgets(line, sizeof line, f) || strncmp(line, key, strlen(key))) return NULL;
    return unhex(line + strlen(key) + 1);
}

int main(int argc, char **argv) {
    FILE *f = argc > 1 ? fopen(argv[1], "r") : NULL;
    if (!f) return fprintf(stderr, "usage: test_chat CASES\n"), 2;
    int cases = 0;
    char label[256], format[64];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "case %255s %63s", label, format) != 2) continue;
        char *tmpl = field(f, "template"), *expect = NULL;
        int n = 0;
        tf_chat_message msgs[8];
        char *contents[8] = {0}, roles[8][16];
        if (fgets(line, sizeof line, f)) sscanf(line, "messages %d", &n);
        for (int i = 0; i < n && i < 8; i++) {
            if (!fgets(line, sizeof line, f)) break;
            char hex[1 << 12];
            if (sscanf(line, "%15s %4095s", roles[i], hex) != 2) hex[0] = 0;
            contents[i] = unhex(hex);
            msgs[i] = (tf_chat_message){roles[i], contents[i]};
        }
        expect = field(f, "expect");
        const char *name = NULL;
        EXPECT(tmpl && tf_chat_template_detect(tmpl, &name) == TF_OK && !strcmp(name, format), "%s: detected %s, not %s",
               label, name ? name : "nothing", format);
        char *got = NULL;
        tf_status s = tmpl && expect ? tf_model_chat_apply(NULL, tmpl, msgs, (size_t)n, true, &got) : TF_ERR_FORMAT;
        EXPECT(s == TF_OK && !strcmp(got, expect), "%s: wrote\n---\n%s\n---\nthe template writes\n---\n%s\n---", label,
               got ? got : "(nothing)", expect ? expect : "?");
        cases++;
        free(got);
        free(tmpl);
        free(expect);
        for (int i = 0; i < 8; i++) free(contents[i]);
    }
    fclose(f);
    EXPECT(cases >= 12, "only %d cases", cases);

    /* an unknown template is refused with the list; a name picks a format */
    const char *name = NULL;
    tf_status s = tf_chat_template_detect("{{ messages | tojson }}", &name);
    EXPECT(s == TF_ERR_UNSUPPORTED && strstr(tf_model_last_error(), "chatml, llama3"), "unknown template: %s",
           tf_status_name(s));
    tf_chat_message hi = {"user", "Hi"};
    char *out = NULL;
    s = tf_model_chat_apply(NULL, "gemma", &hi, 1, true, &out);
    EXPECT(s == TF_OK && !strcmp(out, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"), "gemma by name");
    free(out);
    out = NULL;
    s = tf_model_chat_apply(NULL, NULL, &hi, 1, true, &out);
    EXPECT(s == TF_ERR_UNSUPPORTED && out == NULL, "no model, no template: %s", tf_status_name(s));
    tf_chat_message bad = {NULL, "x"};
    s = tf_model_chat_apply(NULL, "chatml", &bad, 1, true, &out);
    EXPECT(s == TF_ERR_INVALID_ARGUMENT && out == NULL, "a message without a role: %s", tf_status_name(s));
    printf("%s: %d templates' renderings matched, %d failures\n", failures ? "FAILED" : "passed", cases, failures);
    return failures ? 1 : 0;
}
