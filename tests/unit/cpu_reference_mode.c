/* TF_CPU_KERNELS=reference means no overrides at all: a GEMM the BLAS layer
 * would take runs the reference loops (and gives the same numbers).
 * usage: cpu_reference_mode blas|none   (what the run must have used) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/cpu.h>
#include <tensorframe/tensorframe.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    bool want_blas = !strcmp(argv[1], "blas");
    tf_device *cpu = NULL;
    int64_t shape[2] = {96, 96};
    tf_tensor *a = NULL, *b = NULL, *c = NULL;
    if (tf_device_get("cpu", &cpu) || tf_rand(cpu, TF_F32, 2, shape, 1, &a) || tf_rand(cpu, TF_F32, 2, shape, 2, &b) ||
        tf_matmul(a, b, &c)) {
        printf("FAIL: %s\n", tf_last_error());
        return 1;
    }
    tf_cpu_blas_calls_fn calls = (tf_cpu_blas_calls_fn)tf_backend_proc_address("cpu", "tf_cpu_blas_calls");
    float va[96 * 96], vb[96 * 96], vc[96 * 96];
    tf_tensor_read(a, va, sizeof va);
    tf_tensor_read(b, vb, sizeof vb);
    tf_tensor_read(c, vc, sizeof vc);
    double worst = 0;
    for (int i = 0; i < 96; i++)
        for (int j = 0; j < 96; j++) {
            double s = 0;
            for (int k = 0; k < 96; k++) s += (double)va[i * 96 + k] * vb[k * 96 + j];
            worst = fmax(worst, fabs(s - vc[i * 96 + j]) / 96);
        }
    unsigned long long n = calls ? (unsigned long long)calls() : 0;
    bool ok = calls && (want_blas ? n > 0 : n == 0) && worst < 1e-5;
    printf("%s: %llu BLAS calls (expected %s), max error per term %.2e\n", ok ? "ok" : "FAIL", n,
           want_blas ? "some" : "none", worst);
    tf_tensor_release(a);
    tf_tensor_release(b);
    tf_tensor_release(c);
    tf_shutdown();
    printf("%d passed, %d failed\n", ok, !ok);
    return ok ? 0 : 1;
}
