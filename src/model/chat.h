/* Chat templates recognized from a GGUF's Jinja text and applied; see chat.c. */
#ifndef LLM_CHAT_H
#define LLM_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include <tensorframe/tensorframe.h>

typedef struct llm_chat_message {
    const char *role, *content;
} llm_chat_message;

/* "chatml, llama3, ..." */
const char *llm_chat_names(void);
/* The format of a template text, or the name itself when it is one;
 * TF_ERR_UNSUPPORTED for a template none of them matches. */
tf_status llm_chat_detect(const char *template_or_name, const char **name);
/* The conversation as the format writes it (*out malloc'ed). When
 * template_or_name is a name, model_template (may be NULL) is the text a
 * default system message is read from. */
tf_status llm_chat_apply(const char *template_or_name, const char *model_template, const llm_chat_message *m, size_t n,
                         bool add_assistant, char **out);

#endif
