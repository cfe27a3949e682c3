/* See hip_plan.h. */
#include "hip_plan.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

bool tf_hip_arch_base(const char *gcn_arch_name, char *out, size_t n) {
    if (!n) return false;
    out[0] = 0;
    if (!gcn_arch_name || strncmp(gcn_arch_name, "gfx", 3) != 0) return false;
    size_t len = strcspn(gcn_arch_name, ":");
    if (len < 6 || len >= n) return false;           /* "gfx" and at least three digits */
    for (size_t i = 3; i < len; i++)
        if (!isxdigit((unsigned char)gcn_arch_name[i])) return false;
    memcpy(out, gcn_arch_name, len);
    out[len] = 0;
    return true;
}

int tf_hip_find_target(const char *base, const char *const *targets, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(base, targets[i])) return i;
    return -1;
}

void tf_hip_list_targets(const char *const *targets, int n, char *out, size_t out_n) {
    size_t used = 0;
    if (out_n) out[0] = 0;
    for (int i = 0; i < n && used < out_n; i++) {
        int w = snprintf(out + used, out_n - used, "%s%s", i ? ", " : "", targets[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

const tf_hip_code_object *tf_hip_code_object_for(const tf_hip_code_object *objs, int n, const char *target,
                                                 int program) {
    for (int i = 0; i < n; i++)
        if (objs[i].program == program && !strcmp(objs[i].target, target)) return &objs[i];
    return NULL;
}

static int hex_digit(char c) { return isdigit((unsigned char)c) ? c - '0' : tolower((unsigned char)c) - 'a' + 10; }

int tf_hip_gfx_version(const char *base) {
    char b[32];
    if (!tf_hip_arch_base(base, b, sizeof b)) return 0;
    size_t len = strlen(b);                          /* gfx<major><minor><stepping> */
    int major = 0;
    for (size_t i = 3; i < len - 2; i++) {
        if (!isdigit((unsigned char)b[i])) return 0;
        major = major * 10 + (b[i] - '0');
    }
    return major * 1000 + hex_digit(b[len - 2]) * 10 + hex_digit(b[len - 1]);
}

bool tf_hip_matrix_cores(const char *base) {
    int v = tf_hip_gfx_version(base);
    return v == 9008 || v == 9010 || (v >= 9040 && v < 9050) || (v >= 11000 && v < 12000);
}

tf_gpu_error tf_hip_error_kind(hipError_t e) {
    switch (e) {
    case hipErrorIllegalAddress: case hipErrorLaunchTimeOut: case hipErrorAssert: case hipErrorLaunchFailure:
    case hipErrorECCNotCorrectable: case hipErrorPriorLaunchFailure:
        return TF_GPU_ERROR_STICKY;
    case hipErrorOutOfMemory:
        return TF_GPU_ERROR_OUT_OF_MEMORY;
    default:
        return TF_GPU_ERROR_OTHER;
    }
}
