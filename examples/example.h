/* What the examples share: stop with the library's message on any error. */
#ifndef TF_EXAMPLE_H
#define TF_EXAMPLE_H

#include <stdio.h>

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        tf_status s_ = (call);                                                                      \
        if (s_ != TF_OK) {                                                                          \
            fprintf(stderr, "%s failed: %s: %s\n", #call, tf_status_name(s_), tf_last_error());      \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

#endif
