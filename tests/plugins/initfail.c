/* A plugin whose init fails (as a GPU plugin would without its driver, if it
 * chose to fail rather than report zero devices). */
#include <tensorframe/backend.h>

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *host, tf_backend_reg *out) {
    (void)out;
    return host->set_error(TF_ERR_BACKEND, "initfail: no hardware found");
}
