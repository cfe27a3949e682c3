/* A plugin whose init calls back into tensorframe (found with dlsym, as a
 * plugin linked against the library would): the call must come back with
 * an error, never hang the process on the registry's lock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <tensorframe/backend.h>

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *host, tf_backend_reg *out) {
    (void)out;
    int (*count)(void);
    const char *(*last_error)(void);
    *(void **)&count = dlsym(RTLD_DEFAULT, "tf_device_count");
    *(void **)&last_error = dlsym(RTLD_DEFAULT, "tf_last_error");
    if (!count || !last_error) return host->set_error(TF_ERR_PLUGIN, "reentrant: tensorframe's symbols not found");
    int n = count();
    return host->set_error(TF_ERR_PLUGIN, "reentrant: tf_device_count from init gave %d (%s)", n, last_error());
}
