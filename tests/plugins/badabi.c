/* A plugin built for a future ABI major: the loader must skip it. */
#include <string.h>
#include <tensorframe/backend.h>

static const tf_backend_iface iface = {TF_STRUCT_INIT(tf_backend_iface)};

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *host, tf_backend_reg *out) {
    (void)host;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->abi_major = TF_BACKEND_ABI_MAJOR + 1;
    out->name = "badabi";
    out->iface = &iface;
    return TF_OK;
}
