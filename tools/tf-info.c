/* tf-info: what tensorframe sees on this machine — backends (loaded, or
 * why not), devices with memory and capabilities, and the one "auto" picks. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

static const char *type_name(tf_device_type t) {
    switch (t) {
    case TF_DEVICE_TYPE_CPU: return "CPU";
    case TF_DEVICE_TYPE_GPU: return "GPU";
    case TF_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case TF_DEVICE_TYPE_ACCELERATOR: return "accelerator";
    }
    return "?";
}

static void print_caps(const tf_device_caps *c) {
    printf("      dtypes:");
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++)
        if (c->dtypes & (1u << dt)) printf(" %s", tf_dtype_name((tf_dtype)dt));
    printf("\n      async: %s, pinned host memory: %s, unified memory: %s%s%s\n", c->async ? "yes" : "no",
           c->pinned_host_memory ? "yes" : "no", c->unified_memory ? "yes" : "no",
           c->tensor_cores ? ", tensor cores" : "", c->emulated ? ", emulated on the CPU" : "");
}

static void print_backends(void) {
    int n = tf_backend_count();
    printf("Backends (%d):\n", n);
    for (int i = 0; i < n; i++) {
        tf_backend_props b;
        if (tf_backend_get_props(i, &b) != TF_OK) continue;
        char devices[64];
        int used = snprintf(devices, sizeof devices, "%d device%s", b.device_count, b.device_count == 1 ? "" : "s");
        if (b.threads)
            snprintf(devices + used, sizeof devices - (size_t)used, ", %d thread%s", b.threads, b.threads == 1 ? "" : "s");
        if (b.loaded)
            printf("  %-10s loaded   %-9s  [%s]%s%s\n", b.name, devices, b.source, b.reason[0] ? "  — " : "", b.reason);
        else
            printf("  %-10s skipped  %s: %s  [%s]\n", b.name, tf_status_name(b.status), b.reason, b.source);
    }
}

/* The backends of the priority list in force that were not found at all. */
static void print_absent_listed_backends(void) {
    char list[1024], path[2048];
    if (tf_backend_priority_get(list, sizeof list) != TF_OK) return;
    if (tf_plugin_search_path(path, sizeof path) != TF_OK) path[0] = 0;
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        bool seen = false;
        for (int i = 0; i < tf_backend_count() && !seen; i++) {
            tf_backend_props b;
            seen = tf_backend_get_props(i, &b) == TF_OK && !strcmp(b.name, name);
        }
        if (!seen)
            printf("  %-10s not found  no libtensorframe-%s.so in %s\n", name, name, path[0] ? path : "(no plugin directories)");
    }
}

/* The allocator's configuration: what TF_ALLOC_CONF or the program set. */
static void print_alloc_conf(const tf_alloc_conf *c, uint64_t limit) {
    char lim[64] = "none", keep[64] = "device default";
    if (limit) snprintf(lim, sizeof lim, "%.1f MiB", limit / 1048576.0);
    if (c->release_threshold == UINT64_MAX) snprintf(keep, sizeof keep, "none");
    else if (c->release_threshold) snprintf(keep, sizeof keep, "%.1f MiB", c->release_threshold / 1048576.0);
    printf("      allocator conf: limit %s, %d classes per power of two, release threshold %s, "
           "max reserved ratio %.2f, caching %s\n", lim, c->round_divisions, keep, c->max_reserved_ratio,
           c->caching ? "on" : "off");
}

static void print_limits(const tf_device *d) {
    tf_device_limits l;
    tf_device_hints h;
    if (tf_device_get_limits(d, &l, &h) != TF_OK) return;
    printf("      limits: buffer %.0f MiB, binding %.0f MiB, %u compute units, work-group %u (%u x %u x %u), "
           "subgroup %u, shared %.0f KiB, caches %.0f / %.0f / %.0f KiB, %u MHz\n",
           l.max_buffer_bytes / 1048576.0, l.max_binding_bytes / 1048576.0, l.compute_units, l.max_work_group_size,
           l.max_work_group_dims[0], l.max_work_group_dims[1], l.max_work_group_dims[2], l.subgroup_size,
           l.shared_memory_bytes / 1024.0, l.cache_bytes[0] / 1024.0, l.cache_bytes[1] / 1024.0,
           l.cache_bytes[2] / 1024.0, l.clock_mhz);
    printf("      hints: align %u bytes, work-group %u, %u f32 lanes, async %s\n", h.alignment, h.work_group_size,
           h.vector_width_f32, h.async_helps ? "helps" : "does not help");
}

static void print_devices(void) {
    int n = tf_device_count();
    printf("Devices (%d):\n", n);
    for (int i = 0; i < n; i++) {
        tf_device_props p;
        if (tf_device_get_props(tf_device_at(i), &p) != TF_OK) {
            printf("  %s: %s\n", tf_device_name(tf_device_at(i)), tf_last_error());
            continue;
        }
        printf("  %-12s %s — %s\n", p.name, type_name(p.type), p.description);
        printf("      memory: %.2f GiB total, %.2f GiB free\n", p.memory_total / 1073741824.0,
               p.memory_free / 1073741824.0);
        tf_memory_stats ms;
        if (tf_device_memory_stats(tf_device_at(i), &ms) == TF_OK)
            printf("      allocator: %.1f MiB in use, %.1f MiB reserved, peak %.1f MiB, %llu cache hits, %llu misses\n",
                   ms.allocated / 1048576.0, ms.reserved / 1048576.0, ms.peak_allocated / 1048576.0,
                   (unsigned long long)ms.cache_hits, (unsigned long long)ms.cache_misses);
        tf_alloc_conf ac;
        if (tf_device_alloc_conf_get(tf_device_at(i), &ac) == TF_OK) print_alloc_conf(&ac, ms.limit);
        print_caps(&p.caps);
        print_limits(tf_device_at(i));
    }
}

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        printf("usage: tf-info\n  Environment: TF_BACKEND=opencl,cpu  TF_PLUGIN_PATH=dir:file  TF_LOG_LEVEL=info\n");
        return 0;
    }
    printf("tensorframe %d.%d.%d\n", TF_VERSION_MAJOR, TF_VERSION_MINOR, TF_VERSION_PATCH);
    print_backends();
    print_absent_listed_backends();
    print_devices();
    char prio[512];
    if (tf_backend_priority_get(prio, sizeof prio) == TF_OK) printf("Priority: %s\n", prio);
    static const char *const policies[] = {"highest-priority input device", "first input's device", "strict"};
    printf("Mixed-device policy: %s\n", policies[tf_mixed_policy_get()]);
    printf("CPU threads: %d (TF_NUM_THREADS, tf_set_num_threads)\n", tf_get_num_threads());
    tf_device *dev;
    if (tf_device_get("auto", &dev) == TF_OK) printf("auto -> %s\n", tf_device_name(dev));
    else printf("auto -> none: %s\n", tf_last_error());
    tf_shutdown();
    return 0;
}
