/* Error-handling idioms for code that calls tensorframe (header-only, C and
 * C++). Every tensorframe call returns a tf_status and, on failure, leaves
 * a message in tf_last_error() (thread-local) and its outputs NULL, so the
 * caller's choice is only where to go next:
 *
 *   TF_TRY(call)               in a function returning tf_status: return the
 *                              failure as it is (the message stays);
 *   TF_TRY_GOTO(s, call, lbl)  store the status in s and jump to a cleanup
 *                              label on failure (release what was made);
 *   TF_CHECK(call)             in main() and tools: print
 *                              "file:line: call: STATUS: message" to stderr
 *                              and return 1.
 *
 *   tf_status encoder_layer(const layer *L, const tf_tensor *x, tf_tensor **out) {
 *       tf_tensor *h = NULL, *a = NULL;
 *       tf_status s;
 *       TF_TRY_GOTO(s, tf_linear(x, L->w, L->b, &h), done);
 *       TF_TRY_GOTO(s, tf_gelu(h, &a), done);
 *       ...
 *   done:
 *       tf_tensor_release(h);
 *       tf_tensor_release(a);
 *       return s;
 *   }
 */
#ifndef TENSORFRAME_CHECK_H
#define TENSORFRAME_CHECK_H

#include <stdio.h>

#include <tensorframe/tensorframe.h>

#define TF_TRY(call)                                                                                  \
    do {                                                                                              \
        tf_status tf_try_status_ = (call);                                                            \
        if (tf_try_status_ != TF_OK) return tf_try_status_;                                           \
    } while (0)

#define TF_TRY_GOTO(status, call, label)                                                              \
    do {                                                                                              \
        if (((status) = (call)) != TF_OK) goto label;                                                 \
    } while (0)

#define TF_CHECK(call)                                                                                \
    do {                                                                                              \
        tf_status tf_check_status_ = (call);                                                          \
        if (tf_check_status_ != TF_OK) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,                         \
                    tf_status_name(tf_check_status_), tf_last_error());                               \
            return 1;                                                                                 \
        }                                                                                             \
    } while (0)

#endif /* TENSORFRAME_CHECK_H */
