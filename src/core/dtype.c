/* Dtype properties and the type-promotion rule. */
#include "core.h"

typedef struct dtype_info {
    const char *name;
    size_t size;
    bool is_float, is_integer;
} dtype_info;

static const dtype_info dtypes[TF_DTYPE_COUNT] = {
#define TF__DTYPE_INFO(E, n, sz, fl, in) {#n, sz, fl, in},
    TF_DTYPE_LIST(TF__DTYPE_INFO)
#undef TF__DTYPE_INFO
};

bool tf__dtype_valid(tf_dtype dt) { return (unsigned)dt < TF_DTYPE_COUNT; }
const char *tf_dtype_name(tf_dtype dt) { return tf__dtype_valid(dt) ? dtypes[dt].name : "?"; }
size_t tf_dtype_size(tf_dtype dt) { return tf__dtype_valid(dt) ? dtypes[dt].size : 0; }
bool tf_dtype_is_float(tf_dtype dt) { return tf__dtype_valid(dt) && dtypes[dt].is_float; }
bool tf_dtype_is_integer(tf_dtype dt) { return tf__dtype_valid(dt) && dtypes[dt].is_integer; }

/* Category: 0 bool, 1 integer, 2 float. */
static int category(tf_dtype dt) { return dtypes[dt].is_float ? 2 : dtypes[dt].is_integer ? 1 : 0; }

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

tf_status tf_promote_types(tf_dtype a, tf_dtype b, tf_dtype *out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_promote_types: out is NULL");
    if (!tf__dtype_valid(a) || !tf__dtype_valid(b))
        return tf__error(TF_ERR_DTYPE, "tf_promote_types: invalid dtype %d/%d", (int)a, (int)b);
    if (a == b) { *out = a; return TF_OK; }
    int ca = category(a), cb = category(b);
    if (ca != cb) *out = ca > cb ? a : b;
    else if (ca == 2) *out = promote_floats(a, b);
    else *out = promote_integers(a, b);
    return TF_OK;
}
