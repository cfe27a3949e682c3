/* Plugins load only when a device other than the CPU is first wanted, and
 * are unloaded by tf_shutdown: checked in this process's own memory map. */
#include <stdio.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

static int passed, failed;

static void check(bool ok, const char *what) {
    printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    if (ok) passed++;
    else failed++;
}

/* Is a file whose name contains `part` mapped into this process? */
static bool mapped(const char *part) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, part) != NULL;
    if (f) fclose(f);
    return found;
}

int main(void) {
    tf_device *cpu = NULL, *dev = NULL;
    check(tf_device_get("cpu", &cpu) == TF_OK, "cpu without plugins");
    tf_tensor *t = NULL;
    int64_t n = 4;
    check(tf_ones(cpu, TF_F32, 1, &n, &t) == TF_OK, "an op on the cpu");
    tf_tensor_release(t);
    check(!mapped("libtensorframe-"), "no plugin is mapped after using only the cpu");
    check(tf_device_count() >= 2, "enumerating devices finds the test plugin");
    check(mapped("libtensorframe-testplug.so"), "enumeration loaded the plugins");
    tf_shutdown();
    check(!mapped("libtensorframe-"), "tf_shutdown unloaded every plugin");
    check(tf_device_get("testplug:0", &dev) == TF_OK, "a plugin device after re-initialization");
    check(mapped("libtensorframe-testplug.so"), "asking for it by name loaded it");
    check(tf_ones(dev, TF_F32, 1, &n, &t) == TF_OK, "an op on the plugin's device");
    tf_tensor_release(t);
    tf_shutdown();
    check(!mapped("libtensorframe-"), "unloaded again");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
