/* custom_backend: register a backend written in this program, select it by
 * name, run ops on it, and watch the ops it lacks fall back to the CPU. */
#include <stdio.h>

#include <tensorframe/tensorframe.h>

#include "example.h"

#include "mybackend/mybackend.h"

int main(void) {
    CHECK(mybackend_register());
    tf_device *dev;
    CHECK(tf_device_get("mybackend:0", &dev));
    tf_device_props props;
    CHECK(tf_device_get_props(dev, &props));
    printf("device %s: %s\n", props.name, props.description);

    int64_t shape[2] = {3, 4};
    tf_tensor *a, *b, *c, *d, *s;
    CHECK(tf_ones(dev, TF_F32, 2, shape, &a));              /* fill: runs on mybackend */
    CHECK(tf_arange(dev, TF_F32, 0, 12, 1, &b));            /* arange: falls back */
    tf_tensor *b2;
    CHECK(tf_reshape(b, 2, shape, &b2));
    CHECK(tf_add(a, b2, &c));                               /* add: runs on mybackend */
    tf_tensor *ct;
    CHECK(tf_transpose(c, 0, 1, &ct));
    CHECK(tf_matmul(c, ct, &d));                            /* matmul: falls back */
    CHECK(tf_sum(d, TF_ALL_AXES, false, &s));               /* sum: runs on mybackend */
    float total;
    CHECK(tf_tensor_read(s, &total, sizeof total));
    printf("sum((1 + arange(12)).reshape(3,4) @ its transpose) = %g (expected 1566)\n", total);
    printf("ops dispatched to %s: %llu, of which ran on the CPU: %llu (matmul %llu, arange %llu)\n",
           tf_device_name(dev), (unsigned long long)tf_device_op_count(dev),
           (unsigned long long)tf_device_fallback_count(dev, TF_OP_COUNT),
           (unsigned long long)tf_device_fallback_count(dev, TF_OP_MATMUL),
           (unsigned long long)tf_device_fallback_count(dev, TF_OP_ARANGE));

    mybackend_stats_fn stats = (mybackend_stats_fn)tf_backend_proc_address("mybackend", "mybackend_stats");
    mybackend_stats st = {0};
    if (stats) stats(&st);
    printf("mybackend allocator: %llu live buffers, %llu bytes live, %llu allocations, %llu kernels run\n",
           (unsigned long long)st.live_buffers, (unsigned long long)st.live_bytes,
           (unsigned long long)st.total_allocs, (unsigned long long)st.ops_run);

    tf_tensor *all[] = {a, b, b2, c, ct, d, s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
    tf_shutdown();
    return total == 1566.0f ? 0 : 1;
}
