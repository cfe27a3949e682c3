/* Dtype properties and the type-promotion rule. */
#include "engine.h"

typedef struct dtype_info {
    const char *name;
    size_t size, block;                  /* bytes per block of `block` elements */
    bool is_float, is_integer;
    tf_dtype part;                       /* complex: the dtype of each part; else TF_DTYPE_COUNT */
} dtype_info;

static const dtype_info dtypes[TF_DTYPE_COUNT] = {
#define TF__DTYPE_INFO(E, n, sz, fl, in) {#n, sz, 1, fl, in, TF_DTYPE_COUNT},
    TF_DTYPE_LIST(TF__DTYPE_INFO)
#undef TF__DTYPE_INFO
#define TF__QDTYPE_INFO(E, n, blk, bytes) {#n, bytes, blk, false, false, TF_DTYPE_COUNT},
    TF_QDTYPE_LIST(TF__QDTYPE_INFO)
#undef TF__QDTYPE_INFO
#define TF__CDTYPE_INFO(E, n, sz, part) {#n, sz, 1, false, false, TF_##part},
    TF_CDTYPE_LIST(TF__CDTYPE_INFO)
#undef TF__CDTYPE_INFO
};

bool tf__dtype_valid(tf_dtype dt) { return (unsigned)dt < TF_DTYPE_COUNT; }
const char *tf_dtype_name(tf_dtype dt) { return tf__dtype_valid(dt) ? dtypes[dt].name : "?"; }
size_t tf_dtype_size(tf_dtype dt) { return tf__dtype_valid(dt) ? dtypes[dt].size : 0; }
size_t tf_dtype_block_size(tf_dtype dt) { return tf__dtype_valid(dt) ? dtypes[dt].block : 0; }
bool tf_dtype_is_quantized(tf_dtype dt) { return tf__dtype_valid(dt) && dtypes[dt].block > 1; }
int64_t tf__bytes_of(tf_dtype dt, int64_t n) { return n / (int64_t)dtypes[dt].block * (int64_t)dtypes[dt].size; }

bool tf_dtype_is_float(tf_dtype dt) { return tf__dtype_valid(dt) && dtypes[dt].is_float; }
bool tf_dtype_is_integer(tf_dtype dt) { return tf__dtype_valid(dt) && dtypes[dt].is_integer; }
bool tf_dtype_is_complex(tf_dtype dt) { return tf__dtype_valid(dt) && dtypes[dt].part != TF_DTYPE_COUNT; }

tf_dtype tf_dtype_to_real(tf_dtype dt) {
    if (!tf__dtype_valid(dt)) return TF_DTYPE_COUNT;
    return tf_dtype_is_complex(dt) ? dtypes[dt].part : dt;
}

tf_dtype tf_dtype_to_complex(tf_dtype dt) {
    if (!tf__dtype_valid(dt)) return TF_DTYPE_COUNT;
    if (dt == TF_F64) return TF_C128;
    return dtypes[dt].is_float || dtypes[dt].is_integer ? TF_C64 : dt;
}

/* Category: 0 bool, 1 integer, 2 float, 3 complex. */
static int category(tf_dtype dt) {
    return dtypes[dt].part != TF_DTYPE_COUNT ? 3 : dtypes[dt].is_float ? 2 : dtypes[dt].is_integer ? 1 : 0;
}
int tf__dtype_category(tf_dtype dt) { return tf__dtype_valid(dt) ? category(dt) : 0; }

static tf_dtype promote_integers(tf_dtype a, tf_dtype b) {
    bool a_unsigned = a == TF_U8, b_unsigned = b == TF_U8;
    if (a_unsigned != b_unsigned) {                  /* u8 with a signed type */
        tf_dtype s = a_unsigned ? b : a;
        return s == TF_I8 ? TF_I32 : s;              /* no i16: u8+i8 -> i32 */
    }
    return dtypes[a].size >= dtypes[b].size ? a : b;
}

static tf_dtype promote_floats(tf_dtype a, tf_dtype b) {
    if ((a == TF_F16 && b == TF_BF16) || (a == TF_BF16 && b == TF_F16)) return TF_F32;
    return dtypes[a].size >= dtypes[b].size ? a : b;
}

/* At least one side complex: the complex dtype whose parts hold both. */
static tf_dtype promote_complex(tf_dtype a, tf_dtype b) {
    return a == TF_C128 || b == TF_C128 || a == TF_F64 || b == TF_F64 ? TF_C128 : TF_C64;
}

tf_status tf_promote_types(tf_dtype a, tf_dtype b, tf_dtype *out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_promote_types: out is NULL");
    if (!tf__dtype_valid(a) || !tf__dtype_valid(b))
        return tf__error(TF_ERR_DTYPE, "tf_promote_types: invalid dtype %d/%d", (int)a, (int)b);
    if (tf_dtype_is_quantized(a) || tf_dtype_is_quantized(b))
        return tf__error(TF_ERR_DTYPE, "tf_promote_types: %s does not promote (cast it to a float dtype)",
                         tf_dtype_name(tf_dtype_is_quantized(a) ? a : b));
    if (a == b) { *out = a; return TF_OK; }
    int ca = category(a), cb = category(b);
    if (ca == 3 || cb == 3) *out = promote_complex(a, b);
    else if (ca != cb) *out = ca > cb ? a : b;
    else if (ca == 2) *out = promote_floats(a, b);
    else *out = promote_integers(a, b);
    return TF_OK;
}
