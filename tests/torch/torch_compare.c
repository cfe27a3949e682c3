/* Read the cases generate.py wrote (inputs and PyTorch's float64 outputs as
 * .npy), run them through tensorframe on every device, compare.
 * usage: torch_compare DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

#define NMSE_LIMIT 1e-9   /* the inputs are f32 and so is our arithmetic */

typedef struct params { char key[16][32]; double value[16]; int n; } params;

static double param(const params *p, const char *key, double dflt) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->key[i], key)) return p->value[i];
    return dflt;
}

static tf_status load(const char *dir, const char *name, const char *kind, int i, tf_device *dev, tf_tensor **out) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s%d.npy", dir, name, kind, i);
    return tf_npy_load(path, dev, out);
}

/* Run one case; outputs in got[] (up to 3). */
static tf_status run_case(const char *op, const params *p, tf_tensor **in, int n_in, tf_tensor **got) {
    if (!strcmp(op, "gelu")) return param(p, "tanh", 0) ? tf_gelu_tanh(in[0], &got[0]) : tf_gelu(in[0], &got[0]);
    if (!strcmp(op, "layernorm")) return tf_layernorm(in[0], in[1], in[2], param(p, "eps", 1e-5), &got[0]);
    if (!strcmp(op, "rmsnorm")) return tf_rmsnorm(in[0], in[1], param(p, "eps", 1e-6), &got[0]);
    if (!strcmp(op, "rope"))
        return tf_rope(in[0], in[1], 1, (int64_t)param(p, "rot", 0), param(p, "theta", 10000),
                       param(p, "neox", 0) ? TF_ROPE_HALF_SPLIT : TF_ROPE_INTERLEAVED, &got[0]);
    if (!strcmp(op, "sdpa"))
        return tf_sdpa(in[0], in[1], in[2], NULL, 0, param(p, "causal", 0) != 0, (int64_t)param(p, "q_offset", -1), &got[0]);
    if (!strcmp(op, "conv2d")) {
        int64_t st[2] = {(int64_t)param(p, "sh", 1), (int64_t)param(p, "sw", 1)};
        int64_t pd[2] = {(int64_t)param(p, "ph", 0), (int64_t)param(p, "pw", 0)};
        int64_t dl[2] = {(int64_t)param(p, "dh", 1), (int64_t)param(p, "dw", 1)};
        return tf_conv2d(in[0], in[1], in[2], st, pd, dl, (int64_t)param(p, "groups", 1), &got[0]);
    }
    if (!strcmp(op, "batch_norm")) {
        tf_status s = tf_batch_norm(in[0], in[1], in[2], in[3], in[4], true, param(p, "momentum", 0.1), param(p, "eps", 1e-5), &got[0]);
        got[1] = tf_tensor_retain(in[1]);                  /* updated in place */
        got[2] = tf_tensor_retain(in[2]);
        return s;
    }
    if (!strcmp(op, "cross_entropy"))
        return tf_cross_entropy(in[0], in[1], (int64_t)param(p, "ignore", -100), TF_REDUCTION_MEAN, &got[0]);
    if (!strcmp(op, "var"))
        return tf_var(in[0], (int)param(p, "axis", 0), (int64_t)param(p, "correction", 1), false, &got[0]);
    if (!strcmp(op, "adamw")) {
        tf_tensor *m = NULL, *v = NULL;
        tf_status s = tf_copy(in[0], &got[0]);
        if (s == TF_OK) s = tf_zeros(tf_tensor_device(in[0]), TF_F32, tf_tensor_ndim(in[0]), tf_tensor_shape(in[0]), &m);
        if (s == TF_OK) s = tf_zeros(tf_tensor_device(in[0]), TF_F32, tf_tensor_ndim(in[0]), tf_tensor_shape(in[0]), &v);
        for (int step = 1; step < n_in && s == TF_OK; step++)
            s = tf_adam_step(got[0], in[step], m, v, param(p, "lr", 1e-3), param(p, "beta1", 0.9), param(p, "beta2", 0.999),
                             param(p, "eps", 1e-8), param(p, "wd", 0), step, true);
        tf_tensor_release(m);
        tf_tensor_release(v);
        return s;
    }
    fprintf(stderr, "unknown op %s\n", op);
    return TF_ERR_UNSUPPORTED;
}

/* NMSE of got against want (both read as f64). */
static tf_status compare(const tf_tensor *got, const tf_tensor *want, double *nmse, double *max_err) {
    int64_t n = tf_tensor_numel(want);
    if (tf_tensor_numel(got) != n) return TF_ERR_SHAPE;
    tf_tensor *g64 = NULL;
    tf_status s = tf_cast(got, TF_F64, &g64);
    double *g = malloc(sizeof(double) * (size_t)(n ? n : 1)), *w = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (s == TF_OK) s = tf_tensor_read(g64, g, sizeof(double) * (size_t)n);
    if (s == TF_OK) s = tf_tensor_read(want, w, sizeof(double) * (size_t)n);
    double num = 0, den = 0;
    *max_err = 0;
    for (int64_t i = 0; s == TF_OK && i < n; i++) {
        double d = g[i] - w[i];
        num += d * d;
        den += w[i] * w[i];
        *max_err = fmax(*max_err, fabs(d));
        if (isnan(g[i]) != isnan(w[i])) num = INFINITY;
    }
    *nmse = den > 0 ? num / den : num;
    free(g);
    free(w);
    tf_tensor_release(g64);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: torch_compare DIR\n");
        return 2;
    }
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/manifest.txt", argv[1]);
    FILE *mf = fopen(path, "r");
    if (!mf) {
        fprintf(stderr, "cannot open %s\n", path);
        return 2;
    }
    tf_device *cpu;
    tf_device_get("cpu", &cpu);
    int passed = 0, failed = 0;
    while (fgets(line, sizeof line, mf)) {
        char name[128], op[64];
        int n_in, n_out, used;
        if (sscanf(line, "%127s %63s %d %d%n", name, op, &n_in, &n_out, &used) != 4) continue;
        params p = {.n = 0};
        for (char *tok = strtok(line + used, " \n"); tok && p.n < 16; tok = strtok(NULL, " \n")) {
            char *eq = strchr(tok, '=');
            if (!eq) continue;
            *eq = 0;
            snprintf(p.key[p.n], sizeof p.key[p.n], "%s", tok);
            p.value[p.n++] = strtod(eq + 1, NULL);
        }
        for (int di = 0; di < tf_device_count(); di++) {
            tf_device *dev = tf_device_at(di);
            tf_device_props props;
            tf_device_get_props(dev, &props);
            if (strcmp(props.backend, "cpu") && strcmp(props.backend, "opencl") && strcmp(props.backend, "cuda") &&
                strcmp(props.backend, "webgpu"))
                continue;
            tf_tensor *in[8] = {NULL}, *got[3] = {NULL}, *want = NULL;
            tf_status s = TF_OK;
            for (int i = 0; i < n_in && s == TF_OK; i++) s = load(argv[1], name, "in", i, dev, &in[i]);
            if (s == TF_OK) s = run_case(op, &p, in, n_in, got);
            for (int k = 0; k < n_out; k++) {
                double nmse = 0, max_err = 0;
                tf_status sk = s;
                if (sk == TF_OK) sk = load(argv[1], name, "out", k, cpu, &want);
                if (sk == TF_OK) sk = compare(got[k], want, &nmse, &max_err);
                bool ok = sk == TF_OK && nmse <= NMSE_LIMIT;
                printf("%s %s %s output %d: %s (NMSE %.2e, max error %.2e)%s%s\n", ok ? "ok  " : "FAIL", tf_device_name(dev),
                       name, k, ok ? "matches PyTorch" : "differs", nmse, max_err, sk != TF_OK ? " " : "",
                       sk != TF_OK ? tf_last_error() : "");
                ok ? passed++ : failed++;
                tf_tensor_release(want);
                want = NULL;
            }
            for (int i = 0; i < 8; i++) tf_tensor_release(in[i]);
            for (int k = 0; k < 3; k++) tf_tensor_release(got[k]);
        }
    }
    fclose(mf);
    printf("torch: %d passed, %d failed\n", passed, failed);
    tf_shutdown();
    return failed || !passed ? 1 : 0;
}
