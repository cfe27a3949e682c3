/* tensorframe — a C11 tensor library with pluggable compute backends.
 *
 * Conventions (see docs/ARCHITECTURE.md):
 *  - Every fallible function returns tf_status (TF_OK == 0, errors negative),
 *    takes its result through an `out` pointer last and leaves *out NULL on
 *    failure. tf_last_error() gives the calling thread's detailed message.
 *  - Bad input is an error, never an abort, and leaves every tensor intact.
 *  - Tensors are reference counted; views share storage with their base.
 *  - The library initializes itself on first use; tf_shutdown() frees all.
 *
 * Thread safety: unless a function says otherwise, it is safe to call from
 * several threads at once on different tensors. Reference counting is
 * atomic, so a tensor may be shared read-only between threads.
 */
#ifndef TENSORFRAME_H
#define TENSORFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorframe/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TF_STATIC_DEFINE) || !defined(__GNUC__)
#define TF_API
#else
#define TF_API __attribute__((visibility("default")))
#endif

#define TF_VERSION_MAJOR 0
#define TF_VERSION_MINOR 1
#define TF_VERSION_PATCH 0

/* Most dimensions a tensor may have: NumPy 1's limit, far above what
 * programs use (the array API's tests draw up to 9 and more; a tensordot
 * adds its operands' axes). The plugin ABI's descriptors hold this many
 * (SDK 3.0); kernels with fixed geometry (the GPU backends': 8) decline
 * more and the core runs such ops on the CPU. */
#define TF_MAX_DIMS 32
/* Pass as `axis` to reduce over every axis. */
#define TF_ALL_AXES (-1000)

/* ------------------------------------------------------------------------ */
/* Status codes: one list makes the enum, the names and the messages.      */

#define TF_STATUS_LIST(X)                                                        \
    X(OK,                    0,   "success")                                     \
    X(ERR_INVALID_ARGUMENT,  -1,  "invalid argument")                            \
    X(ERR_NULL_ARGUMENT,     -2,  "a required pointer argument is NULL")         \
    X(ERR_UNKNOWN_DEVICE,    -3,  "unknown device")                              \
    X(ERR_DTYPE,             -4,  "unsupported or mismatched dtype")             \
    X(ERR_SHAPE,             -5,  "incompatible shapes")                         \
    X(ERR_AXIS,              -6,  "axis out of range")                           \
    X(ERR_SIZE,              -7,  "negative or overflowing size")                \
    X(ERR_TOO_MANY_DIMS,     -8,  "too many dimensions")                         \
    X(ERR_BUFFER_TOO_SMALL,  -9,  "destination buffer too small")                \
    X(ERR_OUT_OF_MEMORY,     -10, "out of memory")                               \
    X(ERR_DEVICE_MISMATCH,   -11, "inputs live on different devices")            \
    X(ERR_UNSUPPORTED,       -12, "operation not supported")                     \
    X(ERR_NO_DEVICE,         -13, "no device satisfies the request")             \
    X(ERR_PLUGIN,            -14, "plugin could not be loaded")                  \
    X(ERR_ABI_MISMATCH,      -15, "backend ABI version mismatch")                \
    X(ERR_BACKEND,           -16, "backend failure")                             \
    X(ERR_DEVICE_LOST,       -17, "device lost")                                 \
    X(ERR_ALREADY_EXISTS,    -18, "already exists")                              \
    X(ERR_INDEX,             -19, "index out of range")                          \
    X(ERR_IO,                -20, "file could not be read or written")           \
    X(ERR_FORMAT,            -21, "malformed file")                              \
    X(ERR_TIMEOUT,           -22, "timed out")                                   \
    X(ERR_NOT_FINITE,        -23, "a result is not finite (NaN or infinity)")

typedef enum tf_status {
#define TF__STATUS_ENUM(name, code, msg) TF_##name = code,
    TF_STATUS_LIST(TF__STATUS_ENUM)
#undef TF__STATUS_ENUM
} tf_status;

/* "TF_ERR_SHAPE"; "TF_UNKNOWN_STATUS" for a value not in the list. */
TF_API const char *tf_status_name(tf_status s);
/* "incompatible shapes": the generic description of the code. */
TF_API const char *tf_status_string(tf_status s);
/* The calling thread's detailed message for its last failed call
 * ("tf_add: shapes [2,3] and [4] do not broadcast"); "" if none. */
TF_API const char *tf_last_error(void);

/* ------------------------------------------------------------------------ */
/* Dtypes                                                                   */

/* X(ENUM, name, size in bytes, is_float, is_integer) */
#define TF_DTYPE_LIST(X)        \
    X(F32,  f32,  4, 1, 0)      \
    X(F64,  f64,  8, 1, 0)      \
    X(F16,  f16,  2, 1, 0)      \
    X(BF16, bf16, 2, 1, 0)      \
    X(I8,   i8,   1, 0, 1)      \
    X(I32,  i32,  4, 0, 1)      \
    X(I64,  i64,  8, 0, 1)      \
    X(U8,   u8,   1, 0, 1)      \
    X(BOOL, bool, 1, 0, 0)

/* Block-quantized dtypes, ggml's layouts byte for byte (what GGUF files
 * hold): elements are stored in blocks along the last axis, each block a
 * few scales and packed integers. X(ENUM, name, elements per block, bytes
 * per block). Their values follow the element dtypes' (ABI: append only).
 *   Q4_0  x = d * (q - 8)              4-bit q, one f16 scale per 32
 *   Q4_1  x = d * q + m                4-bit q, f16 scale and min per 32
 *   Q8_0  x = d * q                    8-bit q, one f16 scale per 32
 *   Q4_K  x = d*sc * q - dmin*m        256 = 8 sub-blocks of 32, 6-bit sc and m
 *   Q6_K  x = d*sc * (q - 32)          256 = 16 sub-blocks of 16, 8-bit sc
 *   Q5_0  x = d * (q - 16)             5-bit q, one f16 scale per 32
 *   Q5_1  x = d * q + m                5-bit q, f16 scale and min per 32
 *   Q2_K  x = d*sc * q - dmin*m        256 = 16 sub-blocks of 16, 4-bit sc and m, 2-bit q
 *   Q3_K  x = d*sc * (q - 4)           256 = 16 sub-blocks of 16, 6-bit signed sc, 3-bit q
 *   Q5_K  x = d*sc * q - dmin*m        256 = 8 sub-blocks of 32 as Q4_K, 5-bit q
 *   IQ4_NL x = d * kv[q]               4-bit index into a 16-entry non-linear codebook, per 32
 *   IQ4_XS x = d*sc * kv[q]            256 = 8 sub-blocks of 32, 6-bit signed sc, IQ4_NL's codebook
 * A block-quantized tensor's last axis is a whole number of blocks and is
 * never split or strided: views may pick rows (slices, selects and
 * reshapes that keep the last axis), not columns. Ops take them where they
 * make sense: tf_cast both ways (quantizing from a float dtype), tf_gemm /
 * tf_matmul_quantized as the weight, tf_embedding / tf_index_select of
 * rows, moves between devices; any other op answers TF_ERR_DTYPE. */
#define TF_QDTYPE_LIST(X)       \
    X(Q4_0, q4_0,  32,  18)     \
    X(Q4_1, q4_1,  32,  20)     \
    X(Q8_0, q8_0,  32,  34)     \
    X(Q4_K, q4_k, 256, 144)     \
    X(Q6_K, q6_k, 256, 210)     \
    X(Q5_0, q5_0,  32,  22)     \
    X(Q5_1, q5_1,  32,  24)     \
    X(Q2_K, q2_k, 256,  84)     \
    X(Q3_K, q3_k, 256, 110)     \
    X(Q5_K, q5_k, 256, 176)     \
    X(IQ4_NL, iq4_nl, 32, 18)   \
    X(IQ4_XS, iq4_xs, 256, 136)

/* Complex dtypes: X(ENUM, name, size in bytes, the dtype of each part).
 * Interleaved (real, imaginary) pairs, C99's float complex and double
 * complex, NumPy's complex64 and complex128 byte for byte. Their values
 * follow the quantized dtypes' (ABI: append only). They are neither float
 * nor integer: tf_dtype_is_complex. Ops that take them (tf_op_accepts
 * says which): arithmetic, the unary math of the array API (exp, log,
 * sqrt, the trigonometric and hyperbolic functions and their inverses),
 * conj/real/imag/abs, eq/ne, isnan/isinf, logical ops, where, sum, prod,
 * mean, matmul, gemm, casts both ways (to a real dtype keeps the real
 * part, as NumPy and PyTorch do), picks, triangles and every view and
 * composite. The CPU computes them; a device whose kernels decline them
 * (every GPU backend today) stores them and the core runs their ops on the
 * CPU (the mixed-device fallback). */
#define TF_CDTYPE_LIST(X)       \
    X(C64,  c64,   8, F32)      \
    X(C128, c128, 16, F64)

typedef enum tf_dtype {
#define TF__DTYPE_ENUM(E, n, sz, fl, in) TF_##E,
    TF_DTYPE_LIST(TF__DTYPE_ENUM)
#undef TF__DTYPE_ENUM
#define TF__QDTYPE_ENUM(E, n, blk, bytes) TF_##E,
    TF_QDTYPE_LIST(TF__QDTYPE_ENUM)
#undef TF__QDTYPE_ENUM
#define TF__CDTYPE_ENUM(E, n, sz, part) TF_##E,
    TF_CDTYPE_LIST(TF__CDTYPE_ENUM)
#undef TF__CDTYPE_ENUM
    TF_DTYPE_COUNT
} tf_dtype;

TF_API const char *tf_dtype_name(tf_dtype dt);      /* "f32"; "?" if invalid */
/* Bytes per element; for a block-quantized dtype bytes per block (ggml's
 * convention), so bytes = elements / tf_dtype_block_size * tf_dtype_size
 * for every dtype. 0 if invalid. */
TF_API size_t tf_dtype_size(tf_dtype dt);
/* Elements per block: 1 for element dtypes; 0 if invalid. */
TF_API size_t tf_dtype_block_size(tf_dtype dt);
TF_API bool tf_dtype_is_quantized(tf_dtype dt);     /* a block-quantized dtype */
TF_API bool tf_dtype_is_float(tf_dtype dt);
TF_API bool tf_dtype_is_integer(tf_dtype dt);       /* bool is not an integer */
TF_API bool tf_dtype_is_complex(tf_dtype dt);       /* c64, c128 */
/* The dtype of a complex dtype's parts (c64 -> f32, c128 -> f64), the
 * complex dtype with parts of a real one (f64 -> c128; f32, f16, bf16 and
 * the integers -> c64), each dt itself where it has none (bool, quantized,
 * and the complex ones for tf_dtype_to_complex). TF_DTYPE_COUNT if invalid. */
TF_API tf_dtype tf_dtype_to_real(tf_dtype dt);
TF_API tf_dtype tf_dtype_to_complex(tf_dtype dt);
/* Type promotion for binary ops (PyTorch's rule, no value-based casting):
 * bool < integers < floats < complex by category; within a category the
 * wider type; u8 with i8 gives i32 (there is no i16); f16 with bf16 gives
 * f32; an integer with a float gives that float; a complex dtype with a
 * real one gives the complex dtype whose parts hold both (c64 with f64
 * gives c128, as the array API and NumPy say). Returns TF_ERR_DTYPE if
 * invalid. */
TF_API tf_status tf_promote_types(tf_dtype a, tf_dtype b, tf_dtype *out);

/* ------------------------------------------------------------------------ */
/* Devices                                                                  */

typedef struct tf_device tf_device;
typedef struct tf_tensor tf_tensor;

typedef enum tf_device_type {
    TF_DEVICE_TYPE_CPU = 0,
    TF_DEVICE_TYPE_GPU = 1,
    TF_DEVICE_TYPE_INTEGRATED_GPU = 2,
    TF_DEVICE_TYPE_ACCELERATOR = 3
} tf_device_type;

/* What a device can do; filled from the backend, never guessed. */
typedef struct tf_device_caps {
    uint32_t dtypes;          /* bit (1u << dtype) for each dtype it stores */
    bool async;               /* ops return before the work is done */
    bool pinned_host_memory;  /* page-locked host staging buffers */
    bool unified_memory;      /* device memory is host-addressable */
    bool emulated;            /* a GPU API running on the CPU (PoCL, lavapipe) */
    bool tensor_cores;        /* matrix units for f16/bf16 (and TF32) GEMM */
} tf_device_caps;

typedef struct tf_device_props {
    char name[64];            /* "opencl:0" */
    char backend[32];         /* "opencl" */
    char description[256];    /* driver's words: "pthread-AMD EPYC ..." */
    tf_device_type type;
    uint64_t memory_total;    /* bytes, from the OS or driver */
    uint64_t memory_free;     /* bytes, read at the call */
    tf_device_caps caps;
} tf_device_props;

/* Resolve a device spec: "auto", "cpu", "cpu:0", "opencl", "opencl:1",
 * "cuda:0", "mybackend:0". Unknown specs give TF_ERR_UNKNOWN_DEVICE with
 * the list of devices present. Devices live until tf_shutdown(). */
TF_API tf_status tf_device_get(const char *spec, tf_device **out);
/* The best device by priority with at least `min_free_bytes` free now.
 * TF_ERR_NO_DEVICE, naming what each device has, if none qualifies. */
TF_API tf_status tf_device_get_with_memory(uint64_t min_free_bytes, tf_device **out);
TF_API int tf_device_count(void);
TF_API tf_device *tf_device_at(int i);              /* NULL if out of range */
TF_API const char *tf_device_name(const tf_device *d);
TF_API tf_status tf_device_get_props(const tf_device *d, tf_device_props *out);
/* What a device's hardware and driver allow (ToRSh's capabilities), read
 * from the driver; 0 where the driver does not say or the notion does not
 * apply (work-groups on the CPU).
 *   CPU     compute units = cores the process may use; subgroup = the SIMD
 *           width in f32 lanes of the kernels in use; caches from sysfs.
 *   OpenCL  clGetDeviceInfo: MAX_MEM_ALLOC_SIZE, MAX_COMPUTE_UNITS, work-group
 *           limits, LOCAL_MEM_SIZE, GLOBAL_MEM_CACHE_SIZE as the last level.
 *   WebGPU  the adapter's limits (no compute units or caches in the API).
 *   CUDA    cudaDeviceProp. */
typedef struct tf_device_limits {
    uint64_t max_buffer_bytes;        /* largest single allocation */
    uint64_t max_binding_bytes;       /* largest range one kernel argument binds */
    uint32_t compute_units;           /* cores, CUs, SMs */
    uint32_t max_work_group_size;     /* work-items (threads) per work-group */
    uint32_t max_work_group_dims[3];
    uint32_t subgroup_size;           /* warp, wavefront, SIMD width */
    uint64_t shared_memory_bytes;     /* local (shared) memory per work-group */
    uint64_t cache_bytes[3];          /* L1 (per unit), L2, L3 */
    uint32_t clock_mhz;
} tf_device_limits;
/* How to use a device well (ToRSh's performance hints). */
typedef struct tf_device_hints {
    uint32_t alignment;               /* host buffers aligned to this move fastest (bytes) */
    uint32_t work_group_size;         /* for a 1-d kernel; 0 on the CPU */
    uint32_t vector_width_f32;        /* f32 lanes per vector operation */
    bool async_helps;                 /* queue work and read later: host and device overlap */
} tf_device_hints;
/* Either pointer may be NULL. */
TF_API tf_status tf_device_get_limits(const tf_device *d, tf_device_limits *limits, tf_device_hints *hints);

/* Wait for all work queued on the device: its default stream and every
 * stream made on it. */
TF_API tf_status tf_device_synchronize(tf_device *d);

/* Streams and events (CUDA's model, for every device).
 *
 * A stream is an in-order queue of work on one device. Every device has a
 * default stream; tf_stream_create makes more. Each thread has a current
 * stream per device (at first the default): every op, copy and read on
 * that device from that thread is queued on it. Work on two streams is not
 * ordered unless an event orders it:
 *
 *   tf_stream *side;  tf_event *ready;
 *   tf_stream_create(dev, &side);  tf_event_create(0, &ready);
 *   tf_stream_set_current(side);   y = f(x) ...   tf_event_record(ready, side);
 *   tf_stream_set_current(tf_stream_default(dev));
 *   tf_stream_wait_event(tf_stream_default(dev), ready);   then use y
 *
 * What a stream is on each device:
 *   CPU     the default stream runs each op on the calling thread before the
 *           call returns (as ever); a made stream is a worker thread that
 *           runs its queue in order, so host code overlaps CPU kernels.
 *   OpenCL  the default stream is the device's queue; a made stream is
 *           another in-order command queue on the same context.
 *   CUDA    cudaStream_t (non-blocking), events are cudaEvent_t.
 *   Others  a backend without streams of its own (WebGPU) gives streams
 *           that share its one in-order queue: correct, not concurrent;
 *           an event recorded there waits for the device on the host.
 *
 * Rules:
 *  - Reads into host memory (tf_tensor_read, tf_tensor_to the CPU from a
 *    device) wait for the current stream's work, as PyTorch's
 *    .cpu() does; tf_tensor_read_async does not.
 *  - A tensor made on one stream and used on another needs an event (or a
 *    synchronize) between them; the library does not track uses.
 *  - Memory freed while other streams of its device may still use it is
 *    reused only after all of them have passed that point (the library
 *    records an event on each): releasing a tensor early is safe.
 *  - An error inside queued work is returned by the next synchronize of
 *    that stream (or of its device) and then cleared.
 *  - Streams and events may be used from any thread. Destroy a stream only
 *    when no thread has it current (destroying resets the calling thread's
 *    current stream); tf_stream_destroy waits for its work first.
 *  - Everything here ends at tf_shutdown: destroy streams and events
 *    before it. */
typedef struct tf_stream tf_stream;
typedef struct tf_event tf_event;

TF_API tf_status tf_stream_create(tf_device *dev, tf_stream **out);
/* Waits for the stream's work; NULL or the default stream is a no-op. */
TF_API void tf_stream_destroy(tf_stream *s);
TF_API tf_stream *tf_stream_default(tf_device *dev);      /* NULL for a NULL dev */
TF_API tf_device *tf_stream_device(const tf_stream *s);
TF_API tf_status tf_stream_synchronize(tf_stream *s);
/* The native queue behind s (a cudaStream_t on CUDA, a hipStream_t on
 * ROCm), for work of other libraries ordered with tensorframe's: queue it
 * there and it runs after the work queued on s before, and before the work
 * queued after. TF_ERR_UNSUPPORTED for a backend without native queues
 * (the CPU, OpenCL, WebGPU). */
TF_API tf_status tf_stream_native_handle(tf_stream *s, void **out);
/* Make s the calling thread's current stream for its device. */
TF_API tf_status tf_stream_set_current(tf_stream *s);
TF_API tf_stream *tf_stream_current(tf_device *dev);
/* Later work on s waits until e's recorded work is done (any device:
 * another backend's event is waited for on the host). An event never
 * recorded is already done. */
TF_API tf_status tf_stream_wait_event(tf_stream *s, tf_event *e);

#define TF_EVENT_TIMING 1u          /* tf_event_elapsed_ms may read it */
TF_API tf_status tf_event_create(unsigned flags, tf_event **out);
TF_API void tf_event_destroy(tf_event *e);
/* Mark the work queued on s so far (s NULL: the current stream of the
 * device e was last recorded on, or of the CPU). Re-recording moves it. */
TF_API tf_status tf_event_record(tf_event *e, tf_stream *s);
TF_API tf_status tf_event_synchronize(tf_event *e);
/* *done: the recorded work has finished. */
TF_API tf_status tf_event_query(tf_event *e, bool *done);
/* Milliseconds from start to end: both recorded on one device with
 * TF_EVENT_TIMING, both done (TF_ERR_INVALID_ARGUMENT otherwise). */
TF_API tf_status tf_event_elapsed_ms(tf_event *start, tf_event *end, double *ms);

/* Graph capture and replay (CUDA graphs' model). Between tf_graph_begin and
 * tf_graph_end the calling thread's ops on `dev` run as usual and are also
 * recorded, each after validation, placement and output allocation; a
 * replay runs the recorded ops again on the same buffers, skipping all of
 * that. Inputs are static: tensors made before the capture that the caller
 * overwrites (tf_tensor_write, tf_copy_into) before each replay, or passes
 * to tf_graph_replay_with, which copies new values of the same dtype and
 * shape into them (another shape is TF_ERR_SHAPE: capture a graph per
 * shape; a tensor the graph never read, or one it made - an output - is
 * TF_ERR_INVALID_ARGUMENT naming its position, nothing written). Outputs
 * are the tensors the captured ops returned: each replay
 * rewrites them. A replay queues on the thread's current stream.
 *
 *   tf_tensor *x;  tf_zeros(dev, TF_F32, 2, shape, &x);     static input
 *   tf_graph_begin(dev);
 *   ... y = f(x), ops as usual ...
 *   tf_graph *g;  tf_graph_end(&g);
 *   for each step: tf_tensor_write(x, data, bytes); tf_graph_replay(g);
 *                  read y
 *
 * What a replay could not repeat makes tf_graph_end fail, naming it: a read
 * to the host during the capture (tf_tensor_read, tf_item-like logic), host
 * data written into a tensor from before the capture, an op or move on
 * another device. Index checks (tf_index_select, tf_embedding, gathers)
 * become guards: a replay reads the indices first and fails with
 * TF_ERR_INDEX, running nothing, when one is out of range. Buffers the
 * graph touches live as long as it does (tensors released during the
 * capture are not reused within it). One capture per thread at a time. */
typedef struct tf_graph tf_graph;
TF_API tf_status tf_graph_begin(tf_device *dev);
TF_API tf_status tf_graph_end(tf_graph **out);
TF_API tf_status tf_graph_replay(tf_graph *g);
TF_API tf_status tf_graph_replay_with(tf_graph *g, int n, tf_tensor *const *captured, const tf_tensor *const *values);
TF_API int64_t tf_graph_node_count(const tf_graph *g);     /* -1 for NULL */
/* Does a replay launch the device's own graph (a CUDA graph: one launch
 * for all nodes) rather than the nodes one by one? tf_graph_end makes one
 * where the device can (SDK 2.3's graph slots), every node ran on the
 * device itself and TF_GRAPH_NATIVE is not 0; else, or if the device
 * refuses the capture, replays go node by node, as they always may. A
 * replay while the profiler records goes node by node too, so that each
 * op is timed. */
TF_API bool tf_graph_is_native(const tf_graph *g);
TF_API void tf_graph_destroy(tf_graph *g);

/* Host memory for fast asynchronous copies: page-locked (pinned) through
 * the first device whose backend offers it (CUDA's cudaHostAlloc) when
 * flags has TF_HOST_PINNED, else (or where no device pins memory) memory
 * aligned to 4096 bytes. *out is zeroed. Free it with tf_host_free. */
#define TF_HOST_PINNED 1u
TF_API tf_status tf_host_alloc(size_t bytes, unsigned flags, void **out);
TF_API void tf_host_free(void *p);
/* Whether p came from tf_host_alloc and is page-locked. */
TF_API bool tf_host_is_pinned(const void *p);
/* How many ops of `op` ran on the CPU because `d`'s backend lacks them
 * (op == TF_OP_COUNT: all ops). */
TF_API uint64_t tf_device_fallback_count(const tf_device *d, tf_op_kind op);
/* Ops dispatched to the device (including those that fell back). */
TF_API uint64_t tf_device_op_count(const tf_device *d);

/* A device allocator's statistics (bytes unless said otherwise). */
typedef struct tf_memory_stats {
    uint64_t allocated;       /* requested by live tensors */
    uint64_t reserved;        /* held from the OS or driver: live blocks (rounded up) plus the cache */
    uint64_t peak_allocated;
    uint64_t cache_hits;      /* allocations served from the cache (count) */
    uint64_t cache_misses;    /* allocations that went to the OS or driver (count) */
    uint64_t retries;         /* allocations that succeeded only after the cache was released (count) */
    uint64_t ooms;            /* allocations refused: the device was full or the limit reached (count) */
    uint64_t peak_reserved;
    uint64_t cached;          /* free blocks kept for reuse (part of reserved) */
    uint64_t limit;           /* most bytes the allocator may reserve; 0: no limit */
    /* Share of reserved memory no live tensor uses: rounding inside live
     * blocks plus the cache, 1 - allocated / reserved (0 when nothing is
     * reserved). */
    double fragmentation;
} tf_memory_stats;
/* TF_ERR_UNSUPPORTED if the device's backend keeps no statistics. A tensor
 * released while work queued on a made stream may still use it counts as
 * allocated until that work is done (tf_device_synchronize waits for it). */
TF_API tf_status tf_device_memory_stats(const tf_device *d, tf_memory_stats *out);
/* Return the device's cached, unused memory to the OS or driver. */
TF_API tf_status tf_device_empty_cache(tf_device *d);
/* Start the peaks over: peak_allocated = allocated, peak_reserved = reserved. */
TF_API tf_status tf_device_reset_peak_memory(tf_device *d);

/* Allocator configuration, per device. Every device allocates through a
 * caching allocator: a request is rounded up to a size class, a freed block
 * is kept for the next request of its class, and the cache is given back
 * when the OS or driver refuses memory. The configuration bounds it:
 *
 *   limit              most bytes the device's allocator may reserve (live
 *                      blocks and cache); a request over it first releases
 *                      the cache, then fails with TF_ERR_OUT_OF_MEMORY and a
 *                      message with the figures (requested, in use,
 *                      reserved, limit). 0: no limit. PyTorch's
 *                      set_per_process_memory_fraction is limit_fraction.
 *   limit_fraction     the same as a share of the device's memory_total, in
 *                      (0, 1]; 0: none. Given both, the smaller governs.
 *   round_divisions    size classes per power of two: 1, 2, 4, 8, 16 or 32
 *                      (at most 100%, 50%, 25%, 12.5%, 6.25%, 3.1% rounding;
 *                      blocks are reused within their class only). Default 8.
 *   release_threshold  cached bytes kept at most: a free that would cache
 *                      more returns the largest cached blocks first.
 *                      0: the device's default (a quarter of RAM on the
 *                      CPU, no bound on a GPU); UINT64_MAX: no bound.
 *   max_reserved_ratio before the allocator takes new memory it releases
 *                      cached blocks (largest first) until reserved stays
 *                      within this multiple of the highest demand so far
 *                      (peak_allocated, or the live bytes plus the request).
 *                      Default 1.10; 0: never release for this reason.
 *   caching            false: every free returns its memory at once.
 *
 * The environment sets it at initialization: TF_ALLOC_CONF is a comma list
 * of KEY:VALUE (the keys above; bytes take K, M, G, KiB, MiB, GiB), each for
 * every device, or DEVICE/KEY:VALUE for one ("limit:8GiB,cuda:0/
 * limit_fraction:0.9,caching:0"); a bad one is logged and ignored.
 * Setting a configuration empties the device's cache first; blocks in use
 * keep their size. TF_ERR_UNSUPPORTED for a backend whose allocator takes no
 * configuration (its SDK table has no alloc_configure). */
typedef struct tf_alloc_conf {
    uint64_t limit;
    double limit_fraction;
    int round_divisions;
    uint64_t release_threshold;   /* 0: the device's default; UINT64_MAX: no bound */
    double max_reserved_ratio;
    bool caching;
} tf_alloc_conf;
/* The library's defaults: what tf_device_alloc_conf_get gives for a device
 * nobody configured. */
#define TF_ALLOC_CONF_DEFAULT ((tf_alloc_conf){.round_divisions = 8, .max_reserved_ratio = 1.10, .caching = true})
TF_API tf_alloc_conf tf_alloc_conf_default(void);
/* Apply a TF_ALLOC_CONF-style text to *conf (entries for other devices are
 * skipped; device NULL takes only the entries for every device).
 * TF_ERR_INVALID_ARGUMENT naming the first bad entry; *conf is unchanged
 * then. */
TF_API tf_status tf_alloc_conf_parse(const char *text, const tf_device *device, tf_alloc_conf *conf);
TF_API tf_status tf_device_alloc_conf_get(const tf_device *d, tf_alloc_conf *out);
TF_API tf_status tf_device_alloc_conf_set(tf_device *d, const tf_alloc_conf *conf);

/* Autotuning. With TF_AUTOTUNE=1 a backend whose kernels have choices
 * times the candidates on the first use of a shape bucket and keeps the
 * winner in TF_CACHE_DIR (default ~/.cache/tensorframe)/tune/, one file per
 * device whose first line names the library, device, driver and kernel
 * source: a file from another of any of them is discarded whole. Later runs
 * read the answers and time nothing. Unset or 0: the built-in heuristics.
 * Tuned now: the OpenCL split reduction's groups per output (SUM, MEAN).
 * Statistics through the backend's extra ("tf_opencl_autotune_stats"). */
typedef struct tf_autotune_stats {
    uint64_t lookups;                 /* choices asked for */
    uint64_t hits;                    /* answered by the cache */
    uint64_t tuned;                   /* keys timed in this process */
    uint64_t timing_launches;         /* runs made only to time a candidate */
    uint64_t discarded_files;         /* cache files dropped: another library, device, driver or kernels */
} tf_autotune_stats;

/* The profiler. While on, every op the library dispatches is recorded: op,
 * public call, device, stream, operand dtypes and shapes, bytes read and
 * written, whether it fell back to the CPU, its status, and its host span.
 * On a synchronous device (the CPU) the span is the execution; on an
 * asynchronous one (OpenCL, CUDA, WebGPU) it is the time to queue the op,
 * and no execution time is reported (the trace says null). TF_PROFILE=
 * path.json turns it on at initialization and, at tf_shutdown, writes the
 * trace to path.json and the summary to path.json.txt.
 *
 *   tf_profiler_start();  ... ops ...  tf_profiler_stop();
 *   tf_profiler_write_trace("step.json");   open in ui.perfetto.dev
 *   char table[8192]; tf_profiler_summary(table, sizeof table);
 *
 * Start clears earlier records. The calls are thread safe; off, the cost is
 * one atomic load per op. */
TF_API tf_status tf_profiler_start(void);
TF_API tf_status tf_profiler_stop(void);
TF_API int64_t tf_profiler_record_count(void);
/* Chrome trace JSON ("X" events, one track per device and host thread;
 * args: call, device, stream, operands, bytes, fallback, status,
 * execution_us or queue_us). TF_ERR_IO if the file cannot be written. */
TF_API tf_status tf_profiler_write_trace(const char *path);
/* A table by op and device, slowest first: calls, total ms, mean us, share,
 * MB moved, fallbacks. TF_ERR_BUFFER_TOO_SMALL (truncated) if it does not fit. */
TF_API tf_status tf_profiler_summary(char *buf, size_t buf_bytes);

/* Threads the CPU backend computes with (and other backends' host threads):
 * default TF_NUM_THREADS, else the cores the process may run on. Small ops
 * always run on the calling thread. Set it when no op is running. */
TF_API tf_status tf_set_num_threads(int n);
TF_API int tf_get_num_threads(void);

/* Backend priority: a comma-separated list of backend names, highest first
 * ("cuda,opencl,cpu"). Set here or in TF_BACKEND, the list is taken
 * literally: "auto" picks among the named backends' devices in that order,
 * never an unnamed one. NULL restores the default (TF_BACKEND from the
 * environment if set, else the list the library was built with, by default
 * "cuda,rocm,webgpu,vulkan,opencl"), under which devices rank first by what
 * they are — discrete GPU, integrated GPU, emulated on the CPU (PoCL,
 * lavapipe, a CPU-type user backend), the host CPU — and then by the list,
 * so a backend no list names still ranks by its devices; "auto" then never
 * picks an emulated device over the host CPU. The same ranking decides
 * where an op with inputs on several devices runs. */
TF_API tf_status tf_backend_priority_set(const char *csv);
/* Writes the list in force ("cuda,rocm,...") into buf. */
TF_API tf_status tf_backend_priority_get(char *buf, size_t buf_bytes);

/* Where an op whose inputs live on different devices runs. */
typedef enum tf_mixed_policy {
    TF_MIXED_HIGHEST_PRIORITY = 0, /* default: the input device ranked highest */
    TF_MIXED_FIRST_INPUT = 1,      /* the first input's device */
    TF_MIXED_STRICT = 2            /* TF_ERR_DEVICE_MISMATCH */
} tf_mixed_policy;
TF_API tf_status tf_mixed_policy_set(tf_mixed_policy p);
TF_API tf_mixed_policy tf_mixed_policy_get(void);

/* Backends, loaded or not, for diagnostics (tf-info). */
typedef struct tf_backend_props {
    char name[32];            /* "opencl"; the file name if it never loaded */
    char source[512];         /* "built-in", "in-process" or the plugin path */
    bool loaded;
    int device_count;
    tf_status status;         /* TF_OK or why it was skipped */
    char reason[512];         /* why it was skipped or has no devices */
    int threads;              /* host threads it computes with; 0 if it does not say */
} tf_backend_props;
TF_API int tf_backend_count(void);
/* The directories and files searched for plugins, colon-separated, in the
 * order searched (TF_PLUGIN_PATH, installed plugin dir, the library's dir). */
TF_API tf_status tf_plugin_search_path(char *buf, size_t buf_bytes);
TF_API tf_status tf_backend_get_props(int i, tf_backend_props *out);

/* ------------------------------------------------------------------------ */
/* Tensors: creation                                                        */

/* Shapes: ndim in [0, TF_MAX_DIMS]; every extent >= 0; shape may be NULL
 * when ndim == 0 (a scalar). Memory is uninitialized for tf_empty. */
TF_API tf_status tf_empty(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out);
TF_API tf_status tf_zeros(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out);
TF_API tf_status tf_ones(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out);
TF_API tf_status tf_full(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, double value,
                         tf_tensor **out);
/* Values start, start+step, ... below stop (above, for negative step). */
TF_API tf_status tf_arange(tf_device *dev, tf_dtype dt, double start, double stop, double step,
                           tf_tensor **out);
/* n x m identity. */
TF_API tf_status tf_eye(tf_device *dev, tf_dtype dt, int64_t n, int64_t m, tf_tensor **out);
/* Copies numel * dtype size bytes of row-major data from host memory. */
TF_API tf_status tf_tensor_from_data(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape,
                                     const void *data, tf_tensor **out);
/* Counter-based (Philox4x32-10) random numbers: element i of the result
 * depends only on (seed, i), so the same seed gives the same values on every
 * device. Uniform in [0, 1); normal with mean 0 and standard deviation 1. */
TF_API tf_status tf_rand(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, uint64_t seed,
                         tf_tensor **out);
TF_API tf_status tf_randn(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, uint64_t seed,
                          tf_tensor **out);

/* ------------------------------------------------------------------------ */
/* Tensors: properties, lifetime, reading, moving                           */

TF_API tf_tensor *tf_tensor_retain(tf_tensor *t);   /* returns t */
/* NULL is a no-op; safe after tf_shutdown (see there). */
TF_API void tf_tensor_release(tf_tensor *t);
/* Scopes release a forward pass's temporaries at once. While a scope is
 * open on a thread, every tensor made there (by any function, views and
 * loads included) belongs to it; tf_scope_end releases each one still
 * alive once. Keep a result past the scope by retaining it (then release it
 * yourself); a tensor released early simply leaves the scope. Scopes nest
 * (a tensor belongs to the innermost); ending one ends those opened inside
 * it; they are per thread, and ending a scope not open on the calling
 * thread is TF_ERR_INVALID_ARGUMENT.
 *
 *   tf_scope *sc;
 *   TF_TRY(tf_scope_begin(&sc));
 *   tf_tensor *h, *a, *y;            no release calls for h and a
 *   ... tf_linear(x, w1, b1, &h); tf_gelu(h, &a); tf_linear(a, w2, b2, &y) ...
 *   *out = tf_tensor_retain(y);      the result outlives the scope
 *   tf_scope_end(sc);                 h, a and the scope's reference to y go */
typedef struct tf_scope tf_scope;
TF_API tf_status tf_scope_begin(tf_scope **out);
TF_API tf_status tf_scope_end(tf_scope *scope);
TF_API tf_device *tf_tensor_device(const tf_tensor *t);
TF_API tf_dtype tf_tensor_dtype(const tf_tensor *t);
TF_API int tf_tensor_ndim(const tf_tensor *t);
TF_API const int64_t *tf_tensor_shape(const tf_tensor *t);
TF_API const int64_t *tf_tensor_strides(const tf_tensor *t);  /* in elements */
TF_API int64_t tf_tensor_offset(const tf_tensor *t);          /* in bytes */
TF_API int64_t tf_tensor_numel(const tf_tensor *t);
/* Bytes of its elements, as tf_tensor_read writes them (whole blocks for a
 * quantized dtype); -1 for NULL. */
TF_API int64_t tf_tensor_nbytes(const tf_tensor *t);
TF_API bool tf_tensor_is_contiguous(const tf_tensor *t);
/* Copies the tensor, row-major and contiguous, to host memory. Waits for
 * queued work. TF_ERR_BUFFER_TOO_SMALL if dst_bytes < numel * dtype size. */
TF_API tf_status tf_tensor_read(const tf_tensor *t, void *dst, size_t dst_bytes);
/* Overwrites a contiguous tensor's elements from host memory (src_bytes
 * must be its tf_tensor_nbytes), queued on the current stream after the
 * work before it; src may be reused on return. A view writes through to
 * the tensors that share it. */
TF_API tf_status tf_tensor_write(tf_tensor *t, const void *src, size_t src_bytes);
/* The same, queued on stream s (NULL: t's device's current stream), and
 * returning at once where the device can: dst is complete, src may be
 * reused, only after the stream has passed this point (synchronize it or
 * an event recorded after). The tensor must be contiguous and live on s's
 * device. Memory from tf_host_alloc(TF_HOST_PINNED) copies without a
 * staging step on CUDA. */
TF_API tf_status tf_tensor_read_async(const tf_tensor *t, void *dst, size_t dst_bytes, tf_stream *s);
TF_API tf_status tf_tensor_write_async(tf_tensor *t, const void *src, size_t src_bytes, tf_stream *s);
/* A copy of t on dev (a new reference to t itself if t is already there). */
TF_API tf_status tf_tensor_to(const tf_tensor *t, tf_device *dev, tf_tensor **out);

/* ------------------------------------------------------------------------ */
/* Views (share storage) and copies                                         */

/* One extent may be -1 (inferred). A view when the strides allow, else a
 * contiguous copy. */
TF_API tf_status tf_reshape(const tf_tensor *t, int ndim, const int64_t *shape, tf_tensor **out);
/* The same bytes read as another dtype of the same element size (PyTorch's
 * view(dtype), NumPy's view): f32 <-> i32, f64 <-> i64, i8 <-> u8, f16 <->
 * bf16. Shares storage: writes through either show in both. Different
 * sizes, bool (whose bytes must stay 0 or 1) and quantized dtypes are
 * TF_ERR_DTYPE. */
TF_API tf_status tf_view_dtype(const tf_tensor *t, tf_dtype dtype, tf_tensor **out);
/* A complex tensor's parts as a real view with one more axis of extent 2
 * (real, imaginary), PyTorch's view_as_real: c64 [..] -> f32 [.., 2]; and
 * back (view_as_complex): an f32 or f64 tensor whose last axis has extent 2
 * and stride 1, its other strides even and its start on a pair. Writes
 * through either show in both. */
TF_API tf_status tf_view_as_real(const tf_tensor *t, tf_tensor **out);
TF_API tf_status tf_view_as_complex(const tf_tensor *t, tf_tensor **out);
/* perm has tf_tensor_ndim(t) entries, a permutation of 0..ndim-1 (negative
 * entries count from the end). */
TF_API tf_status tf_permute(const tf_tensor *t, const int *perm, tf_tensor **out);
TF_API tf_status tf_transpose(const tf_tensor *t, int dim0, int dim1, tf_tensor **out);
/* Python's t[start:stop:step] along one axis; start/stop are clamped and may
 * be negative (from the end); step >= 1. */
TF_API tf_status tf_slice(const tf_tensor *t, int axis, int64_t start, int64_t stop, int64_t step,
                          tf_tensor **out);
/* Broadcast to `shape` (NumPy broadcast_to): a view with stride 0. */
TF_API tf_status tf_expand(const tf_tensor *t, int ndim, const int64_t *shape, tf_tensor **out);
/* Remove axis `axis` (must have extent 1), or every extent-1 axis when
 * axis == TF_ALL_AXES. */
TF_API tf_status tf_squeeze(const tf_tensor *t, int axis, tf_tensor **out);
/* Insert an extent-1 axis at `axis` in [-(ndim+1), ndim]. */
TF_API tf_status tf_unsqueeze(const tf_tensor *t, int axis, tf_tensor **out);
/* t itself (new reference) if contiguous, else a contiguous copy. */
TF_API tf_status tf_contiguous(const tf_tensor *t, tf_tensor **out);
/* A contiguous copy, always new storage. */
TF_API tf_status tf_copy(const tf_tensor *t, tf_tensor **out);
/* A contiguous copy converted to dt. Float to integer truncates toward zero
 * and saturates; NaN becomes 0. Integer narrowing wraps. Any nonzero value
 * (and NaN) becomes true. */
TF_API tf_status tf_cast(const tf_tensor *t, tf_dtype dt, tf_tensor **out);
/* Write src into the existing tensor dst (a view, such as a slice of a KV
 * cache: the appended rows land in place, nothing else is copied). src
 * broadcasts to dst's shape, is converted to dst's dtype as by tf_cast and
 * moved to dst's device first if it is elsewhere; it may share storage with
 * dst. A dst that maps two indices to one element (a broadcast view) is
 * TF_ERR_INVALID_ARGUMENT. On any error dst is unchanged. Views of dst see
 * the new values; tensors computed from dst earlier do not. */
TF_API tf_status tf_copy_into(tf_tensor *dst, const tf_tensor *src);

/* ------------------------------------------------------------------------ */
/* Ops. Inputs on different devices follow the mixed-device policy.        */

/* The dtype two tensors combine to in elementwise ops and tf_where
 * (PyTorch's rule for 0-d tensors): a 0-d tensor (tf_scalar) takes part
 * only when its category is above the other's, so tf_mul(x_f16, half_f32)
 * stays f16, i32[n] with an i64 0-d stays i32, and i32[n] with an f64 0-d
 * gives f64; two dimensioned (or two 0-d) tensors follow tf_promote_types. */
TF_API tf_status tf_result_type(const tf_tensor *a, const tf_tensor *b, tf_dtype *out);
/* Elementwise with NumPy broadcasting and tf_promote_types. Integer
 * add/sub/mul wrap around; div always gives a float (f32 for integer
 * inputs); maximum/minimum propagate NaN; integer pow with a negative
 * exponent gives 0 (or +-1 for a base of +-1). bool inputs alone are
 * rejected with TF_ERR_DTYPE. */
TF_API tf_status tf_add(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_sub(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_mul(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_div(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_maximum(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_minimum(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_pow(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
/* A fused chain: silu(gate) * up in one pass (the gated MLP of Llama-style
 * models), broadcasting like tf_mul. Float dtypes. */
TF_API tf_status tf_swiglu(const tf_tensor *gate, const tf_tensor *up, tf_tensor **out);
/* The activations' gradients in one pass each: x is the activation's
 * input, g the gradient of its output; the result is g times the
 * derivative at x (relu's: g where x > 0, else 0). Float dtypes,
 * broadcasting like tf_mul. tf_backward runs them. */
TF_API tf_status tf_gelu_grad(const tf_tensor *x, const tf_tensor *g, tf_tensor **out);
TF_API tf_status tf_gelu_tanh_grad(const tf_tensor *x, const tf_tensor *g, tf_tensor **out);
TF_API tf_status tf_silu_grad(const tf_tensor *x, const tf_tensor *g, tf_tensor **out);
TF_API tf_status tf_relu_grad(const tf_tensor *x, const tf_tensor *g, tf_tensor **out);
/* atan2(a, b): the angle of the point (b, a), in [-pi, pi], with C's
 * signed-zero and infinity cases; copysign(a, b): |a| with b's sign bit
 * (zeros and NaN included). Float dtypes, broadcasting like tf_add. */
TF_API tf_status tf_atan2(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_copysign(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
/* Bitwise and, or, xor and shifts of integer tensors (i8, i32, i64, u8;
 * bool is refused: its logical ops are tf_logical_*), promoting like
 * tf_add. right_shift is arithmetic (sign-filling). A shift count past 63
 * or negative gives 0 (left) or the sign, 0 or -1 (right); narrower dtypes
 * wrap the int64 result, so a count past their width gives the same. Not
 * is tf_bitwise_xor with all ones (-1, or 255 for u8). */
TF_API tf_status tf_bitwise_and(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_bitwise_or(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_bitwise_xor(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_left_shift(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_right_shift(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
/* Comparisons with broadcasting: inputs promoted, result TF_BOOL; NaN
 * compares unequal to everything (ne is true). */
TF_API tf_status tf_eq(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_ne(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_lt(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_le(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_gt(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_ge(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
/* Logic on truth values (nonzero and NaN are true), result TF_BOOL. */
TF_API tf_status tf_logical_and(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_logical_or(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_logical_not(const tf_tensor *x, tf_tensor **out);
/* TF_BOOL masks; integer and bool inputs give all false. */
TF_API tf_status tf_isnan(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_isinf(const tf_tensor *x, tf_tensor **out);
/* Complex parts: the conjugate (same dtype), the real and imaginary parts
 * (the parts' dtype: c64 -> f32). A real x is its own conjugate and real
 * part (a new reference to x) and has zeros for its imaginary part. */
TF_API tf_status tf_conj(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_real(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_imag(const tf_tensor *x, tf_tensor **out);
/* re + i*im: both real, broadcast together and promoted (at least f32;
 * f64 gives c128, the rest c64). */
TF_API tf_status tf_complex(const tf_tensor *re, const tf_tensor *im, tf_tensor **out);

/* Discrete Fourier transforms (NumPy's and the array API's definitions):
 * X[k] = sum_n x[n] exp(-2 pi i k n / N) over each of n_axes axes (each once,
 * negative ones from the end), the inverse with exp(+...). The scaling:
 * TF_FFT_BACKWARD leaves the forward transform unscaled and divides the
 * inverse by N (the product of the transformed lengths), TF_FFT_FORWARD the
 * other way round, TF_FFT_ORTHO divides both by sqrt(N).
 *  - tf_fft: a float or complex x; a complex result of x's shape (c128
 *    from f64 and c128, c64 from the rest).
 *  - tf_rfft: a real float x; the transformed last listed axis keeps its
 *    n / 2 + 1 non-negative frequencies (the rest are their conjugates).
 *  - tf_irfft: the inverse of tf_rfft: a real result whose last listed axis
 *    has last_length points, from an x with last_length / 2 + 1 there (trim
 *    or pad first); the other axes as tf_fft's inverse.
 * A transformed axis needs at least one point (TF_ERR_SHAPE). They run on
 * the host in double precision through FFTW 3 (libfftw3.so.3, loaded at
 * the first call; TF_ERR_UNSUPPORTED without it), reading x from its
 * device and making the result there. */
typedef enum tf_fft_norm { TF_FFT_BACKWARD = 0, TF_FFT_ORTHO = 1, TF_FFT_FORWARD = 2 } tf_fft_norm;
TF_API tf_status tf_fft(const tf_tensor *x, int n_axes, const int *axes, bool inverse, tf_fft_norm norm,
                        tf_tensor **out);
TF_API tf_status tf_rfft(const tf_tensor *x, int n_axes, const int *axes, tf_fft_norm norm, tf_tensor **out);
TF_API tf_status tf_irfft(const tf_tensor *x, int n_axes, const int *axes, int64_t last_length, tf_fft_norm norm,
                          tf_tensor **out);
/* cond ? a : b elementwise, all three broadcast together; cond is read as
 * truth values, the result has the promoted dtype of a and b. */
TF_API tf_status tf_where(const tf_tensor *cond, const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
/* The elementwise ops above, written into an existing tensor (PyTorch's
 * out= and in-place forms): tf_binary_into(x, TF_OP_ADD, x, y) is x += y,
 * tf_unary_into(h, TF_OP_GELU, h) applies GELU in place, and dst may be a
 * view (a slice of a bigger buffer). One rule for every op:
 *  - op is any op of two inputs with broadcasting (TF_OP_ADD ... TF_OP_POW,
 *    comparisons, logical and/or, TF_OP_SWIGLU), or of one input with no
 *    parameter (TF_OP_EXP, TF_OP_GELU, TF_OP_LOGICAL_NOT, ...; not
 *    TF_OP_CLAMP or TF_OP_LEAKY_RELU); else TF_ERR_INVALID_ARGUMENT;
 *  - the result is computed exactly as by tf_add, tf_gelu, ... and must
 *    have dst's shape (inputs broadcast to it; TF_ERR_SHAPE otherwise);
 *  - it is stored into dst's dtype when that is of the same kind or a
 *    higher one (bool < integer < float: an f32 sum into f16 rounds, a
 *    comparison into f32 gives 0/1), never lower (TF_ERR_DTYPE);
 *  - inputs may be dst itself or share its storage: each element is read
 *    before it is written, as if the result were made apart first;
 *  - a dst that maps two indices to one element (a broadcast view) is
 *    TF_ERR_INVALID_ARGUMENT; on any error dst is unchanged.
 * No memory is allocated when dst is contiguous, of the result's dtype, on
 * the device the op runs on (the mixed-device policy picks it from the
 * inputs), and each input either is dst or shares no byte with it; else
 * the result is made apart and copied in (converted, moved, strided). */
TF_API tf_status tf_unary_into(tf_tensor *dst, tf_op_kind op, const tf_tensor *x);
TF_API tf_status tf_binary_into(tf_tensor *dst, tf_op_kind op, const tf_tensor *a, const tf_tensor *b);
TF_API tf_status tf_where_into(tf_tensor *dst, const tf_tensor *cond, const tf_tensor *a, const tf_tensor *b);
/* BLAS-style GEMM, batched: alpha * op(a) @ op(b) + beta * c, where op
 * transposes the last two axes when asked; c (may be NULL) broadcasts to the
 * result and is not read when beta == 0. Float dtypes. */
TF_API tf_status tf_gemm(const tf_tensor *a, const tf_tensor *b, const tf_tensor *c, double alpha, double beta,
                         bool transpose_a, bool transpose_b, tf_tensor **out);
/* A linear layer, as PyTorch's F.linear: x [..., K] @ w^T + bias with w
 * [N, K] and bias [N] (or NULL), giving [..., N]. The leading axes fold
 * into one product (no batched GEMM over them) and the bias rides the
 * GEMM's epilogue; w may be block-quantized (then tf_matmul_quantized).
 * An f32 x with an f16 or bf16 w reads w as stored (never a converted copy
 * per call) and gives f32: half the weight memory at f32's speed. With a
 * bf16 w, a CPU with AVX512-BF16 and a dozen rows or more, x is rounded to
 * bf16 on the way, as PyTorch's autocast does (exact products, f32 sums):
 * twice f32's multiply rate, each product within 2^-8 of its size (the op
 * allows a device to round x, as it does for quantized weights). Use it
 * rather than tf_gemm for layers: tf_gemm follows BLAS, where c is not read
 * when beta == 0. */
TF_API tf_status tf_linear(const tf_tensor *x, const tf_tensor *w, const tf_tensor *bias, tf_tensor **out);
/* A linear layer with what follows it, in one kernel where the device has
 * it: activation(x @ w^T + bias) + residual. activation is a unary op of no
 * parameter (TF_OP_GELU, TF_OP_GELU_TANH, TF_OP_SILU, TF_OP_RELU, ...) or
 * TF_NO_ACTIVATION; residual (may be NULL) broadcasts to the result
 * [..., N]. One pass over the output instead of three: the CPU applies
 * the activation and the residual to each tile while it is in cache. A
 * device without the fused kernel runs the parts on itself; a quantized w,
 * or a half w under an f32 x (tf_linear's kept-weight products), runs the
 * parts too. Captured graphs of tf_linear, tf_unary_into and tf_add are
 * rewritten to this by the fusion pass (tf_graph_end). */
#define TF_NO_ACTIVATION ((tf_op_kind)-1)
TF_API tf_status tf_linear_fused(const tf_tensor *x, const tf_tensor *w, const tf_tensor *bias, tf_op_kind activation,
                                 const tf_tensor *residual, tf_tensor **out);
/* A float activation times a block-quantized weight, as a linear layer:
 * x [..., K] (f32, f16, bf16 or f64) and w [N, K] quantized give
 * x @ dequantize(w)^T, [..., N] in x's dtype. Devices may round x to 8
 * bits per 32-element block on the way (the CPU does, to use its integer
 * dot-product instructions, as llama.cpp does): the result is then as
 * accurate as the weight's own quantization allows, not to f32 rounding.
 * tf_gemm(x, w, NULL, 1, 0, false, true) with a quantized w comes here;
 * any other tf_gemm of a quantized operand decodes it first. */
TF_API tf_status tf_matmul_quantized(const tf_tensor *x, const tf_tensor *w, tf_tensor **out);
/* Matrix-vector product: a [..., M, N] with x [N] gives [..., M]. */
TF_API tf_status tf_gemv(const tf_tensor *a, const tf_tensor *x, tf_tensor **out);
/* Outer product of two 1-D tensors: [M] x [N] -> [M, N]. */
TF_API tf_status tf_outer(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);

/* ---- transformer kernels (float dtypes) ---- */
/* Numerically stable softmax / log_softmax along `axis`. */
TF_API tf_status tf_softmax(const tf_tensor *x, int axis, tf_tensor **out);
TF_API tf_status tf_log_softmax(const tf_tensor *x, int axis, tf_tensor **out);
/* x / sqrt(mean(x^2) + eps) * weight over the last axis; weight may be NULL. */
TF_API tf_status tf_rmsnorm(const tf_tensor *x, const tf_tensor *weight, double eps, tf_tensor **out);
/* (x - mean) / sqrt(var + eps) * weight + bias over the last axis
 * (population variance); weight and bias may be NULL. */
TF_API tf_status tf_layernorm(const tf_tensor *x, const tf_tensor *weight, const tf_tensor *bias, double eps,
                              tf_tensor **out);
/* A residual add and the norm of its rows in one pass: tf_rmsnorm or
 * tf_layernorm of x + residual, the sum rounded to x's dtype first, so the
 * result is what tf_add then the norm give, without the sum written out.
 * residual broadcasts to x's shape (a [D] row, a [1, L, D] block, ...) and
 * has x's dtype. A device without the fused kernel runs the two ops. The
 * graph fusion pass makes this op from tf_add followed by a norm. */
TF_API tf_status tf_add_rmsnorm(const tf_tensor *x, const tf_tensor *residual, const tf_tensor *weight, double eps,
                                tf_tensor **out);
TF_API tf_status tf_add_layernorm(const tf_tensor *x, const tf_tensor *residual, const tf_tensor *weight,
                                  const tf_tensor *bias, double eps, tf_tensor **out);
typedef enum tf_rope_mode {
    TF_ROPE_INTERLEAVED = 0,   /* GPT-J: rotate pairs (2i, 2i+1) */
    TF_ROPE_HALF_SPLIT = 1     /* GPT-NeoX / Llama: rotate pairs (i, i + rotary_dims/2) */
} tf_rope_mode;
/* Rotary position embedding over the last axis of x. positions: i32/i64,
 * one per index of x's `seq_axis`. The first rotary_dims (even; 0 means
 * all) dims rotate by position * theta^(-2i/rotary_dims); the rest pass
 * through. */
TF_API tf_status tf_rope(const tf_tensor *x, const tf_tensor *positions, int seq_axis, int64_t rotary_dims,
                         double theta, tf_rope_mode mode, tf_tensor **out);
/* Scaled dot-product attention. q [B, Hq, Lq, D], k [B, Hkv, Lk, D],
 * v [B, Hkv, Lk, Dv] with Hkv dividing Hq (grouped-query attention); mask
 * (may be NULL) broadcasts to [B, Hq, Lq, Lk] and is either bool (true:
 * the query attends that key, PyTorch's convention) or additive float (added
 * to the scores; -inf hides a key); tf_key_padding_mask makes one from a
 * [B, Lk] padding mask. scale <= 0
 * or NaN means 1/sqrt(D). With causal, query i (at absolute position
 * q_offset + i; q_offset < 0 means Lk - Lq, the decoding case with a KV
 * cache) attends keys 0..q_offset+i. A query that sees no key gives NaN,
 * as in PyTorch. Result [B, Hq, Lq, Dv]. */
TF_API tf_status tf_sdpa(const tf_tensor *q, const tf_tensor *k, const tf_tensor *v, const tf_tensor *mask,
                         double scale, bool causal, int64_t q_offset, tf_tensor **out);
/* The gradients of tf_sdpa without a mask (what tf_backward runs where the
 * device has their kernels; a masked attention's gradient is composed from
 * forward ops), the forward recomputed block by block rather than its
 * scores kept. q, k, v, scale, causal and q_offset are the forward's;
 * grad_out is dL/dO [B, Hq, Lq, Dv]. tf_sdpa_grad_q gives dL/dq in q's
 * shape; tf_sdpa_grad_kv gives dL/dk and dL/dv side by side,
 * [B, Hkv, Lk, D + Dv] (slice the last axis at D), each summed over the
 * query heads that share the kv head. */
TF_API tf_status tf_sdpa_grad_q(const tf_tensor *q, const tf_tensor *k, const tf_tensor *v, const tf_tensor *grad_out,
                                double scale, bool causal, int64_t q_offset, tf_tensor **out);
TF_API tf_status tf_sdpa_grad_kv(const tf_tensor *q, const tf_tensor *k, const tf_tensor *v, const tf_tensor *grad_out,
                                 double scale, bool causal, int64_t q_offset, tf_tensor **out);
/* The gradient of tf_rmsnorm with respect to x, one pass a row (what
 * tf_backward runs where the device has the kernel): x, weight (may be
 * NULL) and eps are the forward's, grad_out dL/dy in x's shape. With
 * r = 1/sqrt(mean(x^2) + eps) and gw = grad_out * weight:
 * dx = r gw - x r^3 mean(gw x). (The weight's gradient is
 * sum over rows of grad_out * tf_rmsnorm(x, NULL, eps).) */
TF_API tf_status tf_rmsnorm_grad(const tf_tensor *x, const tf_tensor *weight, const tf_tensor *grad_out, double eps,
                                 tf_tensor **out);
/* The attention mask of a padded batch, as tokenizers give it: keep [B, Lk]
 * (bool, or any dtype with nonzero for a real token and 0 for padding)
 * becomes a bool [B, 1, 1, Lk] that tf_sdpa broadcasts over heads and
 * queries. */
TF_API tf_status tf_key_padding_mask(const tf_tensor *keep, tf_tensor **out);
/* Decode-time primitives: scores[..., j] = scale * keys[..., j, :] . query[..., :]
 * (query [..., D], keys [..., L, D] -> [..., L]), and the weighted sum of
 * rows out[..., :] = sum_j weights[..., j] * values[..., j, :]
 * (weights [..., L], values [..., L, D] -> [..., D]). */
TF_API tf_status tf_attention_scores(const tf_tensor *query, const tf_tensor *keys, double scale, tf_tensor **out);
TF_API tf_status tf_weighted_sum_rows(const tf_tensor *weights, const tf_tensor *values, tf_tensor **out);

/* ---- vision and training (float dtypes, NCHW) ---- */
/* 2-d convolution (cross-correlation, as PyTorch): x [N, C, H, W],
 * weight [O, C/groups, kh, kw], bias [O] or NULL. stride, padding and
 * dilation are {h, w}; Ho = (H + 2*pad - dil*(kh-1) - 1) / stride + 1. */
TF_API tf_status tf_conv2d(const tf_tensor *x, const tf_tensor *weight, const tf_tensor *bias, const int64_t stride[2],
                           const int64_t padding[2], const int64_t dilation[2], int64_t groups, tf_tensor **out);
/* Pooling over {h, w} windows; stride NULL means the kernel size. Max
 * pooling propagates NaN and pads with -inf; average pooling pads with zero
 * and counts the padding in the divisor when count_include_pad (PyTorch's
 * default). */
TF_API tf_status tf_maxpool2d(const tf_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                              const int64_t padding[2], const int64_t dilation[2], tf_tensor **out);
TF_API tf_status tf_avgpool2d(const tf_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                              const int64_t padding[2], bool count_include_pad, tf_tensor **out);
/* The gradients of tf_conv2d and tf_maxpool2d as ops of their own (what
 * tf_backward runs where the device has their kernels), PyTorch's
 * torch.nn.grad.conv2d_input / conv2d_weight and max_pool2d's backward.
 * grad_out is dL/dy, in the forward output's shape; the window arguments
 * are the forward's (NULL: its defaults). tf_conv2d_grad_input gives dL/dx
 * of input_shape (dy alone does not tell H and W when the stride skipped
 * some); tf_conv2d_grad_weight gives dL/dW [O, C/groups, kernel]; a bias's
 * gradient is grad_out summed over N, Ho and Wo. tf_maxpool2d_grad gives
 * dL/dx: each window's gradient goes to the first element equal to its
 * maximum (its first NaN), summed where windows overlap. */
TF_API tf_status tf_conv2d_grad_input(const tf_tensor *grad_out, const tf_tensor *weight, const int64_t input_shape[4],
                                      const int64_t stride[2], const int64_t padding[2], const int64_t dilation[2],
                                      int64_t groups, tf_tensor **out);
TF_API tf_status tf_conv2d_grad_weight(const tf_tensor *x, const tf_tensor *grad_out, const int64_t kernel[2],
                                       const int64_t stride[2], const int64_t padding[2], const int64_t dilation[2],
                                       int64_t groups, tf_tensor **out);
TF_API tf_status tf_maxpool2d_grad(const tf_tensor *x, const tf_tensor *grad_out, const int64_t kernel[2],
                                   const int64_t stride[2], const int64_t padding[2], const int64_t dilation[2],
                                   tf_tensor **out);
/* Batch normalization over axis 1 of x [N, C, ...]. Inference (training
 * false): uses running_mean/running_var. Training: normalizes with the
 * batch's mean and (biased) variance and, when running_mean/running_var are
 * given, updates them in place: r = (1 - momentum) * r + momentum * batch
 * (the variance unbiased), as PyTorch. weight and bias may be NULL. */
TF_API tf_status tf_batch_norm(const tf_tensor *x, tf_tensor *running_mean, tf_tensor *running_var,
                               const tf_tensor *weight, const tf_tensor *bias, bool training, double momentum,
                               double eps, tf_tensor **out);
typedef enum tf_reduction { TF_REDUCTION_MEAN = 0, TF_REDUCTION_SUM = 1, TF_REDUCTION_NONE = 2 } tf_reduction;
/* Cross entropy of logits [N, C] (or [N, C, d...]) against class indices
 * target [N] (or [N, d...], i32/i64). Targets equal to ignore_index count
 * for nothing (the mean divides by the others; all ignored gives NaN); any
 * other target outside [0, C) is TF_ERR_INDEX. */
TF_API tf_status tf_cross_entropy(const tf_tensor *logits, const tf_tensor *target, int64_t ignore_index,
                                  tf_reduction reduction, tf_tensor **out);
/* One Adam step, in place on param, m and v (same shape, float): with
 * g = grad (+ weight_decay * param for Adam), m = b1 m + (1 - b1) g,
 * v = b2 v + (1 - b2) g^2, param -= lr * m/(1 - b1^step) /
 * (sqrt(v/(1 - b2^step)) + eps). AdamW (decoupled true) instead first scales
 * param by (1 - lr * weight_decay). step counts from 1. */
TF_API tf_status tf_adam_step(tf_tensor *param, const tf_tensor *grad, tf_tensor *m, tf_tensor *v, double lr,
                              double beta1, double beta2, double eps, double weight_decay, int64_t step, bool decoupled);

/* ---- mixed precision (PyTorch's torch.autocast and GradScaler) ---- */
/* Autocast: between tf_autocast_begin(dtype) and tf_autocast_end() on a
 * thread, the ops below convert their float inputs before they run, so a
 * model written in f32 computes its products in f16 or bf16 and keeps what
 * needs the range or precision in f32. The policy, per public function:
 *
 *   runs in `dtype` (its f32 inputs are cast to it; f64 and quantized
 *   inputs stay as they are):
 *     tf_matmul, tf_gemm, tf_linear, tf_gemv, tf_conv2d, tf_sdpa,
 *     tf_attention_scores, tf_weighted_sum_rows
 *   runs in f32 (its f16 and bf16 inputs are cast to f32):
 *     tf_softmax, tf_log_softmax, tf_rmsnorm, tf_layernorm, tf_add_rmsnorm,
 *     tf_add_layernorm, tf_batch_norm
 *     (x, weight, bias), tf_cross_entropy, tf_exp, tf_log, tf_log1p,
 *     tf_expm1, tf_rsqrt, tf_pow, tf_softplus, tf_sum, tf_mean, tf_prod,
 *     tf_cumsum, tf_var, tf_std, tf_norm, tf_normalize, tf_logsumexp,
 *     tf_masked_mean
 *   runs in the widest input dtype (no cast: the dtype rules already
 *   promote, so an f16 product plus an f32 residual gives f32): the
 *   elementwise ops of two inputs (tf_add ... tf_pow, tf_swiglu),
 *   comparisons, tf_where, tf_concat, tf_stack
 *
 * Every other function, the _into forms included, runs on its inputs as
 * given. A listed function that another listed function calls internally
 * (tf_cross_entropy's tf_log_softmax, say) sees the inputs its caller
 * converted and converts nothing more. Casts are ordinary tf_cast ops: a
 * captured graph records them, the profiler shows them. Nothing is cached:
 * an f32 weight is converted on each call (keep weights in the lower dtype
 * to avoid that; an f16 input is never recast by the first list).
 * Regions nest: tf_autocast_begin(TF_F32) turns autocast off until its
 * end, as autocast(enabled=False) does. dtype must be TF_F16, TF_BF16 or
 * TF_F32 (TF_ERR_DTYPE otherwise); at most 32 levels (TF_ERR_INVALID_ARGUMENT
 * beyond); tf_autocast_end without a begin is TF_ERR_INVALID_ARGUMENT.
 * The state is the calling thread's: other threads are not affected. */
TF_API tf_status tf_autocast_begin(tf_dtype dtype);
TF_API tf_status tf_autocast_end(void);
/* The lower dtype in effect on this thread, or TF_F32 when autocast is off. */
TF_API tf_dtype tf_autocast_dtype(void);

/* Loss scaling for training in f16 (GradScaler's semantics): small
 * gradients that f16 would flush to zero survive when the loss is
 * multiplied by a large scale before the backward pass. Each iteration:
 *   tf_grad_scaler_scale(s, loss, &scaled);      tf_backward(scaled, NULL, 0)
 *   tf_grad_scaler_unscale(s, n, grads, &finite); grads /= scale, in place
 *   if (finite) tf_adam_step(...) for each parameter; else skip the step
 *   tf_grad_scaler_update(s);
 * update halves the scale (backoff_factor) after a non-finite iteration and
 * multiplies it by growth_factor after growth_interval finite ones in a row
 * (unless the grown scale would not be a finite f32). Gradients must be
 * f32, bf16 or f64: f16 gradients are refused (TF_ERR_DTYPE), as PyTorch
 * refuses them, since unscaling in f16 loses what the scale kept; cast the
 * gradients of f32 master weights to f32 first. unscale checks every
 * gradient before it writes any: on any error all are unchanged. Calling
 * unscale twice without an update between, or update without an unscale,
 * is TF_ERR_INVALID_ARGUMENT. A scaler is not thread safe. */
typedef struct tf_grad_scaler tf_grad_scaler;
typedef struct tf_grad_scaler_config {
    double init_scale;          /* 65536 */
    double growth_factor;       /* 2: > 1 */
    double backoff_factor;      /* 0.5: in (0, 1) */
    int64_t growth_interval;    /* 2000: >= 1 */
} tf_grad_scaler_config;
typedef struct tf_grad_scaler_stats {
    double scale;               /* what scale() multiplies by now */
    int64_t growth_tracker;     /* finite iterations since the last change */
    int64_t steps_taken;        /* updates after finite gradients */
    int64_t steps_skipped;      /* updates after non-finite gradients */
} tf_grad_scaler_stats;
/* PyTorch's defaults, as above. */
TF_API tf_grad_scaler_config tf_grad_scaler_defaults(void);
/* config NULL means the defaults. */
TF_API tf_status tf_grad_scaler_create(const tf_grad_scaler_config *config, tf_grad_scaler **out);
TF_API void tf_grad_scaler_destroy(tf_grad_scaler *s);
/* loss * scale for a float loss of any shape: f32 for an f32, f16 or bf16
 * loss (f16 cannot hold the default scale, 65536), f64 for f64. */
TF_API tf_status tf_grad_scaler_scale(const tf_grad_scaler *s, const tf_tensor *loss, tf_tensor **out);
/* Divide each of the n gradients by the scale in place; *finite tells
 * whether all of them are free of inf and NaN afterwards. */
TF_API tf_status tf_grad_scaler_unscale(tf_grad_scaler *s, int n, tf_tensor *const *grads, bool *finite);
TF_API tf_status tf_grad_scaler_update(tf_grad_scaler *s);
TF_API tf_status tf_grad_scaler_stats_get(const tf_grad_scaler *s, tf_grad_scaler_stats *out);
/* scaler.step(optimizer): unscales the optimizer's gradients (unless
 * tf_grad_scaler_unscale did since the last update), then steps only if
 * they are finite (*stepped says). tf_grad_scaler_update follows:
 *   tf_grad_scaler_scale(s, loss, &scaled); tf_backward(scaled, NULL, 0);
 *   tf_grad_scaler_step(s, opt, &stepped); tf_grad_scaler_update(s); */
typedef struct tf_optimizer tf_optimizer;
TF_API tf_status tf_grad_scaler_step(tf_grad_scaler *s, tf_optimizer *o, bool *stepped);

/* ---- autograd (reverse mode, eager, as torch.autograd) ----
 * A float tensor marked with tf_set_requires_grad is a leaf. An op with an
 * input that requires a gradient records a node (while grad mode is on, per
 * thread); its output then requires one too. tf_backward(loss) walks the
 * nodes from loss back to the leaves and adds each leaf's gradient to its
 * tf_grad. The nodes keep only what their gradient reads (a product keeps
 * its factors, a sum nothing) and let go of it as backward passes them,
 * unless TF_BACKWARD_RETAIN_GRAPH is given.
 *
 *   tf_set_requires_grad(w, true);
 *   for (step ...) {
 *       tf_linear(x, w, b, &y); tf_cross_entropy(y, t, -1, TF_REDUCTION_MEAN, &loss);
 *       tf_backward(loss, NULL, 0);           // tf_grad(w) is dloss/dw
 *       tf_optimizer_step(opt);                // SGD, Adam or AdamW over the parameters
 *       tf_optimizer_zero_grad(opt);
 *   }
 *
 * Rules: views (reshape, permute, slice, expand, ...) carry the gradient
 * back to the tensor they view; broadcasting sums it over the broadcast
 * axes; a cast or a move between devices brings it back to the input's
 * dtype and device. In-place writes (the _into forms, tf_copy_into) into a
 * tensor that requires a gradient are refused while grad mode is on (as
 * PyTorch refuses them on leaves; do them with grad mode off); a tensor a
 * node saved and that was written in place since is an error at backward
 * (TF_ERR_INVALID_ARGUMENT, naming the op), as PyTorch's version counter.
 * An op without a gradient rule reached by backward is TF_ERR_UNSUPPORTED
 * naming it. Backward is not itself recorded (no higher-order gradients).
 * On any failure of tf_backward no leaf's gradient is changed. */
#define TF_BACKWARD_RETAIN_GRAPH 1u
/* Mark (or unmark) a leaf: only float tensors (TF_ERR_DTYPE), and not a
 * tensor an op made while recording (TF_ERR_INVALID_ARGUMENT). */
TF_API tf_status tf_set_requires_grad(tf_tensor *t, bool requires_grad);
TF_API bool tf_requires_grad(const tf_tensor *t);
/* A tensor no recorded op made (every tensor that does not require a
 * gradient is one too). */
TF_API bool tf_is_leaf(const tf_tensor *t);
/* A leaf's accumulated gradient, or NULL: owned by t, valid until the next
 * tf_backward that reaches t, tf_zero_grad(t), tf_set_grad(t) or t's
 * release (tf_tensor_retain it to keep it longer). */
TF_API tf_tensor *tf_grad(const tf_tensor *t);
/* Forget t's gradient (PyTorch's zero_grad(set_to_none=True)). */
TF_API void tf_zero_grad(tf_tensor *t);
/* Set a leaf's gradient (a new reference to g; same shape; NULL forgets). */
TF_API tf_status tf_set_grad(tf_tensor *t, tf_tensor *g);
/* Gradients of root with respect to the leaves it depends on, added to
 * their tf_grad. seed is droot (root's shape); NULL means 1 and needs a
 * root of one element. flags: TF_BACKWARD_RETAIN_GRAPH keeps the nodes for
 * another backward. */
TF_API tf_status tf_backward(const tf_tensor *root, const tf_tensor *seed, unsigned flags);
/* A new tensor sharing t's memory that requires no gradient. */
TF_API tf_status tf_detach(const tf_tensor *t, tf_tensor **out);
/* Grad mode of the calling thread (on at first). tf_set_grad_enabled
 * returns the mode before, so that a no-grad block restores it:
 *   bool was = tf_set_grad_enabled(false); ...; tf_set_grad_enabled(was); */
TF_API bool tf_grad_enabled(void);
TF_API bool tf_set_grad_enabled(bool enabled);

/* ---- optimizers (torch.optim's SGD, Adam, AdamW) ----
 * Over a list of leaves that require gradients (retained until destroy).
 * A step skips parameters without a gradient, runs with grad mode off on
 * each parameter's device, and computes all it needs before it writes:
 * on any error every parameter and state is unchanged.
 *   SGD:  g = grad + weight_decay p; buf = momentum buf + (1 - dampening) g
 *         (g at the first step); g = nesterov ? g + momentum buf : buf
 *         (g without momentum); p -= lr g
 *   Adam, AdamW: as tf_adam_step (AdamW's weight decay decoupled), step
 *         counted by the optimizer. */
typedef enum tf_optimizer_kind { TF_OPTIMIZER_SGD = 0, TF_OPTIMIZER_ADAM = 1, TF_OPTIMIZER_ADAMW = 2 } tf_optimizer_kind;
typedef struct tf_optimizer_config {
    tf_optimizer_kind kind;
    double lr;
    double momentum, dampening;          /* SGD */
    bool nesterov;                       /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2, eps;            /* Adam, AdamW */
    double weight_decay;
} tf_optimizer_config;
typedef struct tf_optimizer tf_optimizer;
/* PyTorch's defaults: SGD lr 0.01; Adam lr 1e-3, betas (0.9, 0.999), eps
 * 1e-8; AdamW the same with weight_decay 0.01. */
TF_API tf_optimizer_config tf_optimizer_defaults(tf_optimizer_kind kind);
TF_API tf_status tf_optimizer_create(const tf_optimizer_config *config, int n, tf_tensor *const *params,
                                     tf_optimizer **out);
TF_API void tf_optimizer_destroy(tf_optimizer *o);
TF_API tf_status tf_optimizer_step(tf_optimizer *o);
/* tf_zero_grad on every parameter. */
TF_API void tf_optimizer_zero_grad(tf_optimizer *o);
TF_API tf_status tf_optimizer_set_lr(tf_optimizer *o, double lr);
/* Steps taken; -1 for NULL. */
TF_API int64_t tf_optimizer_steps(const tf_optimizer *o);
/* The parameters (owned by o) and their count. */
TF_API int tf_optimizer_params(const tf_optimizer *o, tf_tensor *const **params);
/* torch.nn.utils.clip_grad_norm_: the 2-norm of all the gradients together
 * (into *total_norm, may be NULL); when above max_norm, every gradient is
 * scaled by max_norm / (norm + 1e-6), all or none. */
TF_API tf_status tf_clip_grad_norm(int n, tf_tensor *const *params, double max_norm, double *total_norm);
TF_API tf_status tf_optimizer_clip_grad_norm(tf_optimizer *o, double max_norm, double *total_norm);

/* ---- files ---- */
/* NumPy .npy (format 1.0 written; 1.0, 2.0 and 3.0 read; little- or
 * big-endian; C order). bf16, which NumPy lacks, is written with the descr
 * 'bfloat16' (NumPy refuses such a file rather than misread it). Loading
 * validates magic, header, dtype, shape and size: a malformed or truncated
 * file is TF_ERR_FORMAT, never a crash. */
TF_API tf_status tf_npy_save(const char *path, const tf_tensor *t);
TF_API tf_status tf_npy_load(const char *path, tf_device *dev, tf_tensor **out);
/* safetensors: the header is parsed strictly (JSON, bounded), each tensor's
 * dtype, shape and byte range is validated (ranges must tile the data
 * exactly, as the format requires), and the file is memory-mapped: loading
 * a tensor copies it straight from the mapping to its device. */
typedef struct tf_safetensors tf_safetensors;
TF_API tf_status tf_safetensors_open(const char *path, tf_safetensors **out);
TF_API int tf_safetensors_count(const tf_safetensors *f);
TF_API const char *tf_safetensors_name(const tf_safetensors *f, int i);   /* NULL if out of range */
/* What a tensor is, without loading it (name valid while f is open). */
typedef struct tf_safetensors_tensor {
    const char *name;
    tf_dtype dtype;
    int ndim;
    int64_t shape[TF_MAX_DIMS];
    uint64_t nbytes;
} tf_safetensors_tensor;
TF_API tf_status tf_safetensors_tensor_info(const tf_safetensors *f, int i, tf_safetensors_tensor *info);
TF_API int tf_safetensors_find(const tf_safetensors *f, const char *name);   /* its index, or -1 */
/* A missing name is TF_ERR_INVALID_ARGUMENT naming what the file has: the
 * name with a prefix added or removed when there is one ("bert.encoder..."
 * for "encoder..."), else its first names. */
TF_API tf_status tf_safetensors_load(const tf_safetensors *f, const char *name, tf_device *dev, tf_tensor **out);
/* Loaded, then cast to dtype on dev (bf16 weights from an f32 file, say). */
TF_API tf_status tf_safetensors_load_as(const tf_safetensors *f, const char *name, tf_device *dev, tf_dtype dtype,
                                        tf_tensor **out);
TF_API void tf_safetensors_close(tf_safetensors *f);
TF_API tf_status tf_safetensors_save(const char *path, int n, const char *const *names, const tf_tensor *const *tensors);
/* GGUF, llama.cpp's format (versions 2 and 3): typed metadata, tensor
 * infos and aligned tensor data, memory-mapped. Every count, string length,
 * offset and size is checked against the file before it is used (a bad
 * file is TF_ERR_FORMAT with a message); keys and tensor names must be
 * unique, tensors aligned, inside the file and not overlapping. Values are
 * reached by key index (tf_gguf_find_key) and element (0 for a scalar). */
typedef struct tf_gguf tf_gguf;
typedef enum tf_gguf_type {            /* the file's value type ids */
    TF_GGUF_NONE = -1,
    TF_GGUF_U8 = 0, TF_GGUF_I8 = 1, TF_GGUF_U16 = 2, TF_GGUF_I16 = 3, TF_GGUF_U32 = 4, TF_GGUF_I32 = 5,
    TF_GGUF_F32 = 6, TF_GGUF_BOOL = 7, TF_GGUF_STRING = 8, TF_GGUF_ARRAY = 9, TF_GGUF_U64 = 10, TF_GGUF_I64 = 11,
    TF_GGUF_F64 = 12
} tf_gguf_type;
typedef struct tf_gguf_tensor {
    const char *name;                  /* owned by the file */
    int block_type;                    /* ggml's type id: 0 F32, 1 F16, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K, ... */
    const char *block_type_name;       /* "Q4_1" */
    int ndim;
    int64_t shape[4];                  /* outermost first: ggml's ne reversed */
    const void *data;                  /* the raw bytes, in the mapping */
    uint64_t nbytes;
} tf_gguf_tensor;
TF_API tf_status tf_gguf_open(const char *path, tf_gguf **out);
TF_API void tf_gguf_close(tf_gguf *f);
TF_API int tf_gguf_version(const tf_gguf *f);
TF_API int64_t tf_gguf_key_count(const tf_gguf *f);
TF_API const char *tf_gguf_key(const tf_gguf *f, int64_t i);               /* NULL if out of range */
TF_API int64_t tf_gguf_find_key(const tf_gguf *f, const char *key);        /* -1 if absent */
TF_API tf_gguf_type tf_gguf_key_type(const tf_gguf *f, int64_t i);
TF_API tf_gguf_type tf_gguf_array_type(const tf_gguf *f, int64_t i);       /* TF_GGUF_NONE if not an array */
TF_API int64_t tf_gguf_array_length(const tf_gguf *f, int64_t i);          /* -1 if not an array */
/* Integers and bools as int64 (a u64 beyond INT64_MAX is TF_ERR_SIZE);
 * numbers as double; strings as bytes + length, in the mapping, not
 * NUL-terminated. The wrong kind is TF_ERR_DTYPE, a bad index TF_ERR_INDEX. */
TF_API tf_status tf_gguf_get_int(const tf_gguf *f, int64_t i, int64_t elem, int64_t *v);
TF_API tf_status tf_gguf_get_float(const tf_gguf *f, int64_t i, int64_t elem, double *v);
TF_API tf_status tf_gguf_get_string(const tf_gguf *f, int64_t i, int64_t elem, const char **str, size_t *len);
TF_API int64_t tf_gguf_tensor_count(const tf_gguf *f);
TF_API int64_t tf_gguf_find_tensor(const tf_gguf *f, const char *name);    /* -1 if absent */
TF_API tf_status tf_gguf_tensor_info(const tf_gguf *f, int64_t i, tf_gguf_tensor *info);
/* A tensor whose block type is a tensorframe dtype (F32, F16, BF16, F64,
 * I8, I32, I64, and the quantized dtypes of TF_QDTYPE_LIST, their bytes
 * as stored) onto dev; other block types are TF_ERR_UNSUPPORTED (their
 * bytes are in the info). */
TF_API tf_status tf_gguf_load(const tf_gguf *f, const char *name, tf_device *dev, tf_tensor **out);
/* Any tensor whose block type is a float or integer dtype, or one of the
 * quantized dtypes of TF_QDTYPE_LIST (decoded bit-for-bit as ggml's
 * reference does), onto dev as the float dtype `dtype`. Other block types
 * are TF_ERR_UNSUPPORTED. */
TF_API tf_status tf_gguf_load_as(const tf_gguf *f, const char *name, tf_device *dev, tf_dtype dtype, tf_tensor **out);

/* ---- indexing and shaping ---- */
/* Rows (or slices along `axis`) of x picked by a 1-D i32/i64 index tensor;
 * the result has the index count as that axis's extent. An index outside
 * [0, extent) is TF_ERR_INDEX. */
TF_API tf_status tf_index_select(const tf_tensor *x, int axis, const tf_tensor *index, tf_tensor **out);
/* Embedding lookup: weight [vocab, dim], ids of any shape -> ids.shape + [dim]
 * (f32 rows from a quantized table). */
TF_API tf_status tf_embedding(const tf_tensor *weight, const tf_tensor *ids, tf_tensor **out);
/* PyTorch's gather: index has x's ndim (extents <= x's off the axis);
 * out[i][j] = x[i][index[i][j]] for axis 1, and so on. */
TF_API tf_status tf_gather(const tf_tensor *x, int axis, const tf_tensor *index, tf_tensor **out);
/* Join along an existing axis (concat) or a new one (stack); dtypes
 * promote, devices follow the mixed-device policy. */
TF_API tf_status tf_concat(int n, const tf_tensor *const *xs, int axis, tf_tensor **out);
TF_API tf_status tf_stack(int n, const tf_tensor *const *xs, int axis, tf_tensor **out);
/* Views of consecutive pieces along `axis` with the given extents (which
 * must add up to the axis's extent); outs gets n tensors, or none on error. */
TF_API tf_status tf_split(const tf_tensor *x, int axis, int n, const int64_t *sizes, tf_tensor **outs);
/* Constant padding, PyTorch's F.pad order: pads = {last_before, last_after,
 * second_last_before, ...} for npairs trailing axes; negative pads crop. */
TF_API tf_status tf_pad(const tf_tensor *x, int npairs, const int64_t *pads, double value, tf_tensor **out);
/* Lower (tril) or upper (triu) triangle of the last two axes; diagonal 0 is
 * the main one, positive above it. */
TF_API tf_status tf_tril(const tf_tensor *x, int64_t diagonal, tf_tensor **out);
TF_API tf_status tf_triu(const tf_tensor *x, int64_t diagonal, tf_tensor **out);
/* torch.tile: repeat the whole tensor reps[i] times along each axis (reps
 * shorter than ndim is padded with 1s in front, longer adds axes). */
TF_API tf_status tf_tile(const tf_tensor *x, int nreps, const int64_t *reps, tf_tensor **out);
/* Reverse the order along each listed axis (a copy). */
TF_API tf_status tf_flip(const tf_tensor *x, int naxes, const int *axes, tf_tensor **out);
/* NumPy matmul: 1-D operands are promoted to matrices and the added axis
 * removed from the result; batch axes broadcast. */
TF_API tf_status tf_matmul(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
/* Reduce one axis (negative counts from the end) or TF_ALL_AXES. sum of
 * integers or bool gives i64; mean needs a float dtype; the mean of zero
 * elements is NaN, their sum 0. */
TF_API tf_status tf_sum(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
TF_API tf_status tf_mean(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
/* max/min keep the dtype and propagate NaN; argmax/argmin give i64
 * positions (along the axis, or row-major over all axes), the first on
 * ties, a NaN's if there is one. An empty reduction is TF_ERR_SHAPE. */
TF_API tf_status tf_max(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
TF_API tf_status tf_min(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
TF_API tf_status tf_argmax(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
TF_API tf_status tf_argmin(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
/* The p-norm along an axis (or TF_ALL_AXES), float dtypes: p = 2 is
 * sqrt(sum x^2), 1 sum |x|, INFINITY max |x|, any other p > 0
 * (sum |x|^p)^(1/p). */
TF_API tf_status tf_norm(const tf_tensor *x, double p, int axis, bool keepdim, tf_tensor **out);
/* x / max(norm(x, p, axis), eps), as PyTorch's F.normalize (eps 1e-12 there). */
TF_API tf_status tf_normalize(const tf_tensor *x, double p, int axis, double eps, tf_tensor **out);
/* The mean along `axis` of the elements the mask keeps: mask (bool, or
 * weights of any dtype) covers x's leading axes ([B, L] for x [B, L, D])
 * and broadcasts over the rest; sum(x * mask) / max(sum(mask), 1e-9), so a
 * row with nothing kept gives 0 (sentence-transformers' mean pooling). */
TF_API tf_status tf_masked_mean(const tf_tensor *x, const tf_tensor *mask, int axis, bool keepdim, tf_tensor **out);
/* Product (integers and bool give i64, wrapping; empty gives 1). */
TF_API tf_status tf_prod(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
/* Variance and standard deviation with Bessel-style correction (>= 0: 1 for
 * the unbiased estimate, 0 for the population's): sum of squared deviations
 * divided by max(0, N - correction), so N <= correction gives NaN or inf
 * as in PyTorch. Float dtypes. */
TF_API tf_status tf_var(const tf_tensor *t, int axis, int64_t correction, bool keepdim, tf_tensor **out);
TF_API tf_status tf_std(const tf_tensor *t, int axis, int64_t correction, bool keepdim, tf_tensor **out);
/* log(sum(exp(x))), computed as m + log(sum(exp(x - m))) with m the max;
 * empty gives -inf. Float dtypes. */
TF_API tf_status tf_logsumexp(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out);
/* Running sum along one axis (integers and bool give i64). */
TF_API tf_status tf_cumsum(const tf_tensor *t, int axis, tf_tensor **out);

/* Sorting and searching (every dtype but the quantized ones).
 *
 * One total order: numbers in their order (-0.0 equal to 0.0), NaN after
 * every number and equal to every NaN. Sorts are stable: equal values keep
 * the order they had, in both directions. `descending` sorts largest first,
 * so NaN comes first (the array API's and NumPy's flip of the ascending
 * order). `axis` may be negative; a 0-d tensor is a line of one.
 *
 * tf_sort gives the values in order (the input's dtype and shape);
 * tf_argsort their positions along the axis (i64), so that
 * take_along_axis(t, argsort) == sort.
 * tf_searchsorted gives, for each of `values`, the position in the 1-d
 * `sorted` at which it would go to keep it sorted: the first such position,
 * or with `right` the last (NumPy's side='left' / 'right'). The result is
 * i64 with `values`' shape. The two inputs are promoted to a common dtype
 * first (an int8 sorted and f32 values compare as f32). `sorted` must be in
 * the order above; if it is not, the positions are unspecified (no error:
 * checking costs a pass).
 *
 * GPU backends rank each element against its line (O(n^2) work per line of
 * n, all in parallel); the CPU merges (O(n log n)). */
TF_API tf_status tf_sort(const tf_tensor *t, int axis, bool descending, tf_tensor **out);
TF_API tf_status tf_argsort(const tf_tensor *t, int axis, bool descending, tf_tensor **out);
TF_API tf_status tf_searchsorted(const tf_tensor *sorted, const tf_tensor *values, bool right, tf_tensor **out);

/* Dense linear algebra through LAPACK (OpenBLAS's), on floating-point
 * matrices (..., M, N): a stack is factored matrix by matrix.
 *
 * Where it runs: the matrices are read to the host and factored there in
 * float64 whatever their dtype (an f32 result is the float64 one rounded);
 * results are made on the input's device in its dtype. Device solvers
 * (cuSOLVER, rocSOLVER) are not used yet. A build without LAPACK says
 * TF_ERR_UNSUPPORTED.
 *
 * tf_linalg_cholesky   L with A = L L^T (upper: U with A = U^T U), from the
 *                      lower (upper) triangle; not positive definite:
 *                      TF_ERR_INVALID_ARGUMENT naming the matrix.
 * tf_linalg_solve      X with A X = B, a (..., M, M), b (..., M, K) with a's
 *                      batch (broadcast first); singular: TF_ERR_INVALID_ARGUMENT.
 * tf_linalg_inv        A^-1; singular: TF_ERR_INVALID_ARGUMENT.
 * tf_linalg_det        det(A), shape (...); 0-by-0 gives 1.
 * tf_linalg_slogdet    sign (-1, 0 or 1) and log|det(A)| (-inf when singular).
 * tf_linalg_qr         A = Q R: Q (..., M, K) and R (..., K, N), K = min(M, N),
 *                      or with `complete` Q (..., M, M) and R (..., M, N).
 * tf_linalg_svd        A = U diag(S) Vh, S (..., K) descending; U (..., M, K)
 *                      and Vh (..., K, N), or with full_matrices (..., M, M)
 *                      and (..., N, N); u and vh NULL: the values alone.
 * tf_linalg_eigh       eigenvalues (..., N) ascending and eigenvectors as the
 *                      columns of (..., N, N) of a symmetric matrix, read
 *                      from its lower triangle; eigenvectors NULL: the values.
 * Multiple outputs are all set or all NULL. */
TF_API tf_status tf_linalg_cholesky(const tf_tensor *a, bool upper, tf_tensor **out);
TF_API tf_status tf_linalg_solve(const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
TF_API tf_status tf_linalg_inv(const tf_tensor *a, tf_tensor **out);
TF_API tf_status tf_linalg_det(const tf_tensor *a, tf_tensor **out);
TF_API tf_status tf_linalg_slogdet(const tf_tensor *a, tf_tensor **sign, tf_tensor **logabsdet);
TF_API tf_status tf_linalg_qr(const tf_tensor *a, bool complete, tf_tensor **q, tf_tensor **r);
TF_API tf_status tf_linalg_svd(const tf_tensor *a, bool full_matrices, tf_tensor **u, tf_tensor **s, tf_tensor **vh);
TF_API tf_status tf_linalg_eigh(const tf_tensor *a, tf_tensor **eigenvalues, tf_tensor **eigenvectors);

/* Elementwise unary ops on float tensors (f16/bf16 computed in f32); the
 * result has the input's shape and dtype. NaN propagates through all of
 * them (relu and clamp included) except sign, which gives 0 for NaN as
 * PyTorch's does. round rounds half to even; gelu is
 * the erf form, gelu_tanh the tanh approximation; softplus is
 * log(1 + exp(x)), or x above 20 (PyTorch's threshold). */
TF_API tf_status tf_neg(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_abs(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_sign(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_exp(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_log(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_log1p(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_expm1(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_sqrt(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_rsqrt(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_sin(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_cos(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_tanh(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_sigmoid(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_relu(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_leaky_relu(const tf_tensor *x, double negative_slope, tf_tensor **out);
TF_API tf_status tf_gelu(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_gelu_tanh(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_silu(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_softplus(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_floor(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_ceil(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_round(const tf_tensor *x, tf_tensor **out);
/* Inverse trigonometric and hyperbolic functions, as C's: acos and asin of
 * |x| > 1, acosh of x < 1 and atanh of |x| > 1 give NaN; atanh(+-1) is
 * +-inf. */
TF_API tf_status tf_acos(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_asin(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_atan(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_acosh(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_asinh(const tf_tensor *x, tf_tensor **out);
TF_API tf_status tf_atanh(const tf_tensor *x, tf_tensor **out);
/* min(max(x, lo), hi); pass NAN for a missing bound. */
TF_API tf_status tf_clamp(const tf_tensor *x, double lo, double hi, tf_tensor **out);
/* A 0-d tensor holding `value` (converted as by tf_cast), so that scalars
 * broadcast: x * 0.5 is tf_mul(x, half). */
TF_API tf_status tf_scalar(tf_device *dev, tf_dtype dt, double value, tf_tensor **out);

TF_API const char *tf_op_name(tf_op_kind op);       /* "add"; "?" if invalid */
/* The op table at run time (a library newer than the header may have more
 * ops): the number of ops, an op's tensor inputs (-1 if invalid) and its
 * kernel family (the table's kernel column; TF_KERNEL_NONE if invalid).
 * Bindings derive their op lists from these. Thread-safe. */
TF_API int tf_op_count(void);
TF_API int tf_op_arity(tf_op_kind op);
/* Whether the op takes inputs of dtype dt (the op table's accepts column,
 * complex dtypes included); false for an invalid op or dtype. */
TF_API bool tf_op_accepts(tf_op_kind op, tf_dtype dt);
TF_API tf_op_kernel tf_op_family(tf_op_kind op);

/* ------------------------------------------------------------------------ */
/* Debugging                                                                */

/* Fill every op output with 0xFF bytes before its kernel runs, so a kernel
 * that skips elements shows NaN/-1 (the conformance suite turns this on). */
TF_API void tf_debug_poison_outputs(bool on);
/* Fault injection (SQLite's faultsim): from now on, the nth allocation the
 * library makes — host memory in the core and in backends that use the
 * host's allocator, and every device buffer — fails as if memory were
 * exhausted, once. 0 turns it off. For tests of failure paths. */
TF_API void tf_debug_fail_allocation(int64_t nth);
/* Allocations counted since the last tf_debug_fail_allocation call (the
 * injected failure happened if this reached nth). */
TF_API int64_t tf_debug_allocation_count(void);

/* Free every tensor storage still cached, unload plugins, forget devices.
 * The next call re-initializes. A tensor still alive may be released later
 * (a C++ destructor, a garbage collector, a static destructor): its host
 * memory is freed then, a device's memory went with its backend here; any
 * other use of it is an error of the caller's. Not thread safe: call it
 * when no other thread uses the library. */
TF_API void tf_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif /* TENSORFRAME_H */
