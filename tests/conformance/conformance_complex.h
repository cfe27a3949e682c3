/* The complex dtypes' conformance cases on one device (conformance_complex.c):
 * adds to *passed and *failed, printing each failure. */
#ifndef CONFORMANCE_COMPLEX_H
#define CONFORMANCE_COMPLEX_H
#include <stdint.h>
#include <tensorframe/tensorframe.h>
void conformance_complex(tf_device *dev, uint64_t seed, int *passed, int *failed);
#endif
