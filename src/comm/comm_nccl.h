/* NCCL for the collectives of tensors on CUDA devices (comm_mpi.c routes
 * them here). NCCL and the CUDA driver are loaded at run time (dlopen), so
 * libtensorframe_mpi runs on machines without either; the calls are
 * compiled against nccl.h and cuda.h when CMake finds them (TF_HAVE_NCCL),
 * and every entry point answers "unavailable" otherwise. */
#ifndef TF_COMM_NCCL_H
#define TF_COMM_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "tensorframe/comm.h"

enum { TF_NCCL_ID_BYTES = 128 };

typedef struct tf_nccl tf_nccl;             /* one NCCL communicator, bound to one CUDA device */

/* NCCL's version code (22809 for 2.28.9) once it loads; 0 when it does not
 * (then tf__nccl_why says why). Loads once; thread safe. */
int tf__nccl_version(void);
const char *tf__nccl_why(void);
/* Loaded, with a CUDA driver that initialized. */
bool tf__nccl_usable(void);

/* A unique id made on one rank and handed to every rank (over MPI). */
tf_status tf__nccl_unique_id(unsigned char id[TF_NCCL_ID_BYTES]);
/* Join the NCCL communicator of `size` ranks that `id` names, on CUDA
 * device `ordinal` (collective: every rank calls it). */
tf_status tf__nccl_create(const unsigned char id[TF_NCCL_ID_BYTES], int rank, int size, int ordinal, tf_nccl **out);
int tf__nccl_device(const tf_nccl *n);
/* Abort (after a timeout: pending work is dropped) or destroy. */
void tf__nccl_destroy(tf_nccl *n, bool abort);

/* The collectives, queued on `stream` (a cudaStream_t); n counts elements
 * of dt per rank. */
typedef enum tf_nccl_kind { TF_NCCL_ALL_REDUCE, TF_NCCL_ALL_GATHER, TF_NCCL_REDUCE_SCATTER, TF_NCCL_BROADCAST,
                            TF_NCCL_SEND, TF_NCCL_RECV } tf_nccl_kind;
typedef struct tf_nccl_call {
    tf_nccl_kind kind;
    const void *send;
    void *recv;
    size_t count;
    tf_dtype dtype;
    tf_reduce_op op;                         /* reductions */
    int peer;                                /* broadcast: the root; send/recv: the other rank */
} tf_nccl_call;
tf_status tf__nccl_enqueue(tf_nccl *n, const tf_nccl_call *call, void *stream);
/* Wait until the work queued on `stream` is done, at most timeout_s (0:
 * for ever): TF_ERR_TIMEOUT then, NCCL's asynchronous errors too. */
tf_status tf__nccl_wait(tf_nccl *n, void *stream, double timeout_s);

#endif
