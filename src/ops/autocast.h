/* Mixed precision for the op library's public functions (amp.c): the
 * autocast lists and the macro a listed function starts with. */
#ifndef TF_OPS_AUTOCAST_H
#define TF_OPS_AUTOCAST_H

#include "engine.h"

/* Which of tensorframe.h's autocast lists a public function is on. */
typedef enum tf__autocast_list { TF__AUTOCAST_LOWER, TF__AUTOCAST_F32 } tf__autocast_list;
#define TF__AUTOCAST_MAX_ARGS 4
typedef struct tf__autocast {
    tf_status status;                              /* of the casts */
    int n_held;
    tf_tensor *held[TF__AUTOCAST_MAX_ARGS];        /* the converted copies */
} tf__autocast;
/* True when autocast applies to this call (on for the thread, and not
 * inside another listed function): the n tensors *args[i] point at (NULL
 * allowed) are replaced by converted copies where the list says so, and
 * the caller runs again with them, then returns tf__autocast_leave(ac, s).
 * A failed cast is in ac->status, args then unchanged. */
bool tf__autocast_enter(tf__autocast *ac, const char *fn, tf__autocast_list list, int n, const tf_tensor **args[]);
tf_status tf__autocast_leave(tf__autocast *ac, tf_status s);
/* The public function fn (returning through out, which may be NULL) runs
 * again on its converted inputs when autocast applies: put first in it. */
#define TF__AUTOCAST(list, fn, out, call, ...)                                                 \
    do {                                                                                       \
        tf__autocast ac_;                                                                      \
        const tf_tensor **args_[] = {__VA_ARGS__};                                             \
        if (tf__autocast_enter(&ac_, (fn), (list), (int)(sizeof args_ / sizeof *args_), args_)) { \
            if (ac_.status != TF_OK && (out)) *(out) = NULL;                                   \
            return tf__autocast_leave(&ac_, ac_.status == TF_OK ? (call) : ac_.status);        \
        }                                                                                      \
    } while (0)

#endif /* TF_OPS_AUTOCAST_H */
