/* The backend registry: the built-in CPU backend, plugins found on disk,
 * backends registered in-process; device naming, selection by priority and
 * memory, the mixed-device policy, and shutdown. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine.h"

#ifndef TF_PLUGIN_INSTALL_DIR
#define TF_PLUGIN_INSTALL_DIR ""
#endif

#define MAX_PRIORITY 32
/* An optional slot of a backend's own table, or NULL. */
#define BACKEND_SLOT(b, f) (TF_HAS_FIELD((b)->reg.iface, tf_backend_iface, f) ? (b)->reg.iface->f : NULL)
#define PLUGIN_PREFIX "libtensorframe-"
#define PLUGIN_SUFFIX ".so"

struct tf_backend_entry {
    tf_backend_reg reg;                  /* the backend's own, copied */
    char name[32];
    char source[512];
    char note[512];
    bool host;                           /* the built-in backend: the host CPU itself */
    void *dl_handle;                     /* NULL unless a plugin */
    tf_device *devices;
    int device_count;
};

/* A plugin that was found but not loaded, and why. */
typedef struct skipped_plugin {
    char name[32];
    char source[512];
    tf_status status;
    char reason[512];
} skipped_plugin;

/* The default priority list is data, set when the library is built
 * (-DTF_DEFAULT_PRIORITY=...): the core ranks devices by what they are and
 * by a list, never by a backend's name written into its code. */
#ifndef TF_DEFAULT_PRIORITY
#define TF_DEFAULT_PRIORITY "cuda,rocm,webgpu,vulkan,opencl"
#endif

static struct {
    pthread_mutex_t lock;
    atomic_bool initialized;
    atomic_bool plugins_loaded;          /* plugins load when a non-CPU device is first wanted */
    tf_backend_entry **backends;         /* grown as backends arrive: no fixed cap */
    int n_backends, cap_backends;
    skipped_plugin *skipped;
    int n_skipped, cap_skipped, dropped_skips;
    tf_device **devices;
    int n_devices, cap_devices;
    char search_dirs[2048];              /* where plugins were looked for */
    char priority[MAX_PRIORITY][32];     /* the list in force: explicit, or the default */
    int n_priority;
    bool priority_explicit;              /* set in code or by TF_BACKEND */
    atomic_int policy;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic uint32_t generation = 1;

uint32_t tf__generation(void) { return atomic_load_explicit(&generation, memory_order_relaxed); }
bool tf__device_is_host(const tf_device *dev) { return dev->backend->host; }

/* Set on the thread that runs a plugin's init, which holds the registry's
 * lock: a call back into the library from there gets an error, not a hang. */
static _Thread_local bool in_plugin_init;

/* ---- host services handed to backends ---- */

static void host_log(tf_log_level level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tf__log(level, "%s", line);
}

static tf_status host_set_error(tf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tf__verror(s, fmt, ap);
    va_end(ap);
    return s;
}

static const tf_host_api host_api = {sizeof(tf_host_api), TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR, host_log,
                                     host_set_error, tf__malloc, tf__free, tf_last_error,
                                     tf__env_int, tf__env_number, tf__env_choice, tf__env_flag, tf__env_string};

const tf_host_api *tf_host(void) { return &host_api; }

/* ---- registration ---- */

static bool valid_backend_name(const char *name) {
    if (!name || !*name || strlen(name) >= 32) return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
    return true;
}

static tf_backend_entry *find_backend(const char *name) {
    for (int i = 0; i < g.n_backends; i++)
        if (!strcmp(g.backends[i]->name, name)) return g.backends[i];
    return NULL;
}

/* The required slots, get_info to run, are present (and the table, as its
 * backend was built, is large enough to hold them). */
static bool device_iface_complete(const tf_device_iface *f) {
    return f && TF_HAS_FIELD(f, tf_device_iface, run) && f->get_info && f->buffer_alloc && f->buffer_free &&
           f->buffer_upload && f->buffer_download && f->supports && f->run;
}

/* Check a registration; on failure the message says what is wrong. */
static tf_status validate_reg(const tf_backend_reg *reg, char *why, size_t n) {
    if (reg->struct_size < offsetof(tf_backend_reg, abi_minor)) {    /* SDK 1 had no struct_size: its major reads here */
        snprintf(why, n, "backend built for an SDK without struct_size (ABI major %u?), this library speaks %d.%d",
                 reg->struct_size, TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR);
        return TF_ERR_ABI_MISMATCH;
    }
    if (reg->abi_major != TF_BACKEND_ABI_MAJOR) {
        snprintf(why, n, "backend ABI %u.%u, this library speaks %d.%d", reg->abi_major, reg->abi_minor,
                 TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR);
        return TF_ERR_ABI_MISMATCH;
    }
    if (!valid_backend_name(reg->name)) {
        snprintf(why, n, "backend name '%s' is not [a-z0-9_]{1,31}", reg->name ? reg->name : "(null)");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (find_backend(reg->name)) {
        snprintf(why, n, "a backend named '%s' is already registered", reg->name);
        return TF_ERR_ALREADY_EXISTS;
    }
    if (!TF_HAS_FIELD(reg, tf_backend_reg, devices) || !reg->iface ||
        !TF_HAS_FIELD(reg->iface, tf_backend_iface, shutdown)) {
        snprintf(why, n, "backend '%s' has no iface, or a registration or iface too small for SDK %d", reg->name,
                 TF_BACKEND_ABI_MAJOR);
        return reg->iface ? TF_ERR_ABI_MISMATCH : TF_ERR_INVALID_ARGUMENT;
    }
    if (reg->device_count < 0 || (reg->device_count > 0 && !reg->devices)) {
        snprintf(why, n, "backend '%s' reports %d devices but no device array", reg->name, reg->device_count);
        return TF_ERR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < reg->device_count; i++) {
        if (!device_iface_complete(reg->devices[i].iface)) {
            snprintf(why, n, "backend '%s' device %d lacks a required method (get_info to run)", reg->name, i);
            return TF_ERR_ABI_MISMATCH;
        }
    }
    return TF_OK;
}

static void init_device(tf_device *d, tf_backend_entry *b, int index) {
    memset(d, 0, sizeof *d);
    d->backend = b;
    d->index = index;
    d->bdev = b->reg.devices[index];
    if (b->host && b->reg.device_count == 1) snprintf(d->name, sizeof d->name, "%s", b->name);
    else snprintf(d->name, sizeof d->name, "%s:%d", b->name, index);
    tf_backend_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (d->bdev.iface->get_info(d->bdev.ctx, &info) == TF_OK) {
        d->type = info.type;
        d->emulated = info.caps.emulated;
        d->async = info.caps.async;
    }
    tf__streams_init(d);
    tf__alloc_conf_init(d);
}

static void release_device(tf_device *d) { tf__streams_release(d); }

bool tf__grow(void **array, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int n = *cap ? *cap : 8;
    while (n < need) n *= 2;
    void *bigger = tf__realloc(*array, elem * (size_t)n);
    if (!bigger) return false;
    *array = bigger;
    *cap = n;
    return true;
}

/* Add a validated backend; takes ownership of dl_handle. Caller holds the lock. */
static tf_status add_backend(const tf_backend_reg *reg, const char *source, void *dl_handle, bool host) {
    char why[512];
    tf_status s = validate_reg(reg, why, sizeof why);
    if (s != TF_OK) return tf__error(s, "tf_backend_register: %s", why);
    if (!tf__grow((void **)&g.backends, &g.cap_backends, g.n_backends + 1, sizeof *g.backends) ||
        !tf__grow((void **)&g.devices, &g.cap_devices, g.n_devices + reg->device_count, sizeof *g.devices))
        return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_backend_register: out of memory for the registry");
    tf_backend_entry *b = tf__calloc(1, sizeof *b);
    tf_device *devs = reg->device_count ? tf__calloc((size_t)reg->device_count, sizeof *devs) : NULL;
    if (!b || (reg->device_count && !devs)) {
        tf__free(b);
        tf__free(devs);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_backend_register: out of memory");
    }
    memcpy(&b->reg, reg, reg->struct_size < sizeof b->reg ? reg->struct_size : sizeof b->reg);   /* older: the rest 0 */
    snprintf(b->name, sizeof b->name, "%s", reg->name);
    snprintf(b->source, sizeof b->source, "%s", source);
    snprintf(b->note, sizeof b->note, "%s", reg->note ? reg->note : "");
    b->dl_handle = dl_handle;
    b->host = host;
    b->devices = devs;
    b->device_count = reg->device_count;
    for (int i = 0; i < reg->device_count; i++) {
        init_device(&devs[i], b, i);
        devs[i].global_index = g.n_devices;
        g.devices[g.n_devices++] = &devs[i];
    }
    g.backends[g.n_backends++] = b;
    return TF_OK;
}

static void record_skip(const char *name, const char *source, tf_status s, const char *reason) {
    tf__log(TF_LOG_INFO, "plugin %s skipped: %s", source, reason);
    if (!tf__grow((void **)&g.skipped, &g.cap_skipped, g.n_skipped + 1, sizeof *g.skipped)) {
        g.dropped_skips++;                    /* counted in the last kept entry's reason */
        tf__log(TF_LOG_WARN, "out of memory: the reason plugin %s was skipped is not kept", source);
        return;
    }
    skipped_plugin *p = &g.skipped[g.n_skipped++];
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->source, sizeof p->source, "%s", source);
    snprintf(p->reason, sizeof p->reason, "%s", reason);
    p->status = s;
}

/* ---- plugin loading ---- */

/* "libtensorframe-opencl.so" -> "opencl"; false if the name does not fit. */
static bool plugin_name_from_file(const char *file, char *name, size_t n) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t len = strlen(base), pre = strlen(PLUGIN_PREFIX), suf = strlen(PLUGIN_SUFFIX);
    if (len <= pre + suf || strncmp(base, PLUGIN_PREFIX, pre) || strcmp(base + len - suf, PLUGIN_SUFFIX))
        return false;
    snprintf(name, n, "%.*s", (int)(len - pre - suf), base + pre);
    return true;
}

static void load_plugin(const char *path) {
    char name[32] = "?";
    plugin_name_from_file(path, name, sizeof name);
    for (int i = 0; i < g.n_backends; i++)
        if (!strcmp(g.backends[i]->source, path)) return;   /* same file seen via two dirs */
    if (find_backend(name)) {
        char why[600];
        snprintf(why, sizeof why, "a backend named '%s' is already loaded from %s", name, find_backend(name)->source);
        record_skip(name, path, TF_ERR_ALREADY_EXISTS, why);
        return;
    }
    /* Unloaded again at tf_shutdown, after the backend's shutdown released
     * what it owns (a vendor library it loaded may stay mapped: see README). */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        record_skip(name, path, TF_ERR_PLUGIN, e ? e : "dlopen failed");
        return;
    }
    tf_backend_plugin_init_fn init;
    *(void **)&init = dlsym(h, TF_BACKEND_PLUGIN_ENTRY);
    if (!init) {
        record_skip(name, path, TF_ERR_PLUGIN, "no entry point " TF_BACKEND_PLUGIN_ENTRY "()");
        dlclose(h);
        return;
    }
    tf_backend_reg reg;
    memset(&reg, 0, sizeof reg);
    tf__clear_error();
    in_plugin_init = true;                    /* the registry's lock is held: no calls back in */
    tf_status s = init(&host_api, &reg);
    in_plugin_init = false;
    if (s != TF_OK) {
        char why[1024];
        snprintf(why, sizeof why, "init failed with %s: %s", tf_status_name(s), tf_last_error());
        record_skip(name, path, s, why);
        dlclose(h);
        return;
    }
    s = add_backend(&reg, path, h, false);
    if (s != TF_OK) {
        record_skip(name, path, s, tf_last_error());
        if (reg.struct_size >= sizeof reg && reg.abi_major == TF_BACKEND_ABI_MAJOR && reg.iface &&
            TF_HAS_FIELD(reg.iface, tf_backend_iface, shutdown) && reg.iface->shutdown)
            reg.iface->shutdown(reg.ctx);
        dlclose(h);
    }
}

static int plugin_file_filter(const struct dirent *e) {
    char name[32];
    return plugin_name_from_file(e->d_name, name, sizeof name);
}

static void remember_search_dir(const char *dir) {
    size_t used = strlen(g.search_dirs);
    snprintf(g.search_dirs + used, sizeof g.search_dirs - used, "%s%s", used ? ":" : "", dir);
}

static void load_plugins_in_dir(const char *dir) {
    remember_search_dir(dir);
    struct dirent **list = NULL;
    int n = scandir(dir, &list, plugin_file_filter, alphasort);
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
        load_plugin(path);
        free(list[i]);
    }
    free(list);
}

/* A TF_PLUGIN_PATH entry: a directory to scan or a plugin file. */
static void load_plugin_path_entry(const char *entry) {
    struct stat st;
    if (stat(entry, &st) == 0 && !S_ISDIR(st.st_mode)) remember_search_dir(entry);
    if (stat(entry, &st) != 0) {
        char name[32] = "?";
        plugin_name_from_file(entry, name, sizeof name);
        record_skip(name, entry, TF_ERR_PLUGIN, "TF_PLUGIN_PATH entry does not exist");
        return;
    }
    if (S_ISDIR(st.st_mode)) load_plugins_in_dir(entry);
    else load_plugin(entry);
}

static void library_dir(char *out, size_t n) {
    Dl_info info;
    out[0] = 0;
    if (dladdr((void *)&tf__init, &info) && info.dli_fname) {
        snprintf(out, n, "%s", info.dli_fname);
        char *slash = strrchr(out, '/');
        if (slash) *slash = 0;
        else out[0] = 0;
    }
}

static void load_all_plugins(void) {
    const char *env = tf__env_string("TF_PLUGIN_PATH");
    if (env) {
        char *copy = strdup(env), *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok; tok = strtok_r(NULL, ":", &save))
            load_plugin_path_entry(tok);
        free(copy);
    }
    /* The installed plugin directory, then relative to the library itself:
     * <dir of libtensorframe.so>/tensorframe (an install moved to another
     * prefix) and that directory itself (a build tree). */
    enum { N_DIRS = 3 };
    char dirs[N_DIRS][PATH_MAX], seen[N_DIRS][PATH_MAX] = {{0}};
    snprintf(dirs[0], sizeof dirs[0], "%s", TF_PLUGIN_INSTALL_DIR);
    library_dir(dirs[2], sizeof dirs[2]);
    snprintf(dirs[1], sizeof dirs[1], "%.*s/tensorframe", PATH_MAX - 16, dirs[2]);
    if (!dirs[2][0]) dirs[1][0] = 0;
    for (int i = 0; i < N_DIRS; i++) {
        if (!dirs[i][0] || !realpath(dirs[i], seen[i])) {
            seen[i][0] = 0;
            continue;
        }
        bool repeat = false;
        for (int j = 0; j < i; j++) repeat |= !strcmp(seen[j], seen[i]);
        if (!repeat) load_plugins_in_dir(seen[i]);
    }
}

/* ---- priority ---- */

static tf_status parse_priority(const char *csv, char list[][32], int *n) {
    *n = 0;
    const char *p = csv;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (*p == ' ')) { p++; len--; }
        while (len && p[len - 1] == ' ') len--;
        if (len) {
            if (len >= 32 || *n >= MAX_PRIORITY)
                return tf__error(TF_ERR_INVALID_ARGUMENT, "backend priority: entry too long or too many entries");
            memcpy(list[*n], p, len);
            list[*n][len] = 0;
            if (!valid_backend_name(list[*n]))
                return tf__error(TF_ERR_INVALID_ARGUMENT, "backend priority: '%s' is not a backend name", list[*n]);
            (*n)++;
        }
        if (!end) break;
        p = end + 1;
    }
    if (*n == 0) return tf__error(TF_ERR_INVALID_ARGUMENT, "backend priority: empty list '%s'", csv);
    return TF_OK;
}

static tf_status set_priority_locked(const char *csv) {
    if (!csv) {
        g.priority_explicit = false;
        const char *env = tf__env_string("TF_BACKEND");
        if (env) {
            if (parse_priority(env, g.priority, &g.n_priority) == TF_OK) {
                g.priority_explicit = true;
                return TF_OK;
            }
            tf__log(TF_LOG_WARN, "ignoring TF_BACKEND='%s': %s", env, tf_last_error());
        }
        if (parse_priority(TF_DEFAULT_PRIORITY, g.priority, &g.n_priority) != TF_OK) g.n_priority = 0;
        return TF_OK;
    }
    char list[MAX_PRIORITY][32];
    int n;
    tf_status s = parse_priority(csv, list, &n);
    if (s != TF_OK) return s;
    memcpy(g.priority, list, sizeof list);
    g.n_priority = n;
    g.priority_explicit = true;
    return TF_OK;
}

/* Position of a backend in the list in force; MAX_PRIORITY if absent. */
static int list_position(const char *name) {
    for (int i = 0; i < g.n_priority; i++)
        if (!strcmp(g.priority[i], name)) return i;
    return MAX_PRIORITY;
}

/* What a device is, best first: a discrete GPU (or accelerator), an
 * integrated GPU, a device emulated on the CPU (a GPU API's CPU driver such
 * as PoCL or lavapipe, or any other backend's CPU-type device), the host
 * CPU itself (the built-in backend). */
enum { CLASS_DISCRETE, CLASS_INTEGRATED, CLASS_EMULATED, CLASS_HOST, N_CLASSES };

static int device_class(const tf_device *d) {
    if (d->backend->host) return CLASS_HOST;
    if (d->emulated || d->type == TF_DEVICE_TYPE_CPU) return CLASS_EMULATED;
    return d->type == TF_DEVICE_TYPE_INTEGRATED_GPU ? CLASS_INTEGRATED : CLASS_DISCRETE;
}

/* Lower ranks first. The default list orders devices by what they are, then
 * by the list (so a backend the list does not name, a user's own or one
 * written after this library, still ranks by its device's kind); a list set
 * in code or by TF_BACKEND is taken literally, the kind breaking ties. */
int tf__device_rank(const tf_device *d) {
    int pos = list_position(d->backend->name), cls = device_class(d);
    return g.priority_explicit ? pos * N_CLASSES + cls : cls * (MAX_PRIORITY + 1) + pos;
}

const char *tf__backend_name(const tf_device *d) { return d->backend->name; }

tf_status tf_backend_priority_set(const char *csv) {
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    pthread_mutex_lock(&g.lock);
    s = set_priority_locked(csv);
    pthread_mutex_unlock(&g.lock);
    return s;
}

tf_status tf_backend_priority_get(char *buf, size_t n) {
    if (!buf) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_backend_priority_get: buf is NULL");
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    char tmp[MAX_PRIORITY * 33 + 64] = "";
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < g.n_priority; i++) {
        if (i) strcat(tmp, ",");
        strcat(tmp, g.priority[i]);
    }
    pthread_mutex_unlock(&g.lock);
    if (strlen(tmp) + 1 > n)
        return tf__error(TF_ERR_BUFFER_TOO_SMALL, "tf_backend_priority_get: needs %zu bytes", strlen(tmp) + 1);
    memcpy(buf, tmp, strlen(tmp) + 1);
    return TF_OK;
}

/* ---- init and shutdown ---- */

tf_status tf__init(void) {
    if (in_plugin_init)
        return tf__error(TF_ERR_PLUGIN, "tensorframe called from inside a plugin's init, which holds the registry; "
                                        "a plugin gets the library's services from tf_host_api");
    if (atomic_load_explicit(&g.initialized, memory_order_acquire)) return TF_OK;
    pthread_mutex_lock(&g.lock);
    tf_status s = TF_OK;
    bool first = false;
    if (!atomic_load(&g.initialized)) {
        first = true;
        tf_backend_reg cpu;
        memset(&cpu, 0, sizeof cpu);
        s = tf__cpu_backend_init(&host_api, &cpu);
        if (s == TF_OK) s = add_backend(&cpu, "built-in", NULL, true);
        if (s == TF_OK) {
            set_priority_locked(NULL);
            atomic_store_explicit(&g.initialized, true, memory_order_release);
        }
    }
    pthread_mutex_unlock(&g.lock);
    if (first && s == TF_OK) tf__hooks_start();
    return s;
}

/* Initialize and load the plugins: the first question about devices other
 * than the CPU pays for finding them (dlopen, driver start-up), a program
 * that only ever asks for "cpu" never does. */
static tf_status init_with_plugins(void) {
    tf_status s = tf__init();
    if (s != TF_OK || atomic_load_explicit(&g.plugins_loaded, memory_order_acquire)) return s;
    pthread_mutex_lock(&g.lock);
    if (!atomic_load(&g.plugins_loaded)) {
        load_all_plugins();
        atomic_store_explicit(&g.plugins_loaded, true, memory_order_release);
    }
    pthread_mutex_unlock(&g.lock);
    return TF_OK;
}

void tf_shutdown(void) {
    if (in_plugin_init) {
        tf__log(TF_LOG_ERROR, "tf_shutdown called from inside a plugin's init: ignored");
        return;
    }
    tf__hooks_shutdown();                      /* the observers end while the devices exist */
    tf__scope_shutdown();                      /* scopes left open: their tensors go while the devices exist */
    pthread_mutex_lock(&g.lock);
    for (int i = g.n_backends - 1; i >= 0; i--) {
        tf_backend_entry *b = g.backends[i];
        for (int k = 0; k < b->device_count; k++) release_device(&b->devices[k]);
        if (b->reg.iface->shutdown) b->reg.iface->shutdown(b->reg.ctx);
        if (b->dl_handle) dlclose(b->dl_handle);
        tf__free(b->devices);
        tf__free(b);
    }
    g.n_backends = g.n_devices = g.n_skipped = g.n_priority = g.dropped_skips = 0;
    g.cap_backends = g.cap_devices = g.cap_skipped = 0;
    tf__free(g.backends);
    tf__free(g.devices);
    tf__free(g.skipped);
    g.backends = NULL;
    g.devices = NULL;
    g.skipped = NULL;
    g.search_dirs[0] = 0;
    g.priority_explicit = false;
    atomic_store(&g.policy, TF_MIXED_HIGHEST_PRIORITY);
    atomic_store(&g.initialized, false);
    atomic_store(&g.plugins_loaded, false);
    atomic_fetch_add(&generation, 1);          /* tensors still alive now outlive their devices */
    pthread_mutex_unlock(&g.lock);
    tf__alloc_trace_close();
}

tf_status tf_backend_register(const tf_backend_reg *reg) {
    if (!reg) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_backend_register: reg is NULL");
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    pthread_mutex_lock(&g.lock);
    s = add_backend(reg, "in-process", NULL, false);
    pthread_mutex_unlock(&g.lock);
    return s;
}

void *tf_backend_proc_address(const char *backend_name, const char *name) {
    if (!backend_name || !name || init_with_plugins() != TF_OK) return NULL;
    pthread_mutex_lock(&g.lock);
    tf_backend_entry *b = find_backend(backend_name);
    void *(*gpa)(void *, const char *) = b ? BACKEND_SLOT(b, get_proc_address) : NULL;
    void *fn = gpa ? gpa(b->reg.ctx, name) : NULL;
    pthread_mutex_unlock(&g.lock);
    return fn;
}

/* ---- device queries ---- */

tf_device *tf__cpu_device(void) { return tf__init() == TF_OK ? g.devices[0] : NULL; }

int tf_device_count(void) { return init_with_plugins() == TF_OK ? g.n_devices : 0; }

tf_device *tf_device_at(int i) {
    if (init_with_plugins() != TF_OK || i < 0 || i >= g.n_devices) return NULL;
    return g.devices[i];
}

const char *tf_device_name(const tf_device *d) { return d ? d->name : "(null)"; }

int tf__device_index(const tf_device *d) { return d->global_index; }

tf_status tf_device_get_props(const tf_device *d, tf_device_props *out) {
    if (!d || !out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_get_props: NULL argument");
    tf_backend_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    tf_status s = d->bdev.iface->get_info(d->bdev.ctx, &info);
    if (s != TF_OK) return s;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", d->name);
    snprintf(out->backend, sizeof out->backend, "%s", d->backend->name);
    snprintf(out->description, sizeof out->description, "%s", info.description);
    out->type = info.type;
    out->memory_total = info.memory_total;
    out->memory_free = info.memory_free;
    out->caps = info.caps;
    return TF_OK;
}

tf_status tf_device_get_limits(const tf_device *d, tf_device_limits *limits, tf_device_hints *hints) {
    if (!d) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_get_limits: device is NULL");
    tf_backend_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    tf__clear_error();
    tf_status s = d->bdev.iface->get_info(d->bdev.ctx, &info);
    if (s != TF_OK) return *tf_last_error() ? s : tf__error(s, "tf_device_get_limits: %s did not answer", d->name);
    if (limits) *limits = info.limits;
    if (hints) *hints = info.hints;
    return TF_OK;
}

tf_status tf_device_synchronize(tf_device *d) {
    if (!d) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_synchronize: device is NULL");
    return tf__in("tf_device_synchronize", tf__device_synchronize_all(d));
}

uint64_t tf_device_fallback_count(const tf_device *d, tf_op_kind op) {
    if (!d) return 0;
    if ((unsigned)op < TF_OP_COUNT) return atomic_load(&((tf_device *)d)->fallbacks[op]);
    uint64_t total = 0;
    for (int i = 0; i < TF_OP_COUNT; i++) total += atomic_load(&((tf_device *)d)->fallbacks[i]);
    return total;
}

uint64_t tf_device_op_count(const tf_device *d) { return d ? atomic_load(&((tf_device *)d)->ops) : 0; }


tf_status tf_set_num_threads(int n) {
    if (n < 1) return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_set_num_threads: %d threads", n);
    tf_status s = tf__init();
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < g.n_backends && s == TF_OK; i++) {
        tf_status (*fn)(void *, int) = BACKEND_SLOT(g.backends[i], set_num_threads);
        if (fn) s = fn(g.backends[i]->reg.ctx, n);
    }
    pthread_mutex_unlock(&g.lock);
    return s;
}

int tf_get_num_threads(void) {
    if (tf__init() != TF_OK) return 1;
    int (*fn)(void *) = BACKEND_SLOT(g.backends[0], get_num_threads);   /* backend 0 is the CPU's */
    return fn ? fn(g.backends[0]->reg.ctx) : 1;
}

/* ---- selection ---- */

/* May "auto" pick d? From the default list, a discrete or integrated GPU of
 * any backend, else the host CPU: never an emulated device. From a list set
 * in code or by TF_BACKEND, any device of a backend it names. */
static bool auto_candidate(const tf_device *d) {
    if (g.priority_explicit) return list_position(d->backend->name) < MAX_PRIORITY;
    return device_class(d) != CLASS_EMULATED;
}

/* Candidates for auto, best first (stable by registration order). */
static int ranked_candidates(tf_device **out) {
    int n = 0;
    for (int i = 0; i < g.n_devices; i++)
        if (auto_candidate(g.devices[i])) out[n++] = g.devices[i];
    for (int i = 1; i < n; i++) {                       /* insertion sort: stable */
        tf_device *d = out[i];
        int r = tf__device_rank(d), j = i - 1;
        while (j >= 0 && tf__device_rank(out[j]) > r) { out[j + 1] = out[j]; j--; }
        out[j + 1] = d;
    }
    return n;
}

static tf_device *pick_auto(void) {
    tf_device *best = NULL;                             /* the first of the lowest rank */
    for (int i = 0; i < g.n_devices; i++)
        if (auto_candidate(g.devices[i]) && (!best || tf__device_rank(g.devices[i]) < tf__device_rank(best)))
            best = g.devices[i];
    if (best) return best;
    if (g.priority_explicit)
        tf__log(TF_LOG_WARN, "no device of the backends in the priority list; 'auto' falls back to %s",
                g.devices[0]->name);
    return g.devices[0];                                 /* the host CPU */
}

static void list_devices(char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < g.n_devices && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", g.devices[i]->name);
}

/* Does spec name a device of a backend already registered ("cpu")? Then
 * the plugins need not be loaded to answer. */
static bool names_loaded_device(const char *spec) {
    pthread_mutex_lock(&g.lock);
    size_t len = strcspn(spec, ":");
    bool found = false;
    for (int i = 0; i < g.n_backends && !found; i++)
        found = strlen(g.backends[i]->name) == len && !strncmp(g.backends[i]->name, spec, len);
    pthread_mutex_unlock(&g.lock);
    return found;
}

tf_status tf_device_get(const char *spec, tf_device **out) {
    if (out) *out = NULL;
    if (!spec || !out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_get: spec or out is NULL");
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    if (!strcmp(spec, "auto") || !names_loaded_device(spec)) init_with_plugins();
    pthread_mutex_lock(&g.lock);
    if (!strcmp(spec, "auto")) {
        *out = pick_auto();
        pthread_mutex_unlock(&g.lock);
        return TF_OK;
    }
    char name[64];
    long index = 0;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    bool ok = len > 0 && len < sizeof name;
    if (ok && colon) {
        char *end;
        index = strtol(colon + 1, &end, 10);
        ok = colon[1] && !*end && index >= 0;
    }
    if (ok) {
        memcpy(name, spec, len);
        name[len] = 0;
        tf_backend_entry *b = find_backend(name);
        if (b && index < b->device_count) *out = &b->devices[index];
    }
    char avail[1024];
    list_devices(avail, sizeof avail);
    pthread_mutex_unlock(&g.lock);
    if (*out) return TF_OK;
    return tf__error(TF_ERR_UNKNOWN_DEVICE, "tf_device_get: no device '%s' (devices present: %s)", spec, avail);
}

tf_status tf_device_get_with_memory(uint64_t min_free, tf_device **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_get_with_memory: out is NULL");
    *out = NULL;
    tf_status s = init_with_plugins();
    if (s != TF_OK) return s;
    pthread_mutex_lock(&g.lock);
    tf_device **cands = tf__malloc(sizeof *cands * (size_t)g.n_devices);
    if (!cands) {
        pthread_mutex_unlock(&g.lock);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_device_get_with_memory: out of host memory");
    }
    int n = ranked_candidates(cands);
    char report[2048];
    size_t used = 0;
    report[0] = 0;
    for (int i = 0; i < n && !*out; i++) {
        tf_device_props p;
        if (tf_device_get_props(cands[i], &p) != TF_OK) continue;
        if (p.memory_free >= min_free) *out = cands[i];
        else if (used < sizeof report)
            used += (size_t)snprintf(report + used, sizeof report - used, "%s%s has %.2f GiB free of %.2f GiB",
                                     i ? "; " : "", p.name, p.memory_free / 1073741824.0,
                                     p.memory_total / 1073741824.0);
    }
    pthread_mutex_unlock(&g.lock);
    tf__free(cands);
    if (*out) return TF_OK;
    return tf__error(TF_ERR_NO_DEVICE, "tf_device_get_with_memory: no device has %.2f GiB free: %s",
                     min_free / 1073741824.0, n ? report : "no candidate devices");
}

/* ---- mixed-device policy ---- */

tf_status tf_mixed_policy_set(tf_mixed_policy p) {
    if (p != TF_MIXED_HIGHEST_PRIORITY && p != TF_MIXED_FIRST_INPUT && p != TF_MIXED_STRICT)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_mixed_policy_set: unknown policy %d", (int)p);
    atomic_store(&g.policy, (int)p);
    return TF_OK;
}

tf_mixed_policy tf_mixed_policy_get(void) { return (tf_mixed_policy)atomic_load(&g.policy); }

/* ---- backend diagnostics ---- */

tf_status tf_plugin_search_path(char *buf, size_t n) {
    if (!buf) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_plugin_search_path: buf is NULL");
    tf_status s = init_with_plugins();
    if (s != TF_OK) return s;
    pthread_mutex_lock(&g.lock);
    size_t len = strlen(g.search_dirs);
    if (len + 1 <= n) memcpy(buf, g.search_dirs, len + 1);
    pthread_mutex_unlock(&g.lock);
    if (len + 1 > n) return tf__error(TF_ERR_BUFFER_TOO_SMALL, "tf_plugin_search_path: needs %zu bytes", len + 1);
    return TF_OK;
}

int tf_backend_count(void) {
    if (init_with_plugins() != TF_OK) return 0;
    pthread_mutex_lock(&g.lock);
    int n = g.n_backends + g.n_skipped;
    pthread_mutex_unlock(&g.lock);
    return n;
}

tf_status tf_backend_get_props(int i, tf_backend_props *out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_backend_get_props: out is NULL");
    tf_status s = init_with_plugins();
    if (s != TF_OK) return s;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&g.lock);
    if (i >= 0 && i < g.n_backends) {
        tf_backend_entry *b = g.backends[i];
        snprintf(out->name, sizeof out->name, "%s", b->name);
        snprintf(out->source, sizeof out->source, "%s", b->source);
        snprintf(out->reason, sizeof out->reason, "%s", b->note);
        out->loaded = true;
        out->device_count = b->device_count;
        int (*threads)(void *) = BACKEND_SLOT(b, get_num_threads);
        out->threads = threads ? threads(b->reg.ctx) : 0;
        out->status = TF_OK;
    } else if (i >= g.n_backends && i < g.n_backends + g.n_skipped) {
        skipped_plugin *p = &g.skipped[i - g.n_backends];
        snprintf(out->name, sizeof out->name, "%s", p->name);
        snprintf(out->source, sizeof out->source, "%s", p->source);
        snprintf(out->reason, sizeof out->reason, "%s", p->reason);
        if (i == g.n_backends + g.n_skipped - 1 && g.dropped_skips)   /* what could not be kept is counted */
            snprintf(out->reason, sizeof out->reason, "%.400s (and %d more skipped plugins whose reasons ran out of memory)",
                     p->reason, g.dropped_skips);
        out->status = p->status;
    } else {
        s = tf__error(TF_ERR_INVALID_ARGUMENT, "tf_backend_get_props: index %d out of range", i);
    }
    pthread_mutex_unlock(&g.lock);
    return s;
}
