/* A fake HIP runtime for the ROCm plugin's host side, loaded through
 * TF_HIP_LIB: every call the plugin's symbol table names, with the HIP
 * header's own prototypes, on host memory. FAKE_HIP picks the machine:
 *   unset      no device (hipErrorNoDevice, as the real runtime without a GPU)
 *   gfx90a     one MI210-like device (wave64, 104 CUs, 64 GiB)
 *   gfx1031    one device of a target the plugin has no code object for
 * hipModuleLoadData checks that it got an AMDGPU ELF for the device's
 * target and hipModuleGetFunction finds kernels in its symbol table, so the
 * plugin's choice of code object and kernel names is checked for real.
 * Kernels cannot run here: every launch fails with hipErrorIllegalAddress,
 * the sticky error that must mark the device lost. Streams, events and
 * allocations are heap objects, so a leak or double free shows under ASan.
 * Built with FAKE_HIP_MISSING_SYMBOL, hipGraphLaunch is left out. */
#define _POSIX_C_SOURCE 200809L
#include <elf.h>

#include "elf_symbols.h"
#include <stdlib.h>
#include <string.h>

#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#define API __attribute__((visibility("default")))

static int modules_loaded, functions_found;
static hipError_t last_error;

static const char *mode(void) {
    const char *m = getenv("FAKE_HIP");
    return m && *m ? m : "none";
}

static hipError_t fail(hipError_t e) {
    last_error = e;
    return e;
}

API void fake_hip_counts(int *modules, int *functions) {
    *modules = modules_loaded;
    *functions = functions_found;
}

API hipError_t hipGetDeviceCount(int *count) {
    *count = 0;
    if (!strcmp(mode(), "none")) return fail(hipErrorNoDevice);
    *count = 1;
    return hipSuccess;
}

API hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int device) {
    if (device != 0 || !strcmp(mode(), "none")) return fail(hipErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    bool cdna = !strcmp(mode(), "gfx90a");
    strcpy(p->name, cdna ? "AMD Instinct MI210 (fake)" : "AMD Radeon RX 6700 XT (fake)");
    strcpy(p->gcnArchName, cdna ? "gfx90a:sramecc+:xnack-" : "gfx1031");
    p->totalGlobalMem = (size_t)64 << 30;
    p->sharedMemPerBlock = 64 << 10;
    p->warpSize = cdna ? 64 : 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
    p->clockRate = 1700000;
    p->multiProcessorCount = cdna ? 104 : 40;
    p->l2CacheSize = 8 << 20;
    p->major = cdna ? 9 : 10;
    p->minor = cdna ? 0 : 3;
    return hipSuccess;
}

API hipError_t hipSetDevice(int device) { return device == 0 ? hipSuccess : fail(hipErrorInvalidDevice); }
API hipError_t hipGetLastError(void) {
    hipError_t e = last_error;
    last_error = hipSuccess;
    return e;
}

API const char *hipGetErrorName(hipError_t e) {
    switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorIllegalAddress: return "hipErrorIllegalAddress";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorInvalidImage: return "hipErrorInvalidImage";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
    }
}

API const char *hipGetErrorString(hipError_t e) { return e == hipSuccess ? "no error" : "fake HIP error"; }
API hipError_t hipDriverGetVersion(int *v) { *v = 50221153; return hipSuccess; }
API hipError_t hipRuntimeGetVersion(int *v) { *v = 50221153; return hipSuccess; }

API hipError_t hipMemGetInfo(size_t *free_b, size_t *total) {
    *total = (size_t)64 << 30;
    *free_b = (size_t)60 << 30;
    return hipSuccess;
}

API hipError_t hipMalloc(void **p, size_t n) {
    *p = calloc(1, n ? n : 1);
    return *p ? hipSuccess : fail(hipErrorOutOfMemory);
}
API hipError_t hipFree(void *p) { free(p); return hipSuccess; }
API hipError_t hipHostMalloc(void **p, size_t n, unsigned int flags) { (void)flags; return hipMalloc(p, n); }
API hipError_t hipHostFree(void *p) { free(p); return hipSuccess; }

API hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, hipMemcpyKind kind, hipStream_t s) {
    (void)kind;
    (void)s;
    memmove(dst, src, n);
    return hipSuccess;
}

API hipError_t hipMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, hipStream_t s) {
    (void)dd;
    (void)sd;
    return hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToDevice, s);
}

/* Streams and events: heap objects the plugin must destroy. */
API hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned int flags) {
    (void)flags;
    *s = malloc(16);
    return *s ? hipSuccess : fail(hipErrorOutOfMemory);
}
API hipError_t hipStreamDestroy(hipStream_t s) { free(s); return hipSuccess; }
API hipError_t hipStreamSynchronize(hipStream_t s) { (void)s; return hipSuccess; }
API hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned int f) { (void)s; (void)e; (void)f; return hipSuccess; }
API hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned f) {
    (void)f;
    *e = malloc(16);
    return *e ? hipSuccess : fail(hipErrorOutOfMemory);
}
API hipError_t hipEventDestroy(hipEvent_t e) { free(e); return hipSuccess; }
API hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) { (void)e; (void)s; return hipSuccess; }
API hipError_t hipEventSynchronize(hipEvent_t e) { (void)e; return hipSuccess; }
API hipError_t hipEventQuery(hipEvent_t e) { (void)e; return hipSuccess; }
API hipError_t hipEventElapsedTime(float *ms, hipEvent_t a, hipEvent_t b) { (void)a; (void)b; *ms = 0; return hipSuccess; }
API hipError_t hipDeviceCanAccessPeer(int *can, int a, int b) { (void)a; (void)b; *can = 0; return hipSuccess; }
API hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int f) { (void)peer; (void)f; return fail(hipErrorNotSupported); }
API hipError_t hipDeviceSynchronize(void) { return hipSuccess; }

/* No graphs: a capture is refused, so the core replays node by node. */
API hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode m) { (void)s; (void)m; return fail(hipErrorNotSupported); }
API hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g) { (void)s; *g = NULL; return fail(hipErrorNotSupported); }
API hipError_t hipGraphInstantiate(hipGraphExec_t *e, hipGraph_t g, hipGraphNode_t *n, char *log, size_t len) {
    (void)g; (void)n; (void)log; (void)len;
    *e = NULL;
    return fail(hipErrorNotSupported);
}
#ifndef FAKE_HIP_MISSING_SYMBOL
API hipError_t hipGraphLaunch(hipGraphExec_t e, hipStream_t s) { (void)e; (void)s; return fail(hipErrorNotSupported); }
#endif
API hipError_t hipGraphExecDestroy(hipGraphExec_t e) { (void)e; return hipSuccess; }
API hipError_t hipGraphDestroy(hipGraph_t g) { (void)g; return hipSuccess; }

/* ---- code objects: AMDGPU ELFs, checked ---- */

typedef struct fake_module { const unsigned char *image; } fake_module;

#define EF_MACH_GFX90A 0x3f

API hipError_t hipModuleLoadData(hipModule_t *m, const void *image) {
    const unsigned char *img = image;
    const Elf64_Ehdr *h = image;
    *m = NULL;
    if (memcmp(img, ELFMAG, SELFMAG) != 0 || h->e_machine != EM_AMDGPU) return fail(hipErrorInvalidImage);
    if ((h->e_flags & 0xff) != EF_MACH_GFX90A) return fail(hipErrorNoBinaryForGpu);   /* only gfx90a loads */
    fake_module *fm = malloc(sizeof *fm);
    if (!fm) return fail(hipErrorOutOfMemory);
    fm->image = img;
    *m = (hipModule_t)fm;
    modules_loaded++;
    return hipSuccess;
}

API hipError_t hipModuleUnload(hipModule_t m) {
    free(m);
    modules_loaded--;
    return hipSuccess;
}

API hipError_t hipModuleGetFunction(hipFunction_t *f, hipModule_t m, const char *name) {
    fake_module *fm = (fake_module *)m;
    if (!elf_has_function(fm->image, name)) {
        *f = NULL;
        return fail(hipErrorNotFound);
    }
    *f = (hipFunction_t)fm;                          /* any non-null handle */
    functions_found++;
    return hipSuccess;
}

API hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                                     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                     hipStream_t s, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)s; (void)params;
    (void)extra;
    return fail(hipErrorIllegalAddress);
}
