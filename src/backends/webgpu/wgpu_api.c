#define _GNU_SOURCE
#include "wgpu_api.h"
#include "gpu_runtime.h"   /* tf_gpu_env_string */

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every entry point, or the first one missing (an older library). */
static bool resolve(tf_wgpu_api *api, void *lib, char *why, size_t why_len) {
#define TF__WGPU_RESOLVE(ret, name, args)                                                   \
    *(void **)&api->name = dlsym(lib, "wgpu" #name);                                        \
    if (!api->name) {                                                                       \
        snprintf(why, why_len, "%.300s lacks wgpu%s (wgpu-native 27 or newer is needed)", api->path, #name); \
        return false;                                                                       \
    }
    TF_WGPU_FUNCTIONS(TF__WGPU_RESOLVE)
#undef TF__WGPU_RESOLVE
    return true;
}

/* The library stays mapped for the life of the process (RTLD_NODELETE):
 * its driver threads outlive any one user of the plugin. */
static bool try_path(tf_wgpu_api *api, const char *path, char *why, size_t why_len) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, why_len, "%s", e ? e : "dlopen failed");
        return false;
    }
    snprintf(api->path, sizeof api->path, "%s", path);
    return resolve(api, lib, why, why_len);
}

bool tf_wgpu_load(tf_wgpu_api *api, const char *plugin_dir, char *why, size_t why_len) {
    memset(api, 0, sizeof *api);
    const char *env = tf_gpu_env_string("TF_WGPU_LIBRARY");
    if (env) {                         /* named by the user: that one or none */
        if (try_path(api, env, why, why_len)) return true;
        char inner[400];
        snprintf(inner, sizeof inner, "%s", why);
        snprintf(why, why_len, "TF_WGPU_LIBRARY=%s: %s", env, inner);
        return false;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/libwgpu_native-release.so", plugin_dir);
    if (try_path(api, path, why, why_len)) return true;
    static const char *const names[] = {"libwgpu_native.so", "libwgpu_native-release.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (try_path(api, names[i], why, why_len)) return true;
    snprintf(why, why_len, "no libwgpu_native (set TF_WGPU_LIBRARY, or put it beside the plugin in %s)", plugin_dir);
    return false;
}
