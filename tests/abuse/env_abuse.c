/* The environment variables tensorframe reads, set to hostile values: each
 * case runs this program again as a child with one variable set, and
 * checks that a bad value is ignored (the default stands) with exactly one
 * warning naming the variable and the value, and that a good value is
 * taken without a warning. The child reports what the library made of the
 * variable on stdout; its stderr holds the warnings. */
#define _GNU_SOURCE
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensorframe/tensorframe.h>

extern char **environ;

/* ---- the child: what the library did with the variable ---- */

static int child(const char *what) {
    if (!strcmp(what, "log")) setenv("TF_NUM_THREADS", "many", 1);   /* its warning goes through TF_LOG_LEVEL */
    tf_device *cpu;
    if (tf_device_get("cpu", &cpu) != TF_OK) return 2;
    if (!strcmp(what, "threads")) {
        printf("%d\n", tf_get_num_threads());
    } else if (!strcmp(what, "kernels")) {            /* an op runs whatever TF_CPU_* says */
        tf_tensor *a = NULL, *b = NULL;
        int64_t shape[2] = {16, 16};
        if (tf_ones(cpu, TF_F32, 2, shape, &a) != TF_OK || tf_matmul(a, a, &b) != TF_OK) return 3;
        float v[256];
        tf_tensor_read(b, v, sizeof v);
        printf("%g\n", (double)v[0]);
        tf_tensor_release(a);
        tf_tensor_release(b);
    } else if (!strcmp(what, "qkernels")) {            /* a quantized product: TF_CPU_QDOT's kernels */
        unsigned char block[34] = {0x00, 0x3C};        /* Q8_0: scale 1.0 (f16), then 32 weights of 1 */
        memset(block + 2, 1, 32);
        int64_t ws[2] = {1, 32}, xs[2] = {1, 32};
        tf_tensor *w = NULL, *x = NULL, *y = NULL;
        float out;
        if (tf_tensor_from_data(cpu, TF_Q8_0, 2, ws, block, &w) != TF_OK || tf_ones(cpu, TF_F32, 2, xs, &x) != TF_OK ||
            tf_matmul_quantized(x, w, &y) != TF_OK || tf_tensor_read(y, &out, sizeof out) != TF_OK)
            return 3;
        printf("%g\n", (double)out);
        tf_tensor_release(w);
        tf_tensor_release(x);
        tf_tensor_release(y);
    } else if (!strcmp(what, "log")) {
        printf("%d\n", tf_get_num_threads());
    }
    tf_shutdown();
    return 0;
}

/* ---- the parent ---- */

typedef struct env_case {
    const char *var, *value, *what;
    const char *want_stdout;           /* NULL: the default, computed */
    bool warns;
} env_case;

static int problems, cases;

static int default_threads(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* Runs the child with var=value; its stdout and stderr into out/err. */
static int run_child(const char *self, const env_case *c, char *out, size_t on, char *err, size_t en) {
    char assign[512], outf[] = "/tmp/tf-env-abuse-out-XXXXXX", errf[] = "/tmp/tf-env-abuse-err-XXXXXX";
    snprintf(assign, sizeof assign, "%s=%s", c->var, c->value);
    int ofd = mkstemp(outf), efd = mkstemp(errf);
    if (ofd < 0 || efd < 0) return -1;
    int n = 0;
    while (environ[n]) n++;
    char **env = calloc((size_t)n + 2, sizeof *env);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(environ[i], c->var, strlen(c->var)) || environ[i][strlen(c->var)] != '=') env[k++] = environ[i];
    env[k++] = assign;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ofd, 1);
    posix_spawn_file_actions_adddup2(&fa, efd, 2);
    char *argv[] = {(char *)self, "--child", (char *)c->what, NULL};
    pid_t pid;
    int status = -1;
    if (posix_spawn(&pid, self, &fa, NULL, argv, env) == 0) waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    FILE *o = fdopen(ofd, "r"), *e = fdopen(efd, "r");
    rewind(o), rewind(e);
    out[fread(out, 1, on - 1, o)] = 0;
    err[fread(err, 1, en - 1, e)] = 0;
    fclose(o), fclose(e);
    unlink(outf), unlink(errf);
    return status;
}

static void check(const char *self, const env_case *c) {
    char out[4096], err[16384], want[64], warning[600];
    cases++;
    int status = run_child(self, c, out, sizeof out, err, sizeof err);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL %s=%s: the child ended with status %d\n%s", c->var, c->value, status, err);
        problems++;
        return;
    }
    snprintf(want, sizeof want, "%d\n", default_threads());
    const char *expect = c->want_stdout ? c->want_stdout : want;
    if (strcmp(out, expect)) {
        printf("FAIL %s=%s: the library made '%.*s' of it, expected '%.*s'\n", c->var, c->value, (int)strcspn(out, "\n"),
               out, (int)strcspn(expect, "\n"), expect);
        problems++;
    }
    snprintf(warning, sizeof warning, "%s=%s is ignored", c->var, c->value);
    size_t n = count(err, warning);
    if (c->warns ? n != 1 : count(err, c->var) != 0) {
        printf("FAIL %s=%s: %zu warnings naming it (want %d); stderr:\n%s\n", c->var, c->value, c->warns ? n : count(err, c->var),
               c->warns, err);
        problems++;
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    const char *self = "/proc/self/exe";
    char path[4096];
    ssize_t len = readlink(self, path, sizeof path - 1);
    if (len <= 0) return 1;
    path[len] = 0;
    const env_case cases_[] = {
        /* the probe's: each once taken or wrapped by atoi */
        {"TF_NUM_THREADS", "99999", "threads", NULL, true},
        {"TF_NUM_THREADS", "-2147483649", "threads", NULL, true},
        {"TF_NUM_THREADS", "4x", "threads", NULL, true},
        {"TF_NUM_THREADS", "abc", "threads", NULL, true},
        /* the API's limits, and their neighbours */
        {"TF_NUM_THREADS", "0", "threads", NULL, true},
        {"TF_NUM_THREADS", "258", "threads", NULL, true},
        {"TF_NUM_THREADS", "9223372036854775808", "threads", NULL, true},
        {"TF_NUM_THREADS", "1", "threads", "1\n", false},
        {"TF_NUM_THREADS", "3", "threads", "3\n", false},
        {"TF_NUM_THREADS", "", "threads", NULL, false},             /* empty is unset */
        /* choices: a bad one warns, the kernels still give the right answer */
        {"TF_CPU_ISA", "avx9000", "kernels", "16\n", true},
        {"TF_CPU_ISA", "AVX2", "kernels", "16\n", true},
        {"TF_CPU_ISA", "generic", "kernels", "16\n", false},
        {"TF_CPU_KERNELS", "ref", "kernels", "16\n", true},
        {"TF_CPU_KERNELS", "reference", "kernels", "16\n", false},
        {"TF_CPU_QDOT", "fastest", "qkernels", "32\n", true},
        {"TF_CPU_QDOT", "scalar", "qkernels", "32\n", false},
        /* the log level, which the warning itself goes through */
        {"TF_LOG_LEVEL", "loud", "log", NULL, true},
        {"TF_LOG_LEVEL", "de bug", "log", NULL, true},
        {"TF_LOG_LEVEL", "error", "log", NULL, false},             /* valid: the warning is below it */
    };
    for (size_t i = 0; i < sizeof cases_ / sizeof *cases_; i++) check(path, &cases_[i]);
    printf("env_abuse: %d cases, %d problems\n", cases, problems);
    return problems ? 1 : 0;
}
