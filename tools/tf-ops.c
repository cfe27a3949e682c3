/* tf-ops: the op list as a Markdown table, generated from the op table
 * (TF_OP_LIST), on stdout or into the file named (the build writes
 * build/docs/OPS.md so). */
#include <stdio.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && !freopen(argv[1], "w", stdout))) {
        fprintf(stderr, "usage: tf-ops [FILE]  (the op list as Markdown, on stdout or into FILE)\n");
        return 2;
    }
    printf("| op | inputs | shape rule | dtype rule | accepts | conformance NMSE bound |\n");
    printf("|---|---|---|---|---|---|\n");
#define ROW(E, n, ar, sh, dt, acc, dom, k, kern)                                                            \
    printf("| `%s` | %d | %s | %s | %s | %s |\n", #n, ar, #sh, #dt, #acc,                   \
           (k) == 0 ? "exact" : (!strcmp(#sh, "REDUCE") || !strcmp(#sh, "MATMUL")) ? #k " eps^2 x length" : #k " eps^2");
    TF_OP_LIST(ROW)
#undef ROW
    printf("\nShape rules: BROADCAST (NumPy broadcasting), MATMUL (NumPy matmul), REDUCE (one axis or all, keepdim), "
           "SAME (output shape = input shape), CREATE (shape from the caller).\n"
           "Dtype rules: PROMOTE (`tf_promote_types`), PROMOTE_FLOAT (promoted, integers to f32), "
           "SUM (floats keep their dtype, integers and bool give i64), SAME, CAST (chosen by the caller).\n"
           "Accepts: ALL (every dtype), NUMERIC (all but bool), FLOAT (f32 f64 f16 bf16). "
           "eps is the output dtype's machine epsilon; \"x length\" multiplies by the reduction length "
           "(elements per output, or K for matmul); integer outputs are always compared exactly.\n");
    return 0;
}
