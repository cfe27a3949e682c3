/* tensorframe collectives: tensors reduced, gathered, scattered and sent
 * between processes over MPI (libtensorframe_mpi, built when CMake finds
 * MPI; the core library keeps no MPI dependency).
 *
 * Every call is collective over the communicator's ranks except send and
 * recv, and blocks until this rank's part is done. Tensors may live on any
 * device: host memory is handed to MPI as it is (a contiguous CPU tensor
 * without a copy), other devices' tensors go through a contiguous host copy
 * and the result is written back to the device.
 *
 * Before moving data, the ranks agree on dtype and shape (one small
 * all-reduce): a mismatch is TF_ERR_SHAPE (or TF_ERR_DTYPE) on every rank,
 * never a hang or a torn buffer. MPI errors return (MPI_ERRORS_RETURN on
 * the communicator) as TF_ERR_BACKEND with MPI's message.
 *
 * Timeouts: a call waits at most the communicator's timeout (600 s, or
 * TF_COMM_TIMEOUT seconds from the environment, or tf_comm_set_timeout;
 * 0 waits for ever) for the other ranks, then returns TF_ERR_TIMEOUT: a
 * rank that died, hangs or skipped the call ends as an error on the
 * others, not a hang. The communicator is then unusable (every call
 * returns TF_ERR_BACKEND): MPI may still complete the abandoned operation
 * if the late rank arrives, so its buffers are kept until then, and MPI
 * is not finalized while it is pending. End the job: tf_comm_abort.
 *
 * Reductions: sum, max, min on every numeric dtype (f16 and bf16 are
 * combined in f32 and rounded once per step of MPI's reduction tree); mean
 * is the sum divided by the size, for float dtypes. Integer sums wrap as
 * in C. bool takes max (any) and min (all).
 *
 *   tf_comm *c;  tf_comm_init(&c);                       // under mpirun
 *   tf_all_reduce(c, grad, TF_REDUCE_MEAN);             // data parallel
 *   tf_comm_destroy(c);
 */
#ifndef TENSORFRAME_COMM_H
#define TENSORFRAME_COMM_H

#include "tensorframe/tensorframe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tf_comm tf_comm;

typedef enum tf_reduce_op {
    TF_REDUCE_SUM = 0,
    TF_REDUCE_MAX = 1,
    TF_REDUCE_MIN = 2,
    TF_REDUCE_MEAN = 3
} tf_reduce_op;

/* A communicator over every process mpirun started (MPI_COMM_WORLD,
 * duplicated): MPI is initialized here if the program has not done it,
 * and finalized when the last communicator made this way is destroyed. */
TF_API tf_status tf_comm_init(tf_comm **out);
#ifdef MPI_VERSION
/* A communicator over the program's own MPI communicator (duplicated, so
 * tensorframe's messages never mix with the program's). */
TF_API tf_status tf_comm_init_mpi(MPI_Comm comm, tf_comm **out);
#endif
TF_API void tf_comm_destroy(tf_comm *c);
TF_API int tf_comm_rank(const tf_comm *c);   /* -1 for NULL */
TF_API int tf_comm_size(const tf_comm *c);   /* -1 for NULL */
/* How long a call waits for the other ranks, in seconds; 0: no limit.
 * TF_ERR_INVALID_ARGUMENT for a negative or NaN value. */
TF_API tf_status tf_comm_set_timeout(tf_comm *c, double seconds);
TF_API double tf_comm_timeout(const tf_comm *c);   /* -1 for NULL */
/* Order the collectives with the work of one device (tensors elsewhere
 * are TF_ERR_DEVICE_MISMATCH): each call queues on `stream` after the work
 * queued there before it, and the work queued after it sees its result.
 * Tensors that go through NCCL (CUDA) are queued without the host waiting
 * (the call returns at once; tf_stream_synchronize or an event waits);
 * tensors that go through MPI on host memory still block the host for the
 * exchange, their staging and write-back queued on `stream`. NULL (the
 * default) makes every call blocking again, on the tensor's device's
 * current stream. The communicator does not own the stream. */
TF_API tf_status tf_comm_set_stream(tf_comm *c, tf_stream *stream);
/* NCCL's version code (22809 for 2.28.9) when libtensorframe_mpi was
 * built with NCCL and libnccl.so.2 (or the file TF_NCCL_LIBRARY names)
 * loads with every entry point used; 0 otherwise. CUDA tensors go through
 * NCCL when it loads and the CUDA driver initializes (TF_COMM_NCCL=0 turns
 * it off), else through MPI: on device memory where MPI is CUDA-aware
 * (MPIX_Query_cuda_support), else staged through host memory. */
TF_API int tf_comm_nccl_version(void);
/* End the whole job (MPI_Abort: every rank of every communicator exits
 * with `code`): what a rank that got TF_ERR_TIMEOUT should do, so the
 * late rank - which may then wait in the data exchange - ends too. Does
 * not return. */
TF_API void tf_comm_abort(tf_comm *c, int code);

/* x becomes the reduction of every rank's x (in place). */
TF_API tf_status tf_all_reduce(tf_comm *c, tf_tensor *x, tf_reduce_op op);
/* The same into a new tensor on x's device; x unchanged. */
TF_API tf_status tf_all_reduce_to(tf_comm *c, const tf_tensor *x, tf_reduce_op op, tf_tensor **out);
/* [size, ...x's shape]: every rank's x stacked in rank order. */
TF_API tf_status tf_all_gather(tf_comm *c, const tf_tensor *x, tf_tensor **out);
/* x's first axis, a multiple of size, reduced across ranks and split:
 * rank r gets rows [r * n / size, (r + 1) * n / size). */
TF_API tf_status tf_reduce_scatter(tf_comm *c, const tf_tensor *x, tf_reduce_op op, tf_tensor **out);
/* x takes root's values on every rank (in place). */
TF_API tf_status tf_broadcast(tf_comm *c, tf_tensor *x, int root);
/* Point to point: x's elements to rank `dest`; recv writes them into x,
 * whose dtype and element count must match the message (TF_ERR_SHAPE). */
TF_API tf_status tf_send(tf_comm *c, const tf_tensor *x, int dest, int tag);
TF_API tf_status tf_recv(tf_comm *c, tf_tensor *x, int source, int tag);

#ifdef __cplusplus
}
#endif
#endif /* TENSORFRAME_COMM_H */
