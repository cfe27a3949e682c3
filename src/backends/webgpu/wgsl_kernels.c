/* The WebGPU plugin's kernels: kernels.wgsl, launched by plan.c (the same
 * host side as the OpenCL and CUDA plugins run kernels.cl with).
 *
 * plan.c hands each launch over as OpenCL-style arguments: scalars, geometry
 * structs and buffer handles, in the kernel's order. Here a table gives each
 * kernel's argument kinds and buffer names; a launch narrows the scalars to
 * 32-bit words (WGSL has no 64-bit integers: values outside i32 are refused),
 * writes them to the device's parameter buffer (binding 0), binds the
 * buffers after it and dispatches. Pipelines are built per (dtype, kernel)
 * on first use from the WGSL the plugin assembles, and cached.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "webgpu_internal.h"

#include "kernels_wgsl.h"      /* generated: kernels_wgsl[], kernels_wgsl_len */

#define PARAM_BYTES 1024       /* Args (at most ARGS_BYTES), then the bindings' word bases */
#define ARGS_BYTES 768         /* the largest Args: two geometries and a few scalars; a multiple of 256 */
#define MAX_BUFFERS 6
#define BASES_BINDING 7
#define PART_BITS 5            /* a pipeline's parts key: 5 bits per buffer */
#define MAX_PARTS 32           /* bindings one window may be split into (32 x 128 MiB > lavapipe's 2 GiB buffers) */
#define MAX_BINDINGS 64        /* every binding of one launch, parts included */

/* Argument kinds, one letter per plan.c argument: i int32, f float, l int64
 * (narrowed), U uint64 (two words), g tf_pk_geom, 4 tf_pk_long4, 2
 * tf_pk_long2, c tf_pk_conv_geom, a tf_pk_attn_geom, B a buffer. Buffers are
 * named in order; ":w" marks one written with elements of the program's
 * dtype, ":b" with bools, ":W" with whole words. */
typedef struct kernel_info {
    const char *args;
    const char *buffers;
    bool group_per_item;                 /* plan.c's 1-D items each get a workgroup of WG */
    bool per_op;                         /* argument 0 is the op code: a pipeline per op */
    int quant;                           /* 1: includes the `quant` section (its buffer `q` holds blocks);
                                            2: and the `qdot` one (activations `x`) */
} kernel_info;

/* The plugin's own kernels, numbered after plan.c's: variants a launch of
 * plan.c's kernel may take on this device (see wg_variant). */
#define WG_MATMUL_FLAT ((tf_pk_kernel)TF_PK_KERNEL_COUNT)
#define WG_KERNEL_COUNT (TF_PK_KERNEL_COUNT + 1)

static const kernel_info kernel_table[WG_KERNEL_COUNT] = {
    [TF_PK_BINARY] = {"ilgBBB", "out:w a b", false, true},
    [TF_PK_BINARY4] = {"illllBBB", "out:W a b", false, true},
    [TF_PK_UNARY] = {"iffflgBB", "out:w x", false, true},
    [TF_PK_COMPARE] = {"ilgBBB", "out:b a b", false, true},
    [TF_PK_BOOL_UNARY] = {"ilgBB", "out:b x", false, true},
    [TF_PK_WHERE] = {"lgBBBB", "out:w cond a b"},
    [TF_PK_COPY_FROM] = {"ilgBB", "out:w src"},
    [TF_PK_FILL] = {"lUBl", "out:w"},
    [TF_PK_ARANGE] = {"lffBl", "out:w"},
    [TF_PK_RAND] = {"ilUBl", "out:w"},
    [TF_PK_TRIANGLE] = {"illgBB", "out:w x"},
    [TF_PK_INDEX_PICK] = {"iilgBBBi", "out:w x index"},
    [TF_PK_REDUCE_PARTIAL] = {"lllggBB", "in partial:W"},
    [TF_PK_REDUCE_FINAL] = {"llliBBl", "partial out:w"},
    [TF_PK_REDUCE_FULL] = {"illggBBli", "in out:w", false, true},
    [TF_PK_CUMSUM] = {"llgllBBi", "in out:w"},
    [TF_PK_MATMUL] = {"lll4gBBBiffB2", "out:w a b c"},
    [TF_PK_ROW_OP] = {"illlfiigBBBllBll", "x out:w w b", false, true},
    [TF_PK_ROPE] = {"lilfigBBBlli", "x out:w pos"},
    [TF_PK_SDPA] = {"fiiaBBBBB", "q k v mask out:w", true},
    [TF_PK_CONV2D] = {"icBBBB", "x w b out:w"},
    [TF_PK_POOL2D] = {"iicBB", "x out:w"},
    [TF_PK_ADAM] = {"lgfffffffiBBBB", "p:w grad m:w v:w"},
    [TF_PK_QUANT_DECODE] = {"ilglBB", "out:w q", false, false, 1},
    [TF_PK_QUANT_ENCODE] = {"ilglBB", "q:b src", false, false, 1},
    [TF_PK_QGEMV] = {"illlllllllBBB", "out:w x q", false, false, 2},
    [TF_PK_QMATMUL] = {"illlllllllBBB", "out:w x q", false, false, 2},
    [TF_PK_SORT_RANK] = {"llglliiBB", "in out:w"},
    [TF_PK_SEARCHSORTED] = {"llglliBBB", "sorted values out:w"},
    [WG_MATMUL_FLAT] = {"lll4gBBBiffB2", "out:w a b c"},        /* matmul's arguments */
};

static const char *kernel_name(tf_pk_kernel k) {
    if (k == WG_MATMUL_FLAT) return "matmul_flat";
    return (unsigned)k < TF_PK_KERNEL_COUNT ? tf_pk_kernel_names[k] : "?";
}

#define host tf_wg_host
#define wg tf_wg

/* ---- dtype facts (header-only list: plugins never link the core) ---- */

static bool is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F16 || dt == TF_BF16; }

/* ---- WGSL assembly ---- */

/* The text of section `name` of kernels.wgsl ("common" or a kernel's). */
static bool find_section(const char *name, const char **start, size_t *len) {
    char marker[64];
    snprintf(marker, sizeof marker, "\n//@%s%s\n", strcmp(name, "common") ? "kernel " : "", name);
    const char *p = strstr(kernels_wgsl, marker);
    if (!p) return false;
    p += strlen(marker);
    const char *end = strstr(p, "\n//@kernel ");
    *start = p;
    *len = end ? (size_t)(end - p) + 1 : strlen(p);
    return true;
}

/* The bodies of a binding's two raw accessors: `@` stands for the binding's
 * name, `w` for the word within it (see put_raw_accessors). */
static const char word_plain[] = "return @[w];";
static const char put_plain[] = "if (keep == 0u) { @[w] = bits; } else { @[w] = (@[w] & keep) | bits; } return;";
static const char word_atomic[] = "return atomicLoad(&@[w]);";
static const char put_atomic[] =
    "if (keep == 0u) { atomicStore(&@[w], bits); } else { atomicAnd(&@[w], keep | bits); atomicOr(&@[w], bits); } "
    "return;";
static const char accessors_typed[] =
    "fn @_bits(dt: i32, i: i32) -> u32 {\n"
    "    let sz = dt_size(dt);\n"
    "    if (sz == 4) { return @_word(i); }\n"
    "    if (sz == 8) { return @_word(2 * i); }\n"
    "    if (sz == 2) { return (@_word(i >> 1u) >> (u32(i & 1) * 16u)) & 0xffffu; }\n"
    "    return (@_word(i >> 2u) >> (u32(i & 3) * 8u)) & 0xffu;\n"
    "}\n"
    "fn @_setbits(dt: i32, i: i32, b: u32) {\n"
    "    let sz = dt_size(dt);\n"
    "    if (sz == 4) { @_put(i, 0u, b); }\n"
    "    else if (sz == 8) { @_put(2 * i, 0u, b); @_put(2 * i + 1, 0u, select(0u, 0xffffffffu, (b & 0x80000000u) != 0u)); }\n"
    "    else if (sz == 2) { let s = u32(i & 1) * 16u; @_put(i >> 1u, ~(0xffffu << s), (b & 0xffffu) << s); }\n"
    "    else { let s = u32(i & 3) * 8u; @_put(i >> 2u, ~(0xffu << s), (b & 0xffu) << s); }\n"
    "}\n"
    "fn @_ldf(dt: i32, i: i32) -> f32 { return f32_of_bits(dt, @_bits(dt, i)); }\n"
    "fn @_ldi(dt: i32, i: i32) -> i32 { return i32_of_bits(dt, @_bits(dt, i)); }\n"
    "fn @_stf(dt: i32, i: i32, v: f32) { @_setbits(dt, i, bits_of_f32(dt, v)); }\n"
    "fn @_sti(dt: i32, i: i32, v: i32) { @_setbits(dt, i, bits_of_i32(dt, v)); }\n"
    "fn @_ld64(i: i32) -> vec2<u32> { return vec2<u32>(@_word(2 * i), @_word(2 * i + 1)); }\n"
    "fn @_st64(i: i32, v: vec2<u32>) { @_put(2 * i, 0u, v.x); @_put(2 * i + 1, 0u, v.y); }\n";

/* `@` becomes the buffer's name. */
static void put_named(FILE *f, const char *text, const char *name) {
    for (const char *p = text; *p; p++) {
        if (*p == '@') fprintf(f, "b_%s", name);
        else fputc(*p, f);
    }
}

/* The binding that shows part j of a buffer's window: b_NAME, b_NAME_1, ... */
static void put_part_name(FILE *f, const char *name, int j) {
    if (j) fprintf(f, "b_%s_%d", name, j);
    else fprintf(f, "b_%s", name);
}

/* Raw accessor `head` of buffer `index`, whose window is bound as `parts`
 * bindings of PART words each (a tensor larger than one binding may show):
 * the word's offset in the window picks the binding. */
static void put_raw_accessor(FILE *f, const char *head, const char *body, const char *name, int index, int parts) {
    put_named(f, head, name);
    fprintf(f, "\n    let v = w0 - i32(BASES[%d]);\n", index);
    for (int j = 0; j < parts; j++) {
        fprintf(f, j < parts - 1 ? "    if (v < %d * PART) " : "    ", j + 1);
        fprintf(f, "{ let w = v - %d * PART; ", j);
        for (const char *p = body; *p; p++) {
            if (*p == '@') put_part_name(f, name, j);
            else fputc(*p, f);
        }
        fprintf(f, " }\n");
    }
    fprintf(f, "}\n");
}

/* How many bindings buffer b's window takes under a pipeline's parts key
 * (PART_BITS per buffer, holding the count less one). */
static int parts_in(uint32_t key, int b) { return (int)((key >> (PART_BITS * b)) & (MAX_PARTS - 1)) + 1; }

/* The binding number of part j of buffer b: part 0 of each is b + 1, as
 * without parts; the further parts follow BASES_BINDING, buffer by buffer. */
static uint32_t binding_of(uint32_t key, int b, int j) {
    if (j == 0) return (uint32_t)b + 1;
    uint32_t n = BASES_BINDING + 1;
    for (int i = 0; i < b; i++) n += (uint32_t)parts_in(key, i) - 1;
    return n + (uint32_t)j - 1;
}

/* The bytes one binding of a split window shows: the binding limit,
 * rounded down to the offset alignment so that every part starts aligned. */
static uint64_t part_bytes(const wg_dev *d) {
    uint64_t align = d->limits.minStorageBufferOffsetAlignment ? d->limits.minStorageBufferOffsetAlignment : 256;
    if (align < 4) align = 4;
    return d->limits.maxStorageBufferBindingSize / align * align;
}

/* Whether a buffer with flag `flag` is written with stores narrower than a
 * word for program dtype dt (then its words are atomic). */
static bool narrow_writes(char flag, tf_dtype dt) { return flag == 'b' || (flag == 'w' && tf_pk_elsize(dt) < 4); }

static int parse_buffers(const char *spec, char names[MAX_BUFFERS][16], char flags[MAX_BUFFERS]) {
    int n = 0;
    for (const char *p = spec; *p && n < MAX_BUFFERS;) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, " :");
        snprintf(names[n], 16, "%.*s", (int)len, p);
        p += len;
        flags[n] = 'r';
        if (*p == ':') {
            flags[n] = p[1];
            p += 2;
        }
        n++;
        while (*p == ' ') p++;
    }
    return n;
}

/* The whole module for (dtype, kernel): prelude, bindings, common, kernel. */
static char *assemble(const wg_dev *d, tf_dtype dt, tf_pk_kernel k, int op, uint32_t parts, int *n_buffers) {
    const char *common, *body, *quant = NULL, *qdot = NULL;
    size_t common_len, body_len, quant_len = 0, qdot_len = 0;
    if (!find_section("common", &common, &common_len) || !find_section(kernel_name(k), &body, &body_len))
        return NULL;
    if (kernel_table[k].quant >= 1 && !find_section("quant", &quant, &quant_len)) return NULL;
    if (kernel_table[k].quant >= 2 && !find_section("qdot", &qdot, &qdot_len)) return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "const TF_DT: i32 = %d;\nconst IS_FLOAT: bool = %s;\nconst IS_I64: bool = %s;\n", (int)dt,
            is_float(dt) ? "true" : "false", dt == TF_I64 ? "true" : "false");
    fprintf(f, "const OP: i32 = %d;\n", op);
    fprintf(f, "const WG: u32 = %uu;\nconst RWG: u32 = %uu;\nconst TS: u32 = %uu;\n", WG_SIZE, WG_RWG, WG_TS);
    fprintf(f, "const PART: i32 = %d;\n", (int)(part_bytes(d) / 4));
#define TF__CODE(E, ...) fprintf(f, "const TF_OP_%s: i32 = %d;\n", #E, (int)TF_OP_##E);
    TF_OP_LIST(TF__CODE)
#undef TF__CODE
    fprintf(f, "@group(0) @binding(0) var<storage, read> A: Args;\n");
    fprintf(f, "@group(0) @binding(%d) var<storage, read> BASES: array<u32, %d>;\n", BASES_BINDING, MAX_BUFFERS);
    char names[MAX_BUFFERS][16], flags[MAX_BUFFERS];
    int nb = parse_buffers(kernel_table[k].buffers, names, flags);
    for (int b = 0; b < nb; b++) {
        bool atomic = narrow_writes(flags[b], dt);
        int n = parts_in(parts, b);
        for (int j = 0; j < n; j++) {
            fprintf(f, "@group(0) @binding(%u) var<storage, read_write> ", binding_of(parts, b, j));
            put_part_name(f, names[b], j);
            fprintf(f, ": array<%s>;\n", atomic ? "atomic<u32>" : "u32");
        }
        put_raw_accessor(f, "fn @_word(w0: i32) -> u32 {", atomic ? word_atomic : word_plain, names[b], b, n);
        put_raw_accessor(f, "fn @_put(w0: i32, keep: u32, bits: u32) {", atomic ? put_atomic : put_plain, names[b], b,
                         n);
        put_named(f, accessors_typed, names[b]);
    }
    fwrite(common, 1, common_len, f);
    if (quant) fwrite(quant, 1, quant_len, f);
    if (qdot) fwrite(qdot, 1, qdot_len, f);
    fwrite(body, 1, body_len, f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *n_buffers = nb;
    return text;
}

/* ---- pipelines ---- */

static WGPUStringView view(const char *s) { return (WGPUStringView){s, strlen(s)}; }

/* Bindings 0 (Args) and BASES_BINDING (the word bases) read the parameter
 * buffer; the others are the tensors' windows (binding_of numbers them). */
static WGPUBindGroupLayout make_layout(wg_dev *d, int n_buffers, uint32_t parts) {
    WGPUBindGroupLayoutEntry entries[MAX_BINDINGS];
    size_t n = 0;
    for (int b = -1; b <= n_buffers; b++) {
        bool param = b < 0 || b == n_buffers;
        int count = param ? 1 : parts_in(parts, b);
        for (int j = 0; j < count && n < MAX_BINDINGS; j++) {
            WGPUBindGroupLayoutEntry *e = &entries[n++];
            *e = (WGPUBindGroupLayoutEntry)WGPU_BIND_GROUP_LAYOUT_ENTRY_INIT;
            e->binding = b < 0 ? 0 : b == n_buffers ? BASES_BINDING : binding_of(parts, b, j);
            e->visibility = WGPUShaderStage_Compute;
            e->buffer.type = param ? WGPUBufferBindingType_ReadOnlyStorage : WGPUBufferBindingType_Storage;
        }
    }
    WGPUBindGroupLayoutDescriptor desc = WGPU_BIND_GROUP_LAYOUT_DESCRIPTOR_INIT;
    desc.entryCount = n;
    desc.entries = entries;
    return wg.DeviceCreateBindGroupLayout(d->device, &desc);
}

static tf_status build_pipe(wg_dev *d, tf_dtype dt, tf_pk_kernel k, int op, uint32_t parts, wg_pipe *p) {
    const char *name = kernel_name(k);
    int nb = 0;
    char *source = assemble(d, dt, k, op, parts, &nb);
    if (!source) return host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no memory to assemble kernel %s", d->gd.name, name);
    wg.DevicePushErrorScope(d->device, WGPUErrorFilter_Validation);
    WGPUShaderSourceWGSL wgsl = WGPU_SHADER_SOURCE_WGSL_INIT;
    wgsl.code = view(source);
    WGPUShaderModuleDescriptor md = WGPU_SHADER_MODULE_DESCRIPTOR_INIT;
    md.nextInChain = &wgsl.chain;
    md.label = view(name);
    WGPUShaderModule module = wg.DeviceCreateShaderModule(d->device, &md);
    WGPUBindGroupLayout layout = make_layout(d, nb, parts);
    WGPUPipelineLayoutDescriptor pd = WGPU_PIPELINE_LAYOUT_DESCRIPTOR_INIT;
    pd.bindGroupLayoutCount = 1;
    pd.bindGroupLayouts = &layout;
    WGPUPipelineLayout pl = wg.DeviceCreatePipelineLayout(d->device, &pd);
    WGPUComputePipelineDescriptor cd = WGPU_COMPUTE_PIPELINE_DESCRIPTOR_INIT;
    cd.label = view(name);
    cd.layout = pl;
    cd.compute.module = module;
    cd.compute.entryPoint = view(name);
    WGPUComputePipeline pipeline = wg.DeviceCreateComputePipeline(d->device, &cd);
    char message[400];
    WGPUErrorType e = tf_wg_pop_scope(d, message, sizeof message);
    if (tf_gpu_env_flag("TF_WEBGPU_DUMP_WGSL", false)) fprintf(stderr, "---- %s (%d) ----\n%s\n", name, (int)dt, source);
    free(source);
    if (module) wg.ShaderModuleRelease(module);
    if (pl) wg.PipelineLayoutRelease(pl);
    if (e != WGPUErrorType_NoError || !pipeline || !layout) {
        if (pipeline) wg.ComputePipelineRelease(pipeline);
        if (layout) wg.BindGroupLayoutRelease(layout);
        p->state = PIPE_FAILED;
        snprintf(d->build_error, sizeof d->build_error, "%s: building WGSL kernel '%s' for dtype %d failed: %s",
                 d->gd.name, name, (int)dt, message);
        return host->set_error(TF_ERR_BACKEND, "%s", d->build_error);
    }
    p->pipeline = pipeline;
    p->layout = layout;
    p->state = PIPE_READY;
    return TF_OK;
}

/* The pipeline for (dt, k, op, parts), built on first use. A linear search:
 * a process uses a few hundred at most, and a launch costs far more. */
static tf_status ensure_pipe(wg_dev *d, tf_dtype dt, tf_pk_kernel k, int op, uint32_t parts, wg_pipe **out) {
    if ((unsigned)dt >= TF_DTYPE_COUNT || (unsigned)k >= WG_KERNEL_COUNT || !kernel_table[k].args)
        return host->set_error(TF_ERR_UNSUPPORTED, "%s: no WGSL kernel '%s'", d->gd.name, kernel_name(k));
    wg_pipe *p = NULL;
    for (int i = 0; i < d->n_pipes && !p; i++)
        if (d->pipes[i].dt == (int)dt && d->pipes[i].kernel == (int)k && d->pipes[i].op == op &&
            d->pipes[i].parts == parts)
            p = &d->pipes[i];
    if (!p) {
        if (d->n_pipes == d->cap_pipes) {
            int cap = d->cap_pipes ? d->cap_pipes * 2 : 64;
            wg_pipe *grown = realloc(d->pipes, (size_t)cap * sizeof *grown);
            if (!grown) return host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no memory for a pipeline", d->gd.name);
            d->pipes = grown;
            d->cap_pipes = cap;
        }
        p = &d->pipes[d->n_pipes++];
        *p = (wg_pipe){(int)dt, (int)k, op, parts, PIPE_NONE, NULL, NULL};
    }
    if (p->state == PIPE_FAILED) return host->set_error(TF_ERR_BACKEND, "%s", d->build_error);
    if (p->state == PIPE_NONE) {
        tf_status s = build_pipe(d, dt, k, op, parts, p);
        if (s != TF_OK) return s;
    }
    *out = p;
    return TF_OK;
}

/* ---- arguments ---- */

typedef struct packed {
    uint32_t words[PARAM_BYTES / 4];     /* Args from word 0, the bases from ARGS_BYTES / 4 */
    int n;
    wg_window buffers[MAX_BUFFERS];
    int n_buffers;
} packed;

static bool put_word(packed *p, uint32_t w) {
    if (p->n >= ARGS_BYTES / 4) return false;
    p->words[p->n++] = w;
    return true;
}

/* int64 values narrowed to i32; false when one does not fit. */
static bool put_narrowed(packed *p, const int64_t *v, size_t count) {
    for (size_t i = 0; i < count; i++) {
        if (v[i] < INT32_MIN || v[i] > INT32_MAX) return false;
        if (!put_word(p, (uint32_t)(int32_t)v[i])) return false;
    }
    return true;
}

static bool put_geom(packed *p, const tf_pk_geom *g) {
    if (!put_narrowed(p, g->shape, 8) || !put_narrowed(p, &g->stride[0][0], 32) || !put_narrowed(p, g->offset, 4))
        return false;
    return put_word(p, (uint32_t)g->ndim) && put_word(p, (uint32_t)g->contiguous);
}

static size_t arg_size(char kind) {
    switch (kind) {
    case 'i': case 'f': return 4;
    case 'l': case 'U': return 8;
    case 'g': return sizeof(tf_pk_geom);
    case '4': return sizeof(tf_pk_long4);
    case '2': return sizeof(tf_pk_long2);
    case 'c': return sizeof(tf_pk_conv_geom);
    case 'a': return sizeof(tf_pk_attn_geom);
    case 'B': return sizeof(void *);
    default: return 0;
    }
}

static bool pack_arg(packed *p, char kind, const void *value) {
    switch (kind) {
    case 'i': case 'f': {
        uint32_t w;
        memcpy(&w, value, 4);
        return put_word(p, w);
    }
    case 'U': {
        uint64_t v;
        memcpy(&v, value, 8);
        return put_word(p, (uint32_t)v) && put_word(p, (uint32_t)(v >> 32));
    }
    case 'g': return put_geom(p, value);
    case 'B': {
        const wg_window *w;
        memcpy(&w, value, sizeof w);
        if (p->n_buffers >= MAX_BUFFERS || !w) return false;
        p->buffers[p->n_buffers++] = *w;
        return true;
    }
    default:                                  /* l, 4, 2, c, a: int64 values throughout */
        return put_narrowed(p, value, arg_size(kind) / 8);
    }
}

static tf_status pack(wg_dev *d, tf_pk_kernel k, int nargs, const tf_pk_arg *args, const size_t *global, int dims,
                      packed *p) {
    const char *kinds = kernel_table[k].args, *name = tf_pk_kernel_names[k];
    p->n = p->n_buffers = 0;
    if ((size_t)nargs != strlen(kinds))
        return host->set_error(TF_ERR_BACKEND, "%s: kernel '%s' takes %zu arguments, got %d", d->gd.name, name,
                               strlen(kinds), nargs);
    int64_t extent[2] = {(int64_t)global[0], dims > 1 ? (int64_t)global[1] : 1};
    if (!put_narrowed(p, extent, 2))
        return host->set_error(TF_ERR_UNSUPPORTED, "%s: kernel '%s' over more than 2^31 items", d->gd.name, name);
    for (int i = 0; i < nargs; i++) {
        if (args[i].size != arg_size(kinds[i]))
            return host->set_error(TF_ERR_BACKEND, "%s: kernel '%s' argument %d has %zu bytes, expected %zu", d->gd.name,
                                   name, i, args[i].size, arg_size(kinds[i]));
        if (!pack_arg(p, kinds[i], args[i].value))
            return host->set_error(TF_ERR_UNSUPPORTED,
                                   "%s: kernel '%s' argument %d is outside the 32-bit range WGSL indexes with",
                                   d->gd.name, name, i);
    }
    return TF_OK;
}

/* ---- launches ---- */

/* Workgroup counts: 1-D launches fold their groups into x and y, 2-D ones
 * their second dimension into y and z (at most the device's limit each). */
static bool dispatch_size(wg_dev *d, int dims, const size_t *global, const size_t *local, uint32_t n[3]) {
    size_t cap = d->limits.maxComputeWorkgroupsPerDimension;
    size_t l0 = local ? local[0] : WG_SIZE, g0 = (global[0] + l0 - 1) / l0;
    if (dims == 1 && !local && g0 > d->flat_groups) g0 = d->flat_groups;   /* grid-stride kernels */
    if (dims == 1) {
        size_t x = g0 < cap ? g0 : cap, y = x ? (g0 + x - 1) / x : 0;
        n[0] = (uint32_t)x;
        n[1] = (uint32_t)y;
        n[2] = 1;
        return y <= cap;
    }
    size_t g1 = (global[1] + local[1] - 1) / local[1], y = g1 < cap ? g1 : cap, z = y ? (g1 + y - 1) / y : 0;
    n[0] = (uint32_t)g0;
    n[1] = (uint32_t)y;
    n[2] = (uint32_t)z;
    return g0 <= cap && z <= cap;
}

/* The bytes a binding of w shows: from its start rounded down to the
 * device's offset alignment to its end rounded up to a word. */
static void window_range(wg_dev *d, const wg_window *w, uint64_t *offset, uint64_t *size) {
    uint64_t align = d->limits.minStorageBufferOffsetAlignment ? d->limits.minStorageBufferOffsetAlignment : 256;
    *offset = w->lo / align * align;
    *size = ((w->hi + 3) & ~(uint64_t)3) - *offset;
    if (*size == 0) *size = 4;
}

/* How many bindings w's window takes (0 when more than MAX_PARTS). */
static int window_parts(wg_dev *d, const wg_window *w) {
    uint64_t offset, size, part = part_bytes(d);
    window_range(d, w, &offset, &size);
    if (size <= d->limits.maxStorageBufferBindingSize) return 1;
    uint64_t n = part ? (size + part - 1) / part : 0;
    return n >= 1 && n <= MAX_PARTS ? (int)n : 0;
}

/* The parts key of a launch's buffers; false when a window cannot be bound
 * or the bindings would be more than the stage takes. */
static bool parts_key(wg_dev *d, const packed *p, uint32_t *key) {
    uint32_t k = 0, bindings = 2;                       /* Args and BASES */
    for (int b = 0; b < p->n_buffers; b++) {
        int n = window_parts(d, &p->buffers[b]);
        if (n == 0) return false;
        k |= (uint32_t)(n - 1) << (PART_BITS * b);
        bindings += (uint32_t)n;
    }
    *key = k;
    return bindings <= MAX_BINDINGS && bindings <= d->limits.maxStorageBuffersPerShaderStage;
}

static WGPUBindGroupEntry buffer_entry(uint32_t binding, WGPUBuffer buffer, uint64_t offset, uint64_t size) {
    WGPUBindGroupEntry e = WGPU_BIND_GROUP_ENTRY_INIT;
    e.binding = binding;
    e.buffer = buffer;
    e.offset = offset;
    e.size = size;
    return e;
}

static tf_status encode(wg_dev *d, wg_pipe *pipe, const packed *p, const uint32_t groups[3]) {
    WGPUBindGroupEntry entries[MAX_BINDINGS];
    size_t n = 0;
    entries[n++] = buffer_entry(0, d->params, 0, ARGS_BYTES);
    uint32_t bases[MAX_BUFFERS] = {0};
    uint64_t part = part_bytes(d);
    for (int b = 0; b < p->n_buffers; b++) {
        uint64_t offset, size;
        window_range(d, &p->buffers[b], &offset, &size);
        bases[b] = (uint32_t)(offset / 4);
        int count = parts_in(pipe->parts, b);
        for (int j = 0; j < count; j++) {
            uint64_t start = (uint64_t)j * part, len = size - start < part ? size - start : part;
            entries[n++] = buffer_entry(binding_of(pipe->parts, b, j), p->buffers[b].buffer, offset + start, len);
        }
    }
    entries[n++] = buffer_entry(BASES_BINDING, d->params, ARGS_BYTES, sizeof bases);
    wg.QueueWriteBuffer(d->queue, d->params, 0, p->words, (size_t)p->n * 4);
    wg.QueueWriteBuffer(d->queue, d->params, ARGS_BYTES, bases, sizeof bases);
    WGPUBindGroupDescriptor bd = WGPU_BIND_GROUP_DESCRIPTOR_INIT;
    bd.layout = pipe->layout;
    bd.entryCount = n;
    bd.entries = entries;
    WGPUBindGroup group = wg.DeviceCreateBindGroup(d->device, &bd);
    WGPUCommandEncoder enc = wg.DeviceCreateCommandEncoder(d->device, NULL);
    WGPUComputePassEncoder pass = wg.CommandEncoderBeginComputePass(enc, NULL);
    wg.ComputePassEncoderSetPipeline(pass, pipe->pipeline);
    wg.ComputePassEncoderSetBindGroup(pass, 0, group, 0, NULL);
    wg.ComputePassEncoderDispatchWorkgroups(pass, groups[0], groups[1], groups[2]);
    wg.ComputePassEncoderEnd(pass);
    WGPUCommandBuffer cmd = wg.CommandEncoderFinish(enc, NULL);
    /* The parameters were written to the queue just before: each launch is
     * its own submission, so the next launch's write lands after this one. */
    wg.QueueSubmit(d->queue, 1, &cmd);
    wg.CommandBufferRelease(cmd);
    wg.ComputePassEncoderRelease(pass);
    wg.CommandEncoderRelease(enc);
    if (group) wg.BindGroupRelease(group);
    return TF_OK;
}

/* matmul_flat's work items: 4x4 blocks of the output, row blocks x column
 * blocks x batches (plan.c's arguments 0, 1 and 4); 0 when there are none
 * or the output's elements pass what a WGSL i32 counts. */
static size_t matmul_items(int nargs, const tf_pk_arg *args) {
    if (nargs < 5 || args[0].size != sizeof(int64_t) || args[1].size != sizeof(int64_t) ||
        args[4].size != sizeof(tf_pk_geom))
        return 0;
    int64_t m, n;
    tf_pk_geom g;
    memcpy(&m, args[0].value, sizeof m);
    memcpy(&n, args[1].value, sizeof n);
    memcpy(&g, args[4].value, sizeof g);
    int64_t elems = m * n, blocks = ((m + 3) / 4) * ((n + 3) / 4);
    for (int i = 0; i < g.ndim && i < TF_PK_GEOM_DIMS; i++) {
        if (g.shape[i] != 0 && elems > INT32_MAX / g.shape[i]) return 0;
        elems *= g.shape[i];
        blocks *= g.shape[i];
    }
    return elems > 0 && elems <= INT32_MAX ? (size_t)blocks : 0;
}

/* The kernel a launch of plan.c's kernel k runs here. matmul's tiles meet
 * through workgroup memory and barriers, which llvmpipe runs as coroutine
 * switches at about 0.2 ms a workgroup (a 1x256 by 256x512 product took 34
 * ms on lavapipe); a CPU adapter takes matmul_flat, an invocation per
 * 4x4 block of the output and no barrier, with the same arguments and the
 * same order of sums. TF_WEBGPU_FLAT_MATMUL=1 takes it on any adapter, 0 never. */
static tf_pk_kernel wg_variant(const wg_dev *d, tf_pk_kernel k) {
    if (k == TF_PK_MATMUL && d->flat_matmul) return WG_MATMUL_FLAT;
    return k;
}

static tf_status wg_launch(void *ctx, tf_dtype program, tf_pk_kernel k, int nargs, const tf_pk_arg *args, int dims,
                           const size_t *global, const size_t *local) {
    wg_dev *d = ctx;
    wg_pipe *pipe = NULL;
    int32_t op = -1;
    if ((unsigned)k < TF_PK_KERNEL_COUNT && kernel_table[k].per_op && nargs > 0 && args[0].size == sizeof op)
        memcpy(&op, args[0].value, sizeof op);
    if ((unsigned)k >= TF_PK_KERNEL_COUNT || !kernel_table[k].args)
        return host->set_error(TF_ERR_UNSUPPORTED, "%s: no WGSL kernel '%s'", d->gd.name,
                               (unsigned)k < TF_PK_KERNEL_COUNT ? tf_pk_kernel_names[k] : "?");
    packed p;
    tf_status s = pack(d, k, nargs, args, global, dims, &p);
    if (s != TF_OK) return s;
    uint32_t parts = 0;
    if (!parts_key(d, &p, &parts))
        return host->set_error(TF_ERR_UNSUPPORTED, "%s: kernel '%s' needs more storage bindings than the device has",
                               d->gd.name, tf_pk_kernel_names[k]);
    tf_pk_kernel runs = wg_variant(d, k);
    size_t flat_items = 0;
    if (runs == WG_MATMUL_FLAT) {
        flat_items = matmul_items(nargs, args);
        if (flat_items == 0) {
            runs = k;                                  /* nothing to do, or past i32: the tiles refuse or skip it */
        } else {
            p.words[0] = (uint32_t)flat_items;         /* gx: the items the grid-stride loop covers */
            p.words[1] = 1;                            /* gy */
        }
    }
    s = ensure_pipe(d, program, runs, op, parts, &pipe);
    if (s != TF_OK) return s;
    bool local_ok = dims == 1 ? (!local || local[0] == WG_RWG)
                              : local && local[0] * local[1] == (k == TF_PK_MATMUL ? WG_TS * WG_TS : WG_RWG);
    if (!local_ok)
        return host->set_error(TF_ERR_BACKEND, "%s: kernel '%s' launched with a workgroup its WGSL was not built for",
                               d->gd.name, tf_pk_kernel_names[k]);
    uint32_t groups[3];
    size_t per_group[1] = {global[0] * WG_SIZE}, group_local[1] = {WG_SIZE};
    bool grouped = kernel_table[k].group_per_item;
    bool fits = runs == WG_MATMUL_FLAT ? dispatch_size(d, 1, &flat_items, NULL, groups)
                                       : dispatch_size(d, dims, grouped ? per_group : global,
                                                       grouped ? group_local : local, groups);
    if (!fits)
        return host->set_error(TF_ERR_UNSUPPORTED, "%s: kernel '%s' needs more workgroups than the device dispatches",
                               d->gd.name, tf_pk_kernel_names[k]);
    if (groups[0] == 0 || groups[1] == 0 || groups[2] == 0) return TF_OK;
    /* No error scope here: popping one waits for the queue. A validation
     * error (a bug of ours) reaches the device's uncaptured-error callback,
     * which wgpu-native calls while the call that raised it runs. */
    d->uncaptured = false;
    tf_status es = encode(d, pipe, &p, groups);
    if (d->uncaptured)
        return tf_gpu_fail(&d->gd, TF_GPU_ERROR_OTHER, tf_pk_kernel_names[k], "validation error", d->uncaptured_message);
    if (es != TF_OK) return es;
    d->launches++;
    return TF_OK;
}

/* Bytes of `elems` elements of dt (whole blocks of a quantized dtype). */
static int64_t bytes_of(tf_dtype dt, int64_t elems) {
    int64_t blk = tf_pk_block_elems(dt);
    return blk ? elems / blk * tf_pk_block_bytes(dt) : elems * (int64_t)tf_pk_elsize(dt);
}

/* The bytes [lo, hi) a descriptor's elements occupy in its buffer (its
 * offset is in bytes, its strides in elements; a quantized layout's spans
 * are whole blocks, its last element ends one). */
static void extent_of(const tf_tensor_desc *t, uint64_t *lo, uint64_t *hi) {
    int64_t min = 0, max = 0, blk = tf_pk_block_elems(t->dtype);
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            *lo = *hi = t->offset;
            return;
        }
        int64_t span = (t->shape[i] - 1) * t->strides[i];
        if (span < 0) min += span;
        else max += span;
    }
    *lo = (uint64_t)((int64_t)t->offset + bytes_of(t->dtype, min));
    *hi = (uint64_t)((int64_t)t->offset + bytes_of(t->dtype, max + (blk ? blk : 1)));
}

/* plan.c names a tensor's buffer through mem(), which has no device
 * argument: the device running an op is this thread's (runs hold its lock). */
static _Thread_local wg_dev *running;

static wg_window *new_window(WGPUBuffer buffer, uint64_t lo, uint64_t hi) {
    wg_dev *d = running;
    if (!d || d->n_windows >= WG_MAX_WINDOWS) return NULL;    /* packing refuses a NULL buffer */
    wg_window *w = &d->windows[d->n_windows++];
    *w = (wg_window){buffer, lo, hi};
    return w;
}

static void *mem_of(const tf_tensor_desc *t) {
    uint64_t lo, hi;
    extent_of(t, &lo, &hi);
    return new_window(((tf_gpu_block *)t->buffer)->handle, lo, hi);
}

static tf_status scratch_alloc(void *ctx, size_t nbytes, void **handle, void **token) {
    wg_dev *d = ctx;
    tf_gpu_block *b = NULL;
    tf_status s = tf_gpu_alloc(&d->gd, nbytes, &b);
    if (s == TF_OK) {
        *handle = new_window(b->handle, 0, nbytes);
        *token = b;
    }
    return s;
}

/* Safe right after the launches: wgpu keeps a buffer alive while submitted
 * work uses it, and the block's next user is later on the same queue. */
static void scratch_free(void *ctx, void *token) { tf_gpu_free(&((wg_dev *)ctx)->gd, token); }

tf_status tf_wg_run(wg_dev *d, const tf_op *op) {
    tf_pk_target tg = {d, host, false, WG_RWG, WG_TS, mem_of, wg_launch, scratch_alloc, scratch_free, d->no_qgemv, NULL};
    running = d;
    d->n_windows = 0;
    tf_status s = tf_pk_run(&tg, op);
    running = NULL;
    return s;
}

/* ---- what runs here ---- */

/* The dtypes a tensor may have here. WGSL has no 64-bit types: i64 is kept
 * as (lo, hi) word pairs by the kernels that move, compare, select, reduce
 * and add (not by matmul), and f64 only moves: a cast into it from a 32-bit
 * or narrower dtype, a fill, a same-dtype copy. Any other op with them runs
 * on the CPU (counted); neither is listed in the device's caps. */
static bool device_dtype(tf_dtype dt) {
    return dt == TF_F32 || dt == TF_F16 || dt == TF_BF16 || dt == TF_I8 || dt == TF_I32 || dt == TF_U8 ||
           dt == TF_BOOL;
}

static bool known_dtype(tf_dtype dt) {
    return device_dtype(dt) || dt == TF_I64 || dt == TF_F64 || tf_pk_block_elems(dt) != 0;
}

static bool has_dtype(const tf_op *op, tf_dtype dt) {
    if (op->output.dtype == dt) return true;
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].dtype == dt) return true;
    return false;
}

/* An i64 arange the kernel counts exactly in i32: a whole start and step
 * (each exact as the f32 plan.c passes) and every value within i32
 * (positions, indices). */
static bool whole_i32_range(const tf_op *op) {
    double start = op->params.value, step = op->params.step, n = (double)tf_desc_numel(&op->output);
    return start == floor(start) && step == floor(step) && fabs(start) < 0x1p24 && fabs(step) < 0x1p24 &&
           fabs(start) + n * fabs(step) < 0x1p31;
}

static bool wide_dtypes_allowed(const tf_op *op) {
    if (has_dtype(op, TF_F64)) {
        if (op->kind == TF_OP_FILL) return true;
        return op->kind == TF_OP_COPY && op->output.dtype == TF_F64 &&
               (op->inputs[0].dtype == TF_F64 || device_dtype(op->inputs[0].dtype));
    }
    if (op->kind == TF_OP_ARANGE) return whole_i32_range(op);
    switch (tf_op_kernel_of(op->kind)) {
    case TF_KERNEL_MATMUL: case TF_KERNEL_MATH: case TF_KERNEL_ROW: case TF_KERNEL_ROPE: case TF_KERNEL_ATTENTION:
    case TF_KERNEL_CONV: case TF_KERNEL_POOL: case TF_KERNEL_OPTIMIZER: case TF_KERNEL_RANDOM: case TF_KERNEL_ARANGE:
        /* positions, the only i64 operand these kernels read */
        return op->kind == TF_OP_ROPE && op->inputs[0].dtype != TF_I64;
    default:
        return true;
    }
}

/* The bindings t's window takes (0: it cannot be bound, or its element
 * indices are outside the i32 the kernels index with). */
static int bindings_for(wg_dev *d, const tf_tensor_desc *t) {
    size_t es = tf_pk_block_elems(t->dtype) ? 1 : tf_pk_elsize(t->dtype);   /* quantized: indexed in bytes */
    if (!es) return 0;
    uint64_t lo, hi;
    extent_of(t, &lo, &hi);
    wg_window w = {NULL, lo, hi};
    return hi / es < INT32_MAX / 2 ? window_parts(d, &w) : 0;
}

/* Can every tensor of op be bound, a large one as several bindings, within
 * the stage's storage-buffer limit? Counted as if each tensor were bound
 * once, plus the parameters, the bases and a reduction's scratch. */
static bool fits_bindings(wg_dev *d, const tf_op *op) {
    int n = bindings_for(d, &op->output), total = n + 3;
    bool split = n > 1;
    for (int i = 0; i < op->n_inputs && n; i++) {
        n = bindings_for(d, &op->inputs[i]);
        total += n;
        split = split || n > 1;
    }
    if (n == 0) return false;
    return !split || (total <= MAX_BINDINGS && (uint32_t)total <= d->limits.maxStorageBuffersPerShaderStage);
}

bool tf_wg_supports(wg_dev *d, const tf_op *op) {
    if (!tf_pk_supports(op, true)) return false;
    if (!known_dtype(op->output.dtype)) return false;
    for (int i = 0; i < op->n_inputs; i++)
        if (!known_dtype(op->inputs[i].dtype)) return false;
    bool wide = has_dtype(op, TF_F64) || has_dtype(op, TF_I64);
    if (wide && !wide_dtypes_allowed(op)) return false;
    return fits_bindings(d, op);
}

/* Few activation rows: qgemv's lanes meet through workgroup barriers,
 * which llvmpipe runs as coroutine switches; a CPU adapter takes qmatmul's
 * barrier-free kernel instead. TF_WEBGPU_QGEMV=1 takes qgemv anyway (a
 * test runs it so on lavapipe), 0 never. */
static bool avoid_qgemv(const wg_dev *d) {
    return !tf_gpu_env_flag("TF_WEBGPU_QGEMV", d->adapter_type != WGPUAdapterType_CPU);
}

bool tf_wg_kernels_init(wg_dev *d) {
    d->no_qgemv = avoid_qgemv(d);
    d->flat_matmul = tf_gpu_env_flag("TF_WEBGPU_FLAT_MATMUL", d->adapter_type == WGPUAdapterType_CPU);
    /* Workgroups for a 1-D kernel: a CPU adapter runs a few per core at a
     * time and pays for each; a GPU wants enough to fill every unit. */
    d->flat_groups = d->adapter_type == WGPUAdapterType_CPU ? 1024 : 16384;
    WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
    desc.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst;
    desc.size = PARAM_BYTES;
    d->params = wg.DeviceCreateBuffer(d->device, &desc);
    return d->params != NULL;
}

void tf_wg_kernels_release(wg_dev *d) {
    for (int i = 0; i < d->n_pipes; i++) {
        wg_pipe *p = &d->pipes[i];
        if (p->pipeline) wg.ComputePipelineRelease(p->pipeline);
        if (p->layout) wg.BindGroupLayoutRelease(p->layout);
    }
    free(d->pipes);
    d->pipes = NULL;
    d->n_pipes = d->cap_pipes = 0;
    if (d->params) wg.BufferRelease(d->params);
    d->params = NULL;
}
