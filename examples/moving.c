/* moving: tensors on two devices, moved explicitly and by the mixed-device
 * policy. The second device is the example backend registered in-process
 * (any plugin device works the same way: "opencl:0", "cuda:0"). */
#include <stdio.h>

#include <tensorframe/tensorframe.h>

#include "example.h"

#include "mybackend/mybackend.h"

int main(void) {
    CHECK(mybackend_register());
    tf_device *cpu, *other;
    CHECK(tf_device_get("cpu", &cpu));
    CHECK(tf_device_get("mybackend", &other));
    int64_t n = 5;
    tf_tensor *x, *y, *x_there, *z, *back;
    CHECK(tf_arange(cpu, TF_F32, 0, 5, 1, &x));
    CHECK(tf_tensor_to(x, other, &x_there));               /* explicit move */
    CHECK(tf_ones(other, TF_F32, 1, &n, &y));
    printf("x on %s, x_there on %s, y on %s\n", tf_device_name(tf_tensor_device(x)),
           tf_device_name(tf_tensor_device(x_there)), tf_device_name(tf_tensor_device(y)));

    /* x (cpu) + y (mybackend): the default policy computes on the input
     * device ranked higher (user backends rank above cpu). */
    CHECK(tf_add(x, y, &z));
    printf("x + y computed on %s\n", tf_device_name(tf_tensor_device(z)));
    tf_tensor_release(z);
    CHECK(tf_mixed_policy_set(TF_MIXED_FIRST_INPUT));
    CHECK(tf_add(x, y, &z));
    printf("with TF_MIXED_FIRST_INPUT: on %s\n", tf_device_name(tf_tensor_device(z)));
    tf_tensor_release(z);
    CHECK(tf_mixed_policy_set(TF_MIXED_STRICT));
    tf_status s = tf_add(x, y, &z);
    printf("with TF_MIXED_STRICT: %s (%s)\n", tf_status_name(s), tf_last_error());

    CHECK(tf_tensor_to(x_there, cpu, &back));
    float v[5];
    CHECK(tf_tensor_read(back, v, sizeof v));
    printf("round trip: %g %g %g %g %g\n", v[0], v[1], v[2], v[3], v[4]);
    tf_tensor *all[] = {x, y, x_there, back};
    for (size_t i = 0; i < 4; i++) tf_tensor_release(all[i]);
    tf_shutdown();
    return 0;
}
