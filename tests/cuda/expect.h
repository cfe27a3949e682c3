/* EXPECT for the plain-C CUDA tests (the GPU machine has no cmocka): counts
 * checks and failures, prints one line a failed check. `extra` names what
 * to add to the line (tf_last_error() where the library was called). */
#ifndef TF_TEST_CUDA_EXPECT_H
#define TF_TEST_CUDA_EXPECT_H

#include <stdio.h>

static int failures, checks;

#ifndef EXPECT_EXTRA
#define EXPECT_EXTRA() ""
#endif

#define EXPECT(cond, ...)                                   \
    do {                                                    \
        checks++;                                           \
        if (!(cond)) {                                      \
            failures++;                                     \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
            printf(__VA_ARGS__);                            \
            printf("%s%s\n", *EXPECT_EXTRA() ? "  -- " : "", EXPECT_EXTRA()); \
        }                                                   \
    } while (0)

#endif
