/* What the examples share: the installed error idioms (tensorframe/check.h),
 * with the examples' short name for TF_CHECK. */
#ifndef TF_EXAMPLE_H
#define TF_EXAMPLE_H

#include <tensorframe/check.h>

#define CHECK(call) TF_CHECK(call)

#endif
