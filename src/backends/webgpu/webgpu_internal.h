/* What the WebGPU plugin's two halves share: the device (webgpu_backend.c
 * opens it and moves bytes; wgsl_kernels.c builds and launches kernels on it). */
#ifndef TF_WEBGPU_INTERNAL_H
#define TF_WEBGPU_INTERNAL_H

#include <stdbool.h>

#include <tensorframe/backend.h>

#include "gpu_runtime.h"
#include "plan.h"
#include "wgpu_api.h"

/* The kernels' workgroup sizes: WG for 1-D kernels, RWG for a reduction's
 * workgroup (and plan.c's rwg), TS x TS for a matmul tile (plan.c's ts).
 * 256 invocations is WebGPU's guaranteed minimum. */
#define WG_SIZE 64
#define WG_RWG 256
#define WG_TS 16

typedef enum { PIPE_NONE, PIPE_READY, PIPE_FAILED } wg_pipe_state;

/* A pipeline: kernel k for dtype dt, specialised to op code `op` (-1 for a
 * kernel that serves one op) and to how many bindings each buffer's window
 * is split into (`parts`, 0 when none is). */
typedef struct wg_pipe {
    int dt, kernel, op;
    uint32_t parts;
    wg_pipe_state state;
    WGPUComputePipeline pipeline;
    WGPUBindGroupLayout layout;
} wg_pipe;

/* A tensor's bytes [lo, hi) in its buffer: what a launch binds (a window of
 * the buffer, so that a tensor far into a large buffer stays within the
 * binding limit). */
typedef struct wg_window {
    WGPUBuffer buffer;
    uint64_t lo, hi;
} wg_window;

#define WG_MAX_WINDOWS 64

typedef struct wg_dev {
    tf_gpu_dev gd;
    int index;
    WGPUAdapter adapter;
    WGPUDevice device;
    WGPUQueue queue;
    WGPUAdapterType adapter_type;
    WGPULimits limits;
    bool shader_f16;
    char adapter_name[128], driver[128], backend_api[16];
    uint32_t subgroup_size;              /* the adapter's smallest subgroup; 0 if it does not say */
    WGPUBuffer params;                   /* the launch's scalar arguments (one launch at a time) */
    wg_pipe *pipes;                      /* built so far (n_pipes of cap_pipes) */
    int n_pipes, cap_pipes;
    bool uncaptured;                     /* a launch raised an error no scope caught */
    char uncaptured_message[400];
    char build_error[512];               /* the last pipeline that failed to build */
    uint64_t launches;
    size_t flat_groups;                  /* the most workgroups a 1-D (grid-stride) kernel gets */
    bool no_qgemv;                       /* quantized matmuls never take qgemv (see avoid_qgemv) */
    bool flat_matmul;                    /* matmuls take matmul_flat (see wg_variant) */
    wg_window windows[WG_MAX_WINDOWS];   /* the running op's (plan.c's mem() hands out pointers to these) */
    int n_windows;
} wg_dev;

extern const tf_host_api *tf_wg_host;
extern tf_wgpu_api tf_wg;

/* The error the work since the last push of an error scope raised
 * (WGPUErrorType_NoError if none), its message in `message`. */
WGPUErrorType tf_wg_pop_scope(wg_dev *d, char *message, size_t n);

/* Can the WGSL kernels run op on d? */
bool tf_wg_supports(wg_dev *d, const tf_op *op);
/* Run op through plan.c with the WGSL kernels (caller holds the device). */
tf_status tf_wg_run(wg_dev *d, const tf_op *op);
/* Create and free the per-device kernel state (the parameter buffer, pipelines). */
bool tf_wg_kernels_init(wg_dev *d);
void tf_wg_kernels_release(wg_dev *d);

#endif
