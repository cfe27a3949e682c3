// tensorframe's WebGPU kernels: WGSL ports of the portable kernels
// (gpu_common/kernels.cl), launched with the same arguments by plan.c.
//
// The plugin builds one shader module per (kernel, dtype) from three parts:
//   - a prelude it generates: TF_DT, IS_FLOAT, IS_I64, OP (the op code of a
//     kernel that serves several ops: each op gets its own pipeline, since a
//     switch on a value the compiler cannot see as uniform costs every case
//     on a SIMD emulation such as llvmpipe), the workgroup sizes (WG for
//     1-D kernels, RWG for reductions, TS for matmul tiles) and the op codes
//     of the op table (TF_OP_ADD, ...);
//   - the `common` section below;
//   - the kernel's own section (`//@kernel NAME`): its Args struct (the
//     scalar arguments in plan.c's order, 64-bit integers narrowed to i32,
//     after gx and gy, the launch's global size) and its entry point NAME.
//     `//@flat NAME` is the usual entry point of a 1-D kernel, written out
//     by tools/gen_formulas.py: invocations stride over A.gx work items
//     and run NAME_item(i) for each.
// Between the prelude and the common part come the bindings: Args at
// binding 0, then one `array<u32>` per buffer argument (b_NAME), a window of
// its buffer around the tensor that starts at word BASES[k] (so a tensor
// deep in a large buffer binds within the binding limit), each with
// accessors b_NAME_ldf/_ldi (element i of dtype dt as f32/i32), _stf/_sti,
// _ld64/_st64. Tensors of every dtype are stored as 32-bit words: f16, bf16,
// i8, u8 and bool are unpacked in the accessors, and a buffer written with
// elements narrower than a word is an array of atomic<u32> whose stores
// replace their own bytes only (no two invocations race on a word).
//
// WGSL has no 64-bit types: f64 is not a device dtype, i64 appears only as
// positions (argmax, index and position inputs, whose values fit in i32) and
// as integer sums, kept as (lo, hi) word pairs.

//@common
const DT_F32: i32 = 0;
const DT_F64: i32 = 1;
const DT_F16: i32 = 2;
const DT_BF16: i32 = 3;
const DT_I8: i32 = 4;
const DT_I32: i32 = 5;
const DT_I64: i32 = 6;
const DT_U8: i32 = 7;
const DT_BOOL: i32 = 8;

struct Geom {
    shape: array<i32, 8>,
    stride: array<array<i32, 8>, 4>,
    offset: array<i32, 4>,
    ndim: i32,
    contiguous: i32,
}

// Infinity and NaN cannot be written as constants in WGSL (a constant
// expression that overflows is an error): they come from private variables.
var<private> BITS_INF: u32 = 0x7f800000u;
var<private> BITS_NAN: u32 = 0x7fc00000u;
fn inf() -> f32 { return bitcast<f32>(BITS_INF); }
fn nan() -> f32 { return bitcast<f32>(BITS_NAN); }
// Bit tests: a compiler may fold x != x away.
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }

fn dt_size(dt: i32) -> i32 {
    switch dt {
        case 0, 5: { return 4; }
        case 1, 6: { return 8; }
        case 2, 3: { return 2; }
        default: { return 1; }
    }
}

fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let v = f32(m) * 5.9604644775390625e-8;          // m * 2^-24, exact
        return select(v, -v, s != 0u);
    }
    if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// Round to nearest even, as the CPU's tf_f32_to_f16.
fn f32_to_f16(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    let s = (x >> 16u) & 0x8000u;
    let a = x & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
    if (a >= 0x477ff000u) { return s | 0x7c00u; }
    if (a >= 0x38800000u) {
        let m = a - 0x38000000u;
        return s | ((m + 0xfffu + ((m >> 13u) & 1u)) >> 13u);
    }
    return s | u32(round(abs(f) * 16777216.0));        // subnormal: units of 2^-24, ties to even
}

fn f32_to_bf16(f: f32) -> u32 {
    let u = bitcast<u32>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
    return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}

// Element bits (zero-extended; an i64's low word) to a value.
fn int_of_bits(dt: i32, b: u32) -> i32 {
    switch dt {
        case 4: { return bitcast<i32>(b << 24u) >> 24u; }
        case 7, 8: { return i32(b); }
        default: { return bitcast<i32>(b); }
    }
}

fn float_of_bits(dt: i32, b: u32) -> f32 {
    switch dt {
        case 0: { return bitcast<f32>(b); }
        case 2: { return f16_to_f32(b); }
        case 3: { return bitcast<f32>(b << 16u); }
        default: { return 0.0; }
    }
}

fn is_float_dt(dt: i32) -> bool { return dt <= DT_BF16; }

// Truncate toward zero and saturate, NaN -> 0 (the CPU reference's casts).
fn sat_int(v: f32, lo: f32, hi: f32) -> i32 {
    if (is_nan(v)) { return 0; }
    let t = trunc(v);
    if (t <= lo) { return i32(lo); }
    if (t >= hi) { return select(i32(hi), 2147483647, hi >= 2147483647.0); }
    return i32(t);
}

fn f32_of_bits(dt: i32, b: u32) -> f32 {
    if (is_float_dt(dt)) { return float_of_bits(dt, b); }
    return f32(int_of_bits(dt, b));
}

fn i32_of_bits(dt: i32, b: u32) -> i32 {
    if (is_float_dt(dt)) { return sat_int(float_of_bits(dt, b), -2147483648.0, 2147483648.0); }
    return int_of_bits(dt, b);
}

fn bits_of_f32(dt: i32, v: f32) -> u32 {
    switch dt {
        case 0: { return bitcast<u32>(v); }
        case 2: { return f32_to_f16(v); }
        case 3: { return f32_to_bf16(v); }
        case 4: { return bitcast<u32>(sat_int(v, -128.0, 127.0)); }
        case 7: { return bitcast<u32>(sat_int(v, 0.0, 255.0)); }
        case 8: { return select(0u, 1u, v != 0.0 || is_nan(v)); }
        default: { return bitcast<u32>(sat_int(v, -2147483648.0, 2147483648.0)); }
    }
}

fn bits_of_i32(dt: i32, v: i32) -> u32 {
    if (is_float_dt(dt)) { return bits_of_f32(dt, f32(v)); }
    if (dt == DT_BOOL) { return select(0u, 1u, v != 0); }
    return bitcast<u32>(v);                               // narrower integers wrap when stored
}

// 64-bit integers as (lo, hi) words.
fn i64_of(v: i32) -> vec2<u32> { return vec2<u32>(bitcast<u32>(v), select(0u, 0xffffffffu, v < 0)); }

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

// The low 64 bits of a * b (wrapping, as the CPU's int64 arithmetic).
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let a0 = a.x & 0xffffu;
    let a1 = a.x >> 16u;
    let b0 = b.x & 0xffffu;
    let b1 = b.x >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(lo, hi + a.x * b.y + a.y * b.x);
}

fn neg64(a: vec2<u32>) -> vec2<u32> { return add64(~a, vec2<u32>(1u, 0u)); }
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return add64(a, neg64(b)); }

// x << n for n in [0, 63], as a (lo, hi) pair.
fn shl64(x: u32, n: u32) -> vec2<u32> {
    if (n == 0u) { return vec2<u32>(x, 0u); }
    if (n < 32u) { return vec2<u32>(x << n, x >> (32u - n)); }
    return vec2<u32>(0u, x << (n - 32u));
}

// An i64 as f32 (within an ulp: the CPU's (float) rounds once).
fn f32_of_i64(v: vec2<u32>) -> f32 {
    if (v.y == select(0u, 0xffffffffu, (v.x & 0x80000000u) != 0u)) { return f32(bitcast<i32>(v.x)); }
    return f32(bitcast<i32>(v.y)) * 4294967296.0 + f32(v.x);
}

// Truncated toward zero and saturated, NaN -> 0 (the CPU reference's cast).
fn i64_of_f32(v: f32) -> vec2<u32> {
    if (is_nan(v)) { return vec2<u32>(0u, 0u); }
    let t = trunc(v);
    if (abs(t) < 2147483648.0) { return i64_of(i32(t)); }
    if (t >= 9223372036854775808.0) { return vec2<u32>(0xffffffffu, 0x7fffffffu); }
    if (t <= -9223372036854775808.0) { return vec2<u32>(0u, 0x80000000u); }
    let b = bitcast<u32>(abs(t));
    let e = (b >> 23u) - 127u;                            // 31..62
    let m = (b & 0x7fffffu) | 0x800000u;
    let r = shl64(m, e - 23u);
    return select(r, neg64(r), t < 0.0);
}

// f64 bits of an f32 (exact).
fn f64_of_f32(v: f32) -> vec2<u32> {
    let b = bitcast<u32>(v);
    let s = b & 0x80000000u;
    let e = (b >> 23u) & 0xffu;
    let m = b & 0x7fffffu;
    if (e == 255u) { return vec2<u32>(m << 29u, s | 0x7ff00000u | (m >> 3u)); }
    if (e == 0u) {
        if (m == 0u) { return vec2<u32>(0u, s); }
        let p = 31u - countLeadingZeros(m);               // top bit of the subnormal's mantissa
        let f = shl64(m & ~(1u << p), 52u - p);
        return vec2<u32>(f.x, s | ((p + 874u) << 20u) | f.y);   // exponent p - 149 + 1023
    }
    return vec2<u32>(m << 29u, s | ((e + 896u) << 20u) | (m >> 3u));
}

// f64 bits of an i32 (exact).
fn f64_of_i32(v: i32) -> vec2<u32> {
    if (v == 0) { return vec2<u32>(0u, 0u); }
    let a = select(bitcast<u32>(v), 0u - bitcast<u32>(v), v < 0);
    let p = 31u - countLeadingZeros(a);
    let f = shl64(a & ~(1u << p), 52u - p);
    return vec2<u32>(f.x, select(0u, 0x80000000u, v < 0) | ((p + 1023u) << 20u) | f.y);
}

fn lt64(a: vec2<u32>, b: vec2<u32>) -> bool {     // signed
    let ah = bitcast<i32>(a.y);
    let bh = bitcast<i32>(b.y);
    return ah < bh || (ah == bh && a.x < b.x);
}

// Element offset of flat index i (row-major over g.shape) for operand k.
fn offset_of(g: Geom, k: i32, i0: i32) -> i32 {
    var gg = g;
    var off = gg.offset[k];
    var i = i0;
    for (var d = gg.ndim - 1; d >= 0; d--) {
        let e = gg.shape[d];
        off += (i % e) * gg.stride[k][d];
        i /= e;
    }
    return off;
}

fn operand(g: Geom, k: i32, i: i32) -> i32 {
    if (g.contiguous != 0) { return g.offset[k] + i; }
    return offset_of(g, k, i);
}

// The flat index of a 1-D launch, whose workgroups are folded into x and y
// (at most 65535 per dimension), and its stride: 1-D kernels loop over
// their gx items, the plugin dispatching no more workgroups than keep the
// device busy (each costs llvmpipe several microseconds).
fn flat_id(gid: vec3<u32>, nwg: vec3<u32>) -> i32 { return i32(gid.y * nwg.x * WG + gid.x); }
fn flat_stride(nwg: vec3<u32>) -> i32 { return i32(nwg.x * nwg.y * WG); }
// The flat workgroup index of a 1-D launch of one group per item.
fn group_id(wid: vec3<u32>, nwg: vec3<u32>) -> i32 { return i32(wid.y * nwg.x + wid.x); }

// exp(-s * s / k) with s * s split (s = sh + sl, sh of 12 bits) so that
// the exponent carries no rounding; k = 1 or 2.
fn exp_neg_square(s: f32, k: f32) -> f32 {
    let sh = bitcast<f32>(bitcast<u32>(s) & 0xfffff000u);
    return exp_f32(-(sh * sh) / k) * exp_f32(-((s - sh) * (s + sh)) / k);
}

// erfc(a) * exp(a^2) for a >= 0.5 (W. J. Cody's rational approximations):
// the caller multiplies by exp(-a^2) from its own argument, exactly squared.
fn erfc_scaled(a: f32) -> f32 {
    if (a >= 4.0) {                                      // Cody's asymptotic range
        let z = 1.0 / (a * a);
        var num = 1.63153871373020978e-2 * z;
        var den = z;
        num = (num + 3.05326634961232344e-1) * z;
        den = (den + 2.56852019228982242) * z;
        num = (num + 3.60344899949804439e-1) * z;
        den = (den + 1.87295284992346725) * z;
        num = (num + 1.25781726111229246e-1) * z;
        den = (den + 5.27905102951428412e-1) * z;
        num = (num + 1.60837851487422766e-2) * z;
        den = (den + 6.05183413124413191e-2) * z;
        let r = z * (num + 6.58749161529837803e-4) / (den + 2.33520497626869185e-3);
        return (5.6418958354775628695e-1 - r) / a;
    }
    // Cody's second interval (his table III): P of degree 8, Q of 8, monic.
    var num = 2.15311535474403846e-8 * a;
    var den = a;
    num = (num + 5.64188496988670089e-1) * a;
    den = (den + 1.57449261107098347e1) * a;
    num = (num + 8.88314979438837594) * a;
    den = (den + 1.17693950891312499e2) * a;
    num = (num + 6.61191906371416295e1) * a;
    den = (den + 5.37181101862009858e2) * a;
    num = (num + 2.98635138197400131e2) * a;
    den = (den + 1.62138957456669019e3) * a;
    num = (num + 8.81952221241769090e2) * a;
    den = (den + 3.29079923573345963e3) * a;
    num = (num + 1.71204761263407058e3) * a;
    den = (den + 4.36261909014324716e3) * a;
    num = (num + 2.05107837782607147e3) * a;
    den = (den + 3.43936767414372164e3) * a;
    let p = num + 1.23033935479799725e3;
    let q = den + 1.23033935480374942e3;
    return p / q;
}

// erf for |x| < 0.5 (Cody's rational approximation), beyond from erfc.
fn erf_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.5) {
        let t = x * x;
        let p = ((((0.18577770618460315 * t + 3.1611237438705655) * t + 113.86415415105016) * t + 377.485237685302) * t + 3209.3775891384694);
        let q = ((((t + 23.601290952344122) * t + 244.02463793444417) * t + 1282.6165260773723) * t + 2844.236833439171);
        return x * p / q;
    }
    if (a >= 10.0) { return select(1.0, -1.0, x < 0.0); }
    let erfc = erfc_scaled(a) * exp_neg_square(a, 1.0);
    return select(1.0 - erfc, erfc - 1.0, x < 0.0);
}

// The standard normal CDF, 0.5 erfc(-x / sqrt 2) (GELU's x Phi(x)): below
// x = -0.5 sqrt 2 from erfc_scaled directly, with exp(-x^2 / 2) from x
// itself (the rounding of x / sqrt 2 would cost x^2 ulps there), 1 + erf
// where nothing cancels.
fn ncdf_f32(x: f32) -> f32 {
    let u = x * 0.70710678118654752440;
    if (u <= -14.0) { return 0.0; }                      // below f32's range
    if (u <= -0.5) { return 0.5 * erfc_scaled(-u) * exp_neg_square(x, 2.0); }
    return 0.5 * (1.0 + erf_f32(u));
}

// erfc(w) without cancellation: from erfc_scaled where erfc is small
// (w >= 0.5), as 1 - erf(w) where it is not; below f32's range past 10.
fn erfc_f32(w: f32) -> f32 {
    if (w >= 10.0) { return 0.0; }
    if (w >= 0.5) { return erfc_scaled(w) * exp_neg_square(w, 1.0); }
    return 1.0 - erf_f32(w);
}

// exp and log to about an ulp (a driver's may be several off: lavapipe's
// are). ln 2 is split so that n * LN2_HI is exact.
const LN2_HI: f32 = 0.693145751953125;
const LN2_LO: f32 = 1.4286068203094172e-06;

fn exp_f32(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    if (x > 88.73) { return inf(); }
    if (x < -104.0) { return 0.0; }
    let n = round(x * 1.4426950408889634);
    let f = (x - n * LN2_HI) - n * LN2_LO;               // |f| <= 0.35
    var term = 1.0;
    var sum = 1.0;
    for (var k = 1; k <= 10; k++) {
        term *= f / f32(k);
        sum += term;
    }
    return ldexp(sum, i32(n));
}

fn log_f32(x: f32) -> f32 {
    if (!(x > 0.0) || is_inf(x)) { return log(x); }      // 0, negatives, NaN, infinity
    let fe = frexp(x);
    var m = fe.fract;
    var e = f32(fe.exp);
    if (m < 0.70710678) { m *= 2.0; e -= 1.0; }
    let t = (m - 1.0) / (m + 1.0);                       // |t| < 0.172
    let t2 = t * t;
    let ln_m = 2.0 * t * (1.0 + t2 * (1.0 / 3.0 + t2 * (0.2 + t2 * (1.0 / 7.0 + t2 * (1.0 / 9.0 + t2 * (1.0 / 11.0))))));
    return e * LN2_HI + (e * LN2_LO + ln_m);
}

// log1p and expm1 from series near 0, where log(1 + x) and exp(x) - 1 would
// cancel (the identities that repair them need a correctly rounded log,
// which a driver's need not be).
fn log1p_f32(x: f32) -> f32 {
    if (abs(x) >= 0.5 || is_nan(x)) { return log_f32(1.0 + x); }
    let t = x / (2.0 + x);                               // log1p(x) = 2 atanh(t), |t| < 1/3
    let t2 = t * t;
    let p = 1.0 + t2 * (1.0 / 3.0 + t2 * (0.2 + t2 * (1.0 / 7.0 + t2 * (1.0 / 9.0 + t2 * (1.0 / 11.0 + t2 * (1.0 / 13.0 + t2 * (1.0 / 15.0 + t2 * (1.0 / 17.0 + t2 * (1.0 / 19.0)))))))));
    return 2.0 * t * p;
}

fn expm1_f32(x: f32) -> f32 {
    if (abs(x) >= 0.5 || is_nan(x)) { return exp_f32(x) - 1.0; }
    var term = x;
    var sum = x;
    for (var k = 2; k <= 11; k++) {                      // x^11 / 11! < 2^-35 for |x| < 1/2
        term *= x / f32(k);
        sum += term;
    }
    return sum;
}

fn tanh_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a > 10.0) { return select(1.0, -1.0, x < 0.0); }
    if (a < 0.0004) { return x; }
    let e = expm1_f32(2.0 * a);
    let t = e / (e + 2.0);
    return select(t, -t, x < 0.0);
}

// The inverse trigonometric and hyperbolic functions, ours for the same
// reason as exp and log: Cephes' atanf and asinf polynomials (about 1.5
// ulp) with their range reductions, acos from asin by half-angle identities
// where pi/2 - asin would cancel, and the hyperbolic ones through log1p_f32
// in forms that do not cancel near their zeros (large arguments through
// log, where the square would overflow).
const PI_F: f32 = 3.14159265358979323846;
const HALF_PI_F: f32 = 1.57079632679489661923;

fn atan_f32(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    var y0 = 0.0;
    var t = a;
    if (a > 2.414213562373095) { y0 = HALF_PI_F; t = -1.0 / a; }
    else if (a > 0.41421356237309503) { y0 = 0.78539816339744831; t = (a - 1.0) / (a + 1.0); }
    let z = t * t;
    let r = y0 + ((((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t);
    return select(r, -r, x < 0.0);
}

fn asin_f32(x: f32) -> f32 {
    let a = abs(x);
    if (!(a <= 1.0)) { return nan(); }                   // NaN, or outside [-1, 1]
    var z = a * a;
    var w = a;
    if (a > 0.5) { z = 0.5 * (1.0 - a); w = sqrt(z); }
    var r = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z + 1.6666752422e-1) * z * w + w;
    if (a > 0.5) { r = HALF_PI_F - 2.0 * r; }            // asin a = pi/2 - 2 asin sqrt((1 - a) / 2)
    return select(r, -r, x < 0.0);
}

fn acos_f32(x: f32) -> f32 {
    let a = abs(x);
    if (!(a <= 1.0)) { return nan(); }
    if (a <= 0.5) { return HALF_PI_F - asin_f32(x); }    // in [pi/3, 2pi/3]: nothing cancels
    let s = 2.0 * asin_f32(sqrt(0.5 * (1.0 - a)));       // acos a = 2 asin sqrt((1 - a) / 2)
    return select(s, PI_F - s, x < 0.0);
}

fn asinh_f32(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    var r: f32;
    if (a > 1.0e9) { r = log_f32(a) + 0.69314718055994531; }
    else { let a2 = a * a; r = log1p_f32(a + a2 / (1.0 + sqrt(1.0 + a2))); }
    return select(r, -r, x < 0.0);
}

fn acosh_f32(x: f32) -> f32 {
    if (!(x >= 1.0)) { return nan(); }                   // NaN, or below 1
    if (x > 1.0e9) { return log_f32(x) + 0.69314718055994531; }
    let t = x - 1.0;                                     // exact up to 2
    return log1p_f32(t + sqrt(2.0 * t + t * t));
}

fn atanh_f32(x: f32) -> f32 {
    let a = abs(x);
    if (!(a <= 1.0)) { return nan(); }
    if (a == 1.0) { return select(inf(), -inf(), x < 0.0); }
    let r = 0.5 * log1p_f32(2.0 * a / (1.0 - a));
    return select(r, -r, x < 0.0);
}

fn sign_bit(v: f32) -> bool { return (bitcast<u32>(v) & 0x80000000u) != 0u; }

// atan2(y, x) with C's zeros and infinities; elsewhere atan(|y| / |x|),
// whose overflow and underflow atan_f32 turns into pi/2 and 0.
fn atan2_f32(y: f32, x: f32) -> f32 {
    if (is_nan(x) || is_nan(y)) { return nan(); }
    let neg = sign_bit(y);
    var r: f32;
    if (y == 0.0) {
        r = select(0.0, PI_F, sign_bit(x));
    } else if (is_inf(y)) {
        if (is_inf(x)) { r = select(0.78539816339744831, 2.35619449019234492, x < 0.0); }
        else { r = HALF_PI_F; }
    } else if (x == 0.0) {
        r = HALF_PI_F;
    } else if (is_inf(x)) {
        r = select(0.0, PI_F, x < 0.0);
    } else {
        let t = atan_f32(abs(y) / abs(x));
        r = select(t, PI_F - t, x < 0.0);
    }
    return select(r, -r, neg);
}

fn copysign_f32(x: f32, y: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(y) & 0x80000000u));
}

// sin and cos to about 1.5 ulp of 1 whatever the driver: WGSL lets a
// driver's own be 2^-11 off (NVIDIA's Vulkan driver failed the cos and rope
// bounds with them; lavapipe's are exact). x - j pi/2 in three parts
// (Cody-Waite: j C1 and j C2 are exact for |j| < 2^12, so |x| < 6400 keeps
// every bit), then minimax polynomials on [-pi/4, pi/4] (Cephes' sinf and
// cosf coefficients); j's quadrant picks which and its sign. Infinity and
// NaN give NaN (r is NaN).
const PIO2_1: f32 = 1.5703125;
const PIO2_2: f32 = 4.837512969970703125e-4;
const PIO2_3: f32 = 7.54978995489188216e-8;

fn sin_poly(r: f32) -> f32 {
    let z = r * r;
    return r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
}

fn cos_poly(r: f32) -> f32 {
    let z = r * r;
    return 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
}

// (sin x, cos x)
fn sincos_f32(x: f32) -> vec2<f32> {
    let j = round(x * 0.63661977236758134);
    let r = ((x - j * PIO2_1) - j * PIO2_2) - j * PIO2_3;
    let q = j - 4.0 * floor(j * 0.25);                   // quadrant 0..3
    let s = sin_poly(r);
    let c = cos_poly(r);
    if (q == 1.0) { return vec2<f32>(c, -s); }
    if (q == 2.0) { return vec2<f32>(-s, -c); }
    if (q == 3.0) { return vec2<f32>(-c, s); }
    return vec2<f32>(s, c);
}

fn sin_f32(x: f32) -> f32 { return sincos_f32(x).x; }
fn cos_f32(x: f32) -> f32 { return sincos_f32(x).y; }

fn pow_f32(x: f32, y: f32) -> f32 {
    // WGSL's pow is undefined for x < 0 (and x = 0); C's pow is not.
    if (y == 0.0) { return 1.0; }
    if (x == 1.0) { return 1.0; }
    if (is_nan(x) || is_nan(y)) { return nan(); }
    let ay = abs(y);
    let yint = trunc(y) == y;
    let odd = yint && ay < 16777216.0 && (i32(ay) & 1) == 1;
    if (x == 0.0) {
        if (y < 0.0) { return select(inf(), bitcast<f32>(bitcast<u32>(x) | 0x7f800000u), odd); }
        return select(0.0, x, odd);
    }
    if (x < 0.0 && !yint) { return nan(); }
    let r = exp2_of_product(y, abs(x));
    return select(r, -r, x < 0.0 && odd);
}

// 2^(y * log2(x)) for x > 0, to about an ulp: exp2(y * log2(x)) loses
// |y * log2(x)| ulps, and a driver's log2 and exp2 may be a few ulps off
// themselves (lavapipe's are). x = m 2^e with m in [sqrt(1/2), sqrt(2)):
// log2(m) from the atanh series, y * e split exactly, the fraction's
// exp2 from its series and the integer part through ldexp.
fn exp2_of_product(y: f32, x: f32) -> f32 {
    if (is_inf(x)) { return select(0.0, inf(), y > 0.0); }
    let fe = frexp(x);                                   // x = fract * 2^exp, fract in [0.5, 1)
    var m = fe.fract;
    var e = f32(fe.exp);
    if (m < 0.70710678) { m *= 2.0; e -= 1.0; }
    let t = (m - 1.0) / (m + 1.0);                       // |t| < 0.172
    let t2 = t * t;
    let ln_m = 2.0 * t * (1.0 + t2 * (1.0 / 3.0 + t2 * (0.2 + t2 * (1.0 / 7.0 + t2 * (1.0 / 9.0 + t2 * (1.0 / 11.0))))));
    let l = ln_m * 1.4426950408889634;
    // y * e exactly, as yh * e + yl * e with y's top 12 bits in yh (a
    // driver's fma need not be fused).
    let yh = bitcast<f32>(bitcast<u32>(y) & 0xfffff000u);
    let hi = yh * e;
    let lo = (y - yh) * e;
    let p = y * l;
    let n = round(hi + (lo + p));
    if (abs(n) > 300.0) { return select(0.0, inf(), n > 0.0); }
    let f = ((hi - n) + lo + p) * 0.6931471805599453;      // |f| < 0.36: e^f by its series
    var term = 1.0;
    var sum = 1.0;
    for (var k = 1; k <= 9; k++) {
        term *= f / f32(k);
        sum += term;
    }
    return ldexp(sum, i32(n));
}

// Binary arithmetic on floats (binary, binary4): the formulas of src/ops/formulas.txt.
//@formulas binary_f

// conv2d's and pool2d's geometry (mirrors tf_pk_conv_geom).
struct ConvGeom { N: i32, C: i32, H: i32, W: i32, O: i32, Ho: i32, Wo: i32, cg: i32, kh: i32, kw: i32, groups: i32,
                  stride: array<i32, 2>, pad: array<i32, 2>, dil: array<i32, 2>,
                  xs: array<i32, 4>, ws: array<i32, 4>, os: array<i32, 4>, bs: i32,
                  x_off: i32, w_off: i32, o_off: i32, b_off: i32 }

//@kernel binary
struct Args { gx: i32, gy: i32, op: i32, n: i32, g: Geom }

// Integer power by squaring (i32 wraps); negative exponents give 0 except
// for bases 1 and -1.
fn ipow_i32(x: i32, y0: i32) -> i32 {
    var y = y0;
    if (y < 0) { return select(select(0, select(1, -1, (y & 1) != 0), x == -1), 1, x == 1); }
    var r = 1;
    var b = x;
    while (y != 0) {
        if ((y & 1) != 0) { r *= b; }
        b *= b;
        y >>= 1u;
    }
    return r;
}

// The bitwise int forms on i32 words (i8, u8 and i32 tensors): the C forms
// work in int64 and wrap, so a count of 32 or more gives 0 (left) or the
// sign (right) here, as it does there after the wrap.
fn and_i32(x: i32, y: i32) -> i32 { return x & y; }
fn or_i32(x: i32, y: i32) -> i32 { return x | y; }
fn xor_i32(x: i32, y: i32) -> i32 { return x ^ y; }
fn shl_i32(x: i32, y: i32) -> i32 { return select(x << u32(y), 0, y < 0 || y > 31); }
fn shr_i32(x: i32, y: i32) -> i32 { return select(x >> u32(y), select(0, -1, x < 0), y < 0 || y > 31); }

// The shifts on int64 word pairs (lo, hi), counts as shl/shr above.
fn shl_pair(x: vec2<u32>, y: vec2<u32>) -> vec2<u32> {
    if (y.y != 0u || y.x > 63u) { return vec2<u32>(0u, 0u); }   // a negative count has y.y set
    let n = y.x;
    if (n == 0u) { return x; }
    if (n >= 32u) { return vec2<u32>(0u, x.x << (n - 32u)); }
    return vec2<u32>(x.x << n, (x.y << n) | (x.x >> (32u - n)));
}

fn shr_pair(x: vec2<u32>, y: vec2<u32>) -> vec2<u32> {
    let fill = select(0u, 0xffffffffu, (x.y & 0x80000000u) != 0u);
    if (y.y != 0u || y.x > 63u) { return vec2<u32>(fill, fill); }
    let n = y.x;
    if (n == 0u) { return x; }
    if (n >= 32u) { return vec2<u32>(bitcast<u32>(bitcast<i32>(x.y) >> (n - 32u)), fill); }
    return vec2<u32>((x.x >> n) | (x.y << (32u - n)), bitcast<u32>(bitcast<i32>(x.y) >> n));
}

// Binary arithmetic on i32 words: the int forms of src/ops/formulas.txt.
//@formulas binary_i

fn apply_64(op: i32, x: vec2<u32>, y0: vec2<u32>) -> vec2<u32> {
    switch op {
        case TF_OP_ADD: { return add64(x, y0); }
        case TF_OP_SUB: { return sub64(x, y0); }
        case TF_OP_MUL: { return mul64(x, y0); }
        case TF_OP_MAXIMUM: { return select(x, y0, lt64(x, y0)); }
        case TF_OP_MINIMUM: { return select(x, y0, lt64(y0, x)); }
        case TF_OP_BITWISE_AND: { return x & y0; }
        case TF_OP_BITWISE_OR: { return x | y0; }
        case TF_OP_BITWISE_XOR: { return x ^ y0; }
        case TF_OP_LEFT_SHIFT: { return shl_pair(x, y0); }
        case TF_OP_RIGHT_SHIFT: { return shr_pair(x, y0); }
        default: {
            let one = vec2<u32>(1u, 0u);
            if (lt64(y0, vec2<u32>(0u, 0u))) {
                if (all(x == one)) { return one; }
                if (all(x == vec2<u32>(0xffffffffu, 0xffffffffu))) { return select(one, x, (y0.x & 1u) != 0u); }
                return vec2<u32>(0u, 0u);
            }
            var y = y0;
            var r = one;
            var b = x;
            while (any(y != vec2<u32>(0u, 0u))) {
                if ((y.x & 1u) != 0u) { r = mul64(r, b); }
                b = mul64(b, b);
                y = vec2<u32>((y.x >> 1u) | (y.y << 31u), y.y >> 1u);
            }
            return r;
        }
    }
}

//@flat binary

fn binary_item(i: i32) {
    if (i >= A.n) { return; }
    let ia = operand(A.g, 1, i);
    let ib = operand(A.g, 2, i);
    let io = A.g.offset[0] + i;
    if (IS_I64) {
        b_out_st64(io, apply_64(OP, b_a_ld64(ia), b_b_ld64(ib)));
    } else if (IS_FLOAT) {
        b_out_stf(TF_DT, io, apply_f(OP, b_a_ldf(TF_DT, ia), b_b_ldf(TF_DT, ib)));
    } else {
        b_out_sti(TF_DT, io, apply_i(OP, b_a_ldi(TF_DT, ia), b_b_ldi(TF_DT, ib)));
    }
}

//@kernel binary4
struct Args { gx: i32, gy: i32, op: i32, n4: i32, oo: i32, ao: i32, bo: i32 }

// f32, contiguous, offsets multiples of 4: four elements per invocation.
//@flat binary4

fn binary4_item(i: i32) {
    if (i >= A.n4) { return; }
    for (var k = 0; k < 4; k++) {
        let x = bitcast<f32>(b_a_word(A.ao + 4 * i + k));
        let y = bitcast<f32>(b_b_word(A.bo + 4 * i + k));
        b_out_put(A.oo + 4 * i + k, 0u, bitcast<u32>(apply_f(OP, x, y)));
    }
}

//@kernel unary
struct Args { gx: i32, gy: i32, op: i32, alpha: f32, lo: f32, hi: f32, n: i32, g: Geom }

// The unary formulas of src/ops/formulas.txt.
//@formulas unary

//@flat unary

fn unary_item(i: i32) {
    if (i >= A.n) { return; }
    b_out_stf(TF_DT, A.g.offset[0] + i, apply_unary(OP, b_x_ldf(TF_DT, operand(A.g, 1, i))));
}

//@kernel compare
struct Args { gx: i32, gy: i32, op: i32, n: i32, g: Geom }

//@flat compare

fn compare_item(i: i32) {
    if (i >= A.n) { return; }
    let ia = operand(A.g, 1, i);
    let ib = operand(A.g, 2, i);
    var lt: bool;
    var eq: bool;
    var xz: bool;
    var yz: bool;
    if (IS_I64) {
        let x = b_a_ld64(ia);
        let y = b_b_ld64(ib);
        lt = lt64(x, y); eq = all(x == y); xz = any(x != vec2<u32>(0u, 0u)); yz = any(y != vec2<u32>(0u, 0u));
        if (OP == TF_OP_GT || OP == TF_OP_GE) { lt = lt64(y, x); }
    } else if (IS_FLOAT) {
        let x = b_a_ldf(TF_DT, ia);
        let y = b_b_ldf(TF_DT, ib);
        lt = x < y; eq = x == y; xz = x != 0.0; yz = y != 0.0;
        if (OP == TF_OP_NE) { eq = !(x != y); }       // NaN: unequal, yet neither < nor ==
        if (OP == TF_OP_GT || OP == TF_OP_GE) { lt = x > y; }
        if (OP == TF_OP_LOGICAL_AND || OP == TF_OP_LOGICAL_OR) { xz = xz || is_nan(x); yz = yz || is_nan(y); }
    } else {
        let x = b_a_ldi(TF_DT, ia);
        let y = b_b_ldi(TF_DT, ib);
        lt = x < y; eq = x == y; xz = x != 0; yz = y != 0;
        if (OP == TF_OP_GT || OP == TF_OP_GE) { lt = x > y; }
    }
    var r: bool;
    switch OP {
        case TF_OP_EQ: { r = eq; }
        case TF_OP_NE: { r = !eq; }
        case TF_OP_LT, TF_OP_GT: { r = lt; }
        case TF_OP_LE, TF_OP_GE: { r = lt || eq; }
        case TF_OP_LOGICAL_AND: { r = xz && yz; }
        default: { r = xz || yz; }
    }
    b_out_sti(DT_BOOL, A.g.offset[0] + i, select(0, 1, r));
}

//@kernel bool_unary
struct Args { gx: i32, gy: i32, op: i32, n: i32, g: Geom }

//@flat bool_unary

fn bool_unary_item(i: i32) {
    if (i >= A.n) { return; }
    let ix = operand(A.g, 1, i);
    var r = false;
    if (IS_FLOAT) {
        let v = b_x_ldf(TF_DT, ix);
        if (OP == TF_OP_LOGICAL_NOT) { r = v == 0.0; }
        else if (OP == TF_OP_ISNAN) { r = is_nan(v); }
        else { r = is_inf(v); }
    } else if (IS_I64) {
        r = OP == TF_OP_LOGICAL_NOT && all(b_x_ld64(ix) == vec2<u32>(0u, 0u));
    } else {
        r = OP == TF_OP_LOGICAL_NOT && b_x_ldi(TF_DT, ix) == 0;
    }
    b_out_sti(DT_BOOL, A.g.offset[0] + i, select(0, 1, r));
}

//@kernel where_select
struct Args { gx: i32, gy: i32, n: i32, g: Geom }

//@flat where_select

fn where_select_item(i: i32) {
    if (i >= A.n) { return; }
    let c = b_cond_ldi(DT_BOOL, operand(A.g, 1, i)) != 0;
    if (dt_size(TF_DT) == 8) {
        if (c) { b_out_st64(A.g.offset[0] + i, b_a_ld64(operand(A.g, 2, i))); }
        else { b_out_st64(A.g.offset[0] + i, b_b_ld64(operand(A.g, 3, i))); }
        return;
    }
    var bits: u32;
    if (c) { bits = b_a_bits(TF_DT, operand(A.g, 2, i)); } else { bits = b_b_bits(TF_DT, operand(A.g, 3, i)); }
    b_out_setbits(TF_DT, A.g.offset[0] + i, bits);
}

//@kernel copy_from
struct Args { gx: i32, gy: i32, src_dt: i32, n: i32, g: Geom }

// g: operand 0 = out (contiguous, or a strided view into part of a tensor),
// 1 = source. Same dtype: the bits; else the CPU reference's conversions.
//@flat copy_from

fn copy_from_item(i: i32) {
    if (i >= A.n) { return; }
    let is = operand(A.g, 1, i);
    let io = operand(A.g, 0, i);
    if (A.src_dt == TF_DT && dt_size(TF_DT) == 8) {
        b_out_st64(io, b_src_ld64(is));
    } else if (A.src_dt == TF_DT) {
        b_out_setbits(TF_DT, io, b_src_bits(TF_DT, is));
    } else if (TF_DT == DT_F64) {                        // from a dtype of 32 bits or fewer (f64 is no device dtype)
        if (is_float_dt(A.src_dt)) { b_out_st64(io, f64_of_f32(b_src_ldf(A.src_dt, is))); }
        else { b_out_st64(io, f64_of_i32(b_src_ldi(A.src_dt, is))); }
    } else if (TF_DT == DT_I64) {
        if (is_float_dt(A.src_dt)) { b_out_st64(io, i64_of_f32(b_src_ldf(A.src_dt, is))); }
        else { b_out_st64(io, i64_of(b_src_ldi(A.src_dt, is))); }
    } else if (A.src_dt == DT_I64 && is_float_dt(TF_DT)) {
        b_out_stf(TF_DT, io, f32_of_i64(b_src_ld64(is)));
    } else if (is_float_dt(A.src_dt)) {
        b_out_stf(TF_DT, io, b_src_ldf(A.src_dt, is));
    } else {
        b_out_sti(TF_DT, io, b_src_ldi(A.src_dt, is));
    }
}

//@kernel fill
struct Args { gx: i32, gy: i32, n: i32, lo: u32, hi: u32, off: i32 }

//@flat fill

fn fill_item(i: i32) {
    if (i >= A.n) { return; }
    if (dt_size(TF_DT) == 8) { b_out_st64(A.off + i, vec2<u32>(A.lo, A.hi)); } else { b_out_setbits(TF_DT, A.off + i, A.lo); }
}

//@kernel arange
struct Args { gx: i32, gy: i32, n: i32, start: f32, step: f32, off: i32 }

//@flat arange

// i32 and i64 with a whole start and step count in integers, exactly past
// f32's 2^24 (supports() admits i64 only so, within i32); the narrower
// integers saturate from f32, as the CPU's conversion does.
fn arange_item(i: i32) {
    if (i >= A.n) { return; }
    if ((TF_DT == DT_I32 || IS_I64) && A.start == trunc(A.start) && A.step == trunc(A.step)) {
        let v = i32(A.start) + i * i32(A.step);
        if (IS_I64) { b_out_st64(A.off + i, i64_of(v)); } else { b_out_sti(TF_DT, A.off + i, v); }
        return;
    }
    b_out_stf(TF_DT, A.off + i, A.start + f32(i) * A.step);
}

//@kernel rand_fill
struct Args { gx: i32, gy: i32, normal: i32, n: i32, seed_lo: u32, seed_hi: u32, off: i32 }

fn mul_hi(a: u32, b: u32) -> u32 { return mul64(vec2<u32>(a, 0u), vec2<u32>(b, 0u)).y; }

// Philox4x32-10, as in tensorframe/numerics.h: counter = element index.
fn philox(counter: u32, k0i: u32, k1i: u32) -> vec4<u32> {
    var c0 = counter; var c1 = 0u; var c2 = 0u; var c3 = 0u;
    var k0 = k0i; var k1 = k1i;
    for (var r = 0; r < 10; r++) {
        let h0 = mul_hi(0xD2511F53u, c0); let l0 = 0xD2511F53u * c0;
        let h1 = mul_hi(0xCD9E8D57u, c2); let l1 = 0xCD9E8D57u * c2;
        let n0 = h1 ^ c1 ^ k0; let n2 = h0 ^ c3 ^ k1;
        c1 = l1; c3 = l0; c0 = n0; c2 = n2;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    return vec4<u32>(c0, c1, c2, c3);
}

@compute @workgroup_size(WG)
fn rand_fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = flat_id(gid, nwg); i < A.gx; i += flat_stride(nwg)) { rand_item(i); }
}

fn rand_item(i: i32) {
    if (i >= A.n) { return; }
    let w = philox(u32(i), A.seed_lo, A.seed_hi);
    var v: f32;
    if (A.normal != 0) {
        // u1 = (w.z + 1) / 2^32 and u2 = w.w / 2^32, as the CPU's doubles:
        // log(u1) through log1p(-(1 - u1)) near 1, where f32 u1 would round;
        // cos(2 pi u2) from the exact quadrant of u2's top 24 bits, the low
        // 8 bits as a first-order term (the argument 2 pi u2 would round).
        let d = f32(~w.z) * (1.0 / 4294967296.0);
        var lg: f32;
        if (d < 0.5) { lg = log1p_f32(-d); } else { lg = log(f32(w.z + 1u) * (1.0 / 4294967296.0) + select(0.0, 2.3283064365386963e-10, w.z == 0xffffffffu)); }
        let a_hi = f32(w.w >> 8u) * (1.0 / 16777216.0);
        let a_lo = f32(w.w & 0xffu) * (1.0 / 4294967296.0);
        let q = round(4.0 * a_hi);
        let r = (a_hi - q * 0.25) * 6.283185307179586;
        let sc = sincos_f32(r);
        var c = sc.y;
        var sn = sc.x;
        let qi = i32(q) & 3;
        if (qi == 1) { let t = c; c = -sn; sn = t; }
        else if (qi == 2) { c = -c; sn = -sn; }
        else if (qi == 3) { let t = c; c = sn; sn = -t; }
        v = sqrt(-2.0 * lg) * (c - sn * 6.283185307179586 * a_lo);
    } else {
        var nb = 24u;
        if (TF_DT == DT_F16) { nb = 11u; }
        if (TF_DT == DT_BF16) { nb = 8u; }
        v = f32(w.x >> (32u - nb)) / f32(1u << nb);
    }
    b_out_stf(TF_DT, A.off + i, v);
}

//@kernel triangle
struct Args { gx: i32, gy: i32, upper: i32, k: i32, n: i32, g: Geom }

//@flat triangle

fn triangle_item(i: i32) {
    if (i >= A.n) { return; }
    var gg = A.g;
    let cols = gg.shape[gg.ndim - 1];
    let rows = gg.shape[gg.ndim - 2];
    let above = i % cols - (i / cols) % rows;
    let keep = select(above <= A.k, above >= A.k, A.upper != 0);
    if (dt_size(TF_DT) == 8) {
        var w = vec2<u32>(0u, 0u);
        if (keep) { w = b_x_ld64(operand(A.g, 1, i)); }
        b_out_st64(A.g.offset[0] + i, w);
        return;
    }
    var bits = 0u;
    if (keep) { bits = b_x_bits(TF_DT, operand(A.g, 1, i)); }
    b_out_setbits(TF_DT, A.g.offset[0] + i, bits);
}

//@kernel index_pick
struct Args { gx: i32, gy: i32, gather: i32, axis: i32, n: i32, g: Geom, index64: i32 }

// index_select (gather = 0) and gather (1); g: shape = the output's,
// operand 0 = x, 1 = index, 2 = out (contiguous).
//@flat index_pick

fn index_pick_item(i: i32) {
    if (i >= A.n) { return; }
    var gg = A.g;
    var rest = i;
    var xo = gg.offset[0];
    var io = gg.offset[1];
    var c_axis = 0;
    for (var d = gg.ndim - 1; d >= 0; d--) {
        let e = gg.shape[d];
        let c = rest % e;
        rest /= e;
        if (d == A.axis) { c_axis = c; } else { xo += c * gg.stride[0][d]; }
        if (A.gather != 0) { io += c * gg.stride[1][d]; }
    }
    if (A.gather == 0) { io += c_axis * gg.stride[1][0]; }
    let pick = b_index_ldi(select(DT_I32, DT_I64, A.index64 != 0), io);
    let src_at = xo + pick * gg.stride[0][A.axis];
    if (dt_size(TF_DT) == 8) { b_out_st64(gg.offset[2] + i, b_x_ld64(src_at)); }
    else { b_out_setbits(TF_DT, gg.offset[2] + i, b_x_bits(TF_DT, src_at)); }
}

//@kernel reduce_partial
struct Args { gx: i32, gy: i32, M: i32, R: i32, G: i32, go: Geom, gr: Geom }

fn in_ld64(at: i32) -> vec2<u32> { if (IS_I64) { return b_in_ld64(at); } return i64_of(b_in_ldi(TF_DT, at)); }

var<workgroup> sf: array<f32, RWG>;
var<workgroup> si: array<vec2<u32>, RWG>;

// One (output, group) per workgroup; float partials are f32, integer ones
// (lo, hi) pairs.
@compute @workgroup_size(RWG, 1)
fn reduce_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_id) lid3: vec3<u32>) {
    let m = i32(wid.z * nwg.y + wid.y);
    let grp = i32(wid.x);
    if (m >= A.M) { return; }
    let lid = i32(lid3.x);
    let base = offset_of(A.go, 0, m);
    var gr = A.gr;
    gr.offset[0] = 0;
    var af = 0.0;
    var ai = vec2<u32>(0u, 0u);
    for (var r = grp * i32(RWG) + lid; r < A.R; r += A.G * i32(RWG)) {
        let at = base + offset_of(gr, 0, r);
        if (IS_FLOAT) { af += b_in_ldf(TF_DT, at); } else { ai = add64(ai, in_ld64(at)); }
    }
    sf[lid] = af;
    si[lid] = ai;
    workgroupBarrier();
    for (var s = i32(RWG) / 2; s > 0; s >>= 1u) {
        if (lid < s) {
            sf[lid] += sf[lid + s];
            si[lid] = add64(si[lid], si[lid + s]);
        }
        workgroupBarrier();
    }
    if (lid == 0) {
        if (IS_FLOAT) { b_partial_put(m * A.G + grp, 0u, bitcast<u32>(sf[0])); } else { b_partial_st64(m * A.G + grp, si[0]); }
    }
}

//@kernel reduce_final
struct Args { gx: i32, gy: i32, M: i32, G: i32, count: i32, mean: i32, off: i32 }

//@flat reduce_final

fn reduce_final_item(m: i32) {
    if (m >= A.M) { return; }
    if (IS_FLOAT) {
        var s = 0.0;
        for (var k = 0; k < A.G; k++) { s += bitcast<f32>(b_partial_word(m * A.G + k)); }
        if (A.mean != 0) { s = select(nan(), s / f32(A.count), A.count != 0); }
        b_out_stf(TF_DT, A.off + m, s);
    } else {
        var s = vec2<u32>(0u, 0u);
        for (var k = 0; k < A.G; k++) { s = add64(s, b_partial_ld64(m * A.G + k)); }
        b_out_st64(A.off + m, s);
    }
}

//@kernel reduce_full
struct Args { gx: i32, gy: i32, op: i32, R: i32, correction: i32, go: Geom, gr: Geom, out_off: i32, out_long: i32 }

fn in_ld64(at: i32) -> vec2<u32> { if (IS_I64) { return b_in_ld64(at); } return i64_of(b_in_ldi(TF_DT, at)); }

const P_SUM: i32 = 0;
const P_PROD: i32 = 1;
const P_MAX: i32 = 2;
const P_MIN: i32 = 3;
const P_ARGMAX: i32 = 4;
const P_ARGMIN: i32 = 5;

var<workgroup> vf: array<f32, RWG>;
var<workgroup> vi: array<vec2<u32>, RWG>;
var<workgroup> ix: array<i32, RWG>;

// A running result: a float, or an integer as a (lo, hi) pair.
struct Acc { f: f32, i: vec2<u32>, at: i32 }

fn nan_of(a: Acc) -> bool { return IS_FLOAT && is_nan(a.f); }
fn greater(a: Acc, b: Acc) -> bool { if (IS_FLOAT) { return a.f > b.f; } return lt64(b.i, a.i); }
fn equal(a: Acc, b: Acc) -> bool { if (IS_FLOAT) { return a.f == b.f; } return all(a.i == b.i); }

// Fold x into a (NaN sticky for max/min and first NaN wins arg*; ties keep
// the smaller position).
fn fold(p: i32, a: Acc, x: Acc) -> Acc {
    var r = a;
    switch p {
        case P_SUM: { r.f = a.f + x.f; r.i = add64(a.i, x.i); }
        case P_PROD: { r.f = a.f * x.f; r.i = mul64(a.i, x.i); }
        case P_MAX, P_MIN: {
            if (!nan_of(a) && (nan_of(x) || select(greater(a, x), greater(x, a), p == P_MAX))) { r = x; r.at = a.at; }
        }
        default: {
            var take: bool;
            if (x.at < 0) { take = false; }
            else if (a.at < 0) { take = true; }
            else if (nan_of(a)) { take = nan_of(x) && x.at < a.at; }
            else if (nan_of(x)) { take = true; }
            else if (equal(x, a)) { take = x.at < a.at; }
            else { take = select(greater(a, x), greater(x, a), p == P_ARGMAX); }
            if (take) { r = x; }
        }
    }
    return r;
}

fn identity_of(p: i32) -> Acc {
    var a = Acc(0.0, vec2<u32>(0u, 0u), -1);
    if (p == P_PROD) { a.f = 1.0; a.i = vec2<u32>(1u, 0u); }
    if (p == P_MAX) { a.f = -inf(); a.i = vec2<u32>(0u, 0x80000000u); }
    if (p == P_MIN) { a.f = inf(); a.i = vec2<u32>(0xffffffffu, 0x7fffffffu); }
    return a;
}

fn load_acc(at: i32, r: i32) -> Acc {
    if (IS_FLOAT) { return Acc(b_in_ldf(TF_DT, at), vec2<u32>(0u, 0u), r); }
    return Acc(0.0, in_ld64(at), r);
}

fn slot_put(lid: i32, a: Acc) { vf[lid] = a.f; vi[lid] = a.i; ix[lid] = a.at; }
fn slot_get(lid: i32) -> Acc { return Acc(vf[lid], vi[lid], ix[lid]); }

// Tree over the workgroup's partial results; the answer lands in slot 0.
fn tree(p: i32, lid: i32) {
    workgroupBarrier();
    for (var s = i32(RWG) / 2; s > 0; s >>= 1u) {
        if (lid < s) { slot_put(lid, fold(p, slot_get(lid), slot_get(lid + s))); }
        workgroupBarrier();
    }
}

@compute @workgroup_size(RWG)
fn reduce_full(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid3: vec3<u32>) {
    let m = group_id(wid, nwg);
    if (m * i32(RWG) >= A.gx) { return; }
    let lid = i32(lid3.x);
    let base = offset_of(A.go, 0, m);
    var gr = A.gr;
    gr.offset[0] = 0;
    let op = OP;
    var p = P_SUM;
    if (op == TF_OP_PROD) { p = P_PROD; }
    else if (op == TF_OP_MAX || op == TF_OP_LOGSUMEXP) { p = P_MAX; }
    else if (op == TF_OP_MIN) { p = P_MIN; }
    else if (op == TF_OP_ARGMAX) { p = P_ARGMAX; }
    else if (op == TF_OP_ARGMIN) { p = P_ARGMIN; }
    var acc = identity_of(p);
    for (var r = lid; r < A.R; r += i32(RWG)) { acc = fold(p, acc, load_acc(base + offset_of(gr, 0, r), r)); }
    slot_put(lid, acc);
    tree(p, lid);
    var result = slot_get(0);
    if (IS_FLOAT) {
        let R = f32(A.R);
        if (op == TF_OP_MEAN) { result.f = select(nan(), result.f / R, A.R != 0); }
        let lse = op == TF_OP_LOGSUMEXP;
        if (op == TF_OP_VAR || op == TF_OP_STD || lse) {     // a second pass around the mean or the max
            var center = result.f;
            if (!lse) { center = select(nan(), result.f / R, A.R != 0); }
            if (!(lse && (is_nan(center) || is_inf(center)))) {
                workgroupBarrier();
                var acc2 = 0.0;
                for (var r = lid; r < A.R; r += i32(RWG)) {
                    let d = b_in_ldf(TF_DT, base + offset_of(gr, 0, r)) - center;
                    if (lse) { acc2 += exp(d); } else { acc2 += d * d; }
                }
                slot_put(lid, Acc(acc2, vec2<u32>(0u, 0u), -1));
                tree(P_SUM, lid);
                let ss = vf[0];
                if (lse) {
                    result.f = center + log(ss);
                } else {
                    let div = f32(A.R - A.correction);
                    var v: f32;
                    if (div > 0.0) { v = ss / div; } else if (ss == 0.0 || is_nan(ss)) { v = nan(); } else { v = inf(); }
                    result.f = select(v, sqrt(v), op == TF_OP_STD);
                }
            } else {
                result.f = center;
            }
        }
    }
    if (lid == 0) {
        let at = A.out_off + m;
        if (op == TF_OP_ARGMAX || op == TF_OP_ARGMIN) { b_out_st64(at, i64_of(result.at)); }
        else if (A.out_long != 0) { b_out_st64(at, result.i); }
        else if (IS_FLOAT) { b_out_stf(TF_DT, at, result.f); }
        else if (IS_I64) { b_out_st64(at, result.i); }
        else { b_out_sti(TF_DT, at, bitcast<i32>(result.i.x)); }
    }
}

//@kernel cumsum
struct Args { gx: i32, gy: i32, lines: i32, len: i32, g: Geom, is: i32, os: i32, out_long: i32 }

fn in_ld64(at: i32) -> vec2<u32> { if (IS_I64) { return b_in_ld64(at); } return i64_of(b_in_ldi(TF_DT, at)); }

// One invocation per line; g covers the lines (operand 0 = in, 1 = out).
//@flat cumsum

fn cumsum_item(i: i32) {
    if (i >= A.lines) { return; }
    let ip = offset_of(A.g, 0, i);
    let op = offset_of(A.g, 1, i);
    var af = 0.0;
    var ai = vec2<u32>(0u, 0u);
    for (var j = 0; j < A.len; j++) {
        if (IS_FLOAT) {
            af += b_in_ldf(TF_DT, ip + j * A.is);
            b_out_stf(TF_DT, op + j * A.os, af);
        } else {
            ai = add64(ai, in_ld64(ip + j * A.is));
            if (A.out_long != 0) { b_out_st64(op + j * A.os, ai); } else { b_out_sti(TF_DT, op + j * A.os, bitcast<i32>(ai.x)); }
        }
    }
}

//@kernel sort_rank
struct Args { gx: i32, gy: i32, lines: i32, len: i32, g: Geom, is: i32, os: i32, descending: i32, values: i32 }

// A value as the op table's total order reads it: f32 or an int64 pair.
struct Val { f: f32, i: vec2<u32> }

fn in_val(at: i32) -> Val {
    if (IS_FLOAT) { return Val(b_in_ldf(TF_DT, at), vec2<u32>(0u, 0u)); }
    if (IS_I64) { return Val(0.0, b_in_ld64(at)); }
    return Val(0.0, i64_of(b_in_ldi(TF_DT, at)));
}

// NaN after every number and equal to NaN; -0.0 equal to 0.0.
fn sorts_before(a: Val, b: Val) -> bool {
    if (IS_FLOAT) {
        if (is_nan(b.f)) { return !is_nan(a.f); }
        return a.f < b.f;
    }
    return lt64(a.i, b.i);
}

// One invocation per element: it counts the elements of its line that go
// before it (equal ones only from its left: stable) and writes itself, or
// its position, there. g covers the lines (operand 0 = in, 1 = out).
//@flat sort_rank

fn sort_rank_item(i: i32) {
    if (i >= A.lines * A.len) { return; }
    let line = i / A.len;
    let k = i % A.len;
    let ip = offset_of(A.g, 0, line);
    let op = offset_of(A.g, 1, line);
    let me = ip + k * A.is;
    let x = in_val(me);
    var rank = 0;
    for (var j = 0; j < A.len; j++) {
        let y = in_val(ip + j * A.is);
        let y_first = sorts_before(y, x);
        let x_first = sorts_before(x, y);
        let ahead = select(y_first, x_first, A.descending != 0);
        if (ahead || (j < k && !y_first && !x_first)) { rank++; }
    }
    let at = op + rank * A.os;
    if (A.values == 0) { b_out_st64(at, i64_of(k)); }
    else if (IS_I64) { b_out_st64(at, b_in_ld64(me)); }
    else { b_out_setbits(TF_DT, at, b_in_bits(TF_DT, me)); }
}

//@kernel searchsorted
struct Args { gx: i32, gy: i32, n: i32, len: i32, g: Geom, so: i32, ss: i32, right: i32 }

struct Val { f: f32, i: vec2<u32> }

fn sorted_val(at: i32) -> Val {
    if (IS_FLOAT) { return Val(b_sorted_ldf(TF_DT, at), vec2<u32>(0u, 0u)); }
    if (IS_I64) { return Val(0.0, b_sorted_ld64(at)); }
    return Val(0.0, i64_of(b_sorted_ldi(TF_DT, at)));
}

fn value_val(at: i32) -> Val {
    if (IS_FLOAT) { return Val(b_values_ldf(TF_DT, at), vec2<u32>(0u, 0u)); }
    if (IS_I64) { return Val(0.0, b_values_ld64(at)); }
    return Val(0.0, i64_of(b_values_ldi(TF_DT, at)));
}

fn sorts_before(a: Val, b: Val) -> bool {
    if (IS_FLOAT) {
        if (is_nan(b.f)) { return !is_nan(a.f); }
        return a.f < b.f;
    }
    return lt64(a.i, b.i);
}

// One invocation per value: a binary search of the 1-d sorted input
// (element offset so, stride ss). g covers the values (operand 0 = values,
// 1 = out).
//@flat searchsorted

fn searchsorted_item(i: i32) {
    if (i >= A.n) { return; }
    let v = value_val(offset_of(A.g, 0, i));
    var lo = 0;
    var hi = A.len;
    loop {
        if (lo >= hi) { break; }
        let mid = lo + (hi - lo) / 2;
        let s = sorted_val(A.so + mid * A.ss);
        var after = sorts_before(s, v);
        if (A.right != 0) { after = !sorts_before(v, s); }
        if (after) { lo = mid + 1; } else { hi = mid; }
    }
    b_out_st64(offset_of(A.g, 1, i), i64_of(lo));
}

//@kernel matmul
struct Args { gx: i32, gy: i32, M: i32, N: i32, K: i32, ms: array<i32, 4>, g: Geom, epilogue: i32, alpha: f32, beta: f32,
              cs: array<i32, 2> }

var<workgroup> As: array<array<f32, TS>, TS>;
var<workgroup> Bs: array<array<f32, TS>, TS>;
var<workgroup> Ai: array<array<i32, TS>, TS>;
var<workgroup> Bi: array<array<i32, TS>, TS>;

// TS x TS tiles in workgroup memory; the batch is folded into the second
// dimension (rows rounded up to the tile, then batches). With `epilogue`
// (GEMM): out = alpha * a@b + beta * c, c not read when beta == 0.
@compute @workgroup_size(TS, TS)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let tx = i32(lid.x);
    let ty = i32(lid.y);
    let ts = i32(TS);
    let rows = (A.M + ts - 1) / ts * ts;
    let gy = i32(wid.z * nwg.y + wid.y) * ts + ty;
    let j = i32(wid.x) * ts + tx;
    let i = gy % rows;
    let bi = gy / rows;
    var batches = 1;
    var gg = A.g;
    for (var d = 0; d < gg.ndim; d++) { batches *= gg.shape[d]; }
    if (bi >= batches) { return; }                        // a whole workgroup past the end
    let ao = offset_of(A.g, 0, bi);
    let bo = offset_of(A.g, 1, bi);
    let oo = gg.offset[2] + bi * A.M * A.N;
    var accf = 0.0;
    var acci = 0;
    for (var t = 0; t < A.K; t += ts) {
        let a_in = i < A.M && t + tx < A.K;
        let b_in = t + ty < A.K && j < A.N;
        let a_at = ao + i * A.ms[0] + (t + tx) * A.ms[1];
        let b_at = bo + (t + ty) * A.ms[2] + j * A.ms[3];
        if (IS_FLOAT) {
            As[ty][tx] = select(0.0, b_a_ldf(TF_DT, a_at), a_in);
            Bs[ty][tx] = select(0.0, b_b_ldf(TF_DT, b_at), b_in);
        } else {
            Ai[ty][tx] = select(0, b_a_ldi(TF_DT, a_at), a_in);
            Bi[ty][tx] = select(0, b_b_ldi(TF_DT, b_at), b_in);
        }
        workgroupBarrier();
        for (var k = 0; k < ts; k++) {
            if (IS_FLOAT) { accf += As[ty][k] * Bs[k][tx]; } else { acci += Ai[ty][k] * Bi[k][tx]; }
        }
        workgroupBarrier();
    }
    if (i < A.M && j < A.N) {
        let at = oo + i * A.N + j;
        if (!IS_FLOAT) {
            b_out_sti(TF_DT, at, acci);
        } else if (A.epilogue == 0) {
            b_out_stf(TF_DT, at, accf);
        } else {
            var v = A.alpha * accf;
            if (A.beta != 0.0) { v += A.beta * b_c_ldf(TF_DT, offset_of(A.g, 3, bi) + i * A.cs[0] + j * A.cs[1]); }
            b_out_stf(TF_DT, at, v);
        }
    }
}

//@kernel matmul_flat
struct Args { gx: i32, gy: i32, M: i32, N: i32, K: i32, ms: array<i32, 4>, g: Geom, epilogue: i32, alpha: f32, beta: f32,
              cs: array<i32, 2> }

// matmul for CPU adapters (the plugin's wg_variant), with the same
// arguments. One work item per 4x4 block of an output (batch, row block,
// column block laid flat; A.gx of them): its products read straight from
// the buffers, each sum in the tiled kernel's order. No workgroup memory and
// no barrier: llvmpipe runs each barrier as coroutine switches over the
// workgroup. A block reuses each loaded element of a four times (of b four
// times when it has four rows), which is what llvmpipe's scalar loads cost.
//@flat matmul_flat

// b's elements k of the block's columns (columns past N repeat the last).
fn b_cols(bc: vec4<i32>, k: i32) -> vec4<f32> {
    let s = k * A.ms[2];
    return vec4<f32>(b_b_ldf(TF_DT, bc.x + s), b_b_ldf(TF_DT, bc.y + s), b_b_ldf(TF_DT, bc.z + s),
                     b_b_ldf(TF_DT, bc.w + s));
}

// out[bi, i, j0 .. j0 + cols) from the row's sums (and the GEMM epilogue).
fn store_row(bi: i32, i: i32, j0: i32, cols: i32, v: vec4<f32>) {
    for (var c = 0; c < cols; c++) {
        let j = j0 + c;
        let at = A.g.offset[2] + (bi * A.M + i) * A.N + j;
        if (A.epilogue == 0) {
            b_out_stf(TF_DT, at, v[c]);
        } else {
            var x = A.alpha * v[c];
            if (A.beta != 0.0) { x += A.beta * b_c_ldf(TF_DT, offset_of(A.g, 3, bi) + i * A.cs[0] + j * A.cs[1]); }
            b_out_stf(TF_DT, at, x);
        }
    }
}

// Integer dtypes: element by element (exact sums in i32, as the tiles).
fn matmul_flat_ints(bi: i32, i0: i32, j0: i32, rows: i32, cols: i32) {
    for (var r = 0; r < rows; r++) {
        for (var c = 0; c < cols; c++) {
            let ar = offset_of(A.g, 0, bi) + (i0 + r) * A.ms[0];
            let bc = offset_of(A.g, 1, bi) + (j0 + c) * A.ms[3];
            var acc = 0;
            for (var k = 0; k < A.K; k++) { acc += b_a_ldi(TF_DT, ar + k * A.ms[1]) * b_b_ldi(TF_DT, bc + k * A.ms[2]); }
            b_out_sti(TF_DT, A.g.offset[2] + (bi * A.M + i0 + r) * A.N + j0 + c, acc);
        }
    }
}

fn matmul_flat_item(id: i32) {
    let col_blocks = (A.N + 3) / 4;
    let per = (A.M + 3) / 4 * col_blocks;
    let bi = id / per;
    let i0 = (id % per) / col_blocks * 4;
    let j0 = id % col_blocks * 4;
    let rows = min(A.M - i0, 4);
    let cols = min(A.N - j0, 4);
    if (!IS_FLOAT) {
        matmul_flat_ints(bi, i0, j0, rows, cols);
        return;
    }
    let last = A.N - 1;
    let bc = vec4<i32>(j0, min(j0 + 1, last), min(j0 + 2, last), min(j0 + 3, last)) * A.ms[3] + offset_of(A.g, 1, bi);
    let a0 = offset_of(A.g, 0, bi) + i0 * A.ms[0];
    if (rows == 4) {
        let a1 = a0 + A.ms[0];
        let a2 = a1 + A.ms[0];
        let a3 = a2 + A.ms[0];
        var s0 = vec4<f32>(0.0);
        var s1 = s0;
        var s2 = s0;
        var s3 = s0;
        for (var k = 0; k < A.K; k++) {
            let b = b_cols(bc, k);
            let ak = k * A.ms[1];
            s0 += b_a_ldf(TF_DT, a0 + ak) * b;
            s1 += b_a_ldf(TF_DT, a1 + ak) * b;
            s2 += b_a_ldf(TF_DT, a2 + ak) * b;
            s3 += b_a_ldf(TF_DT, a3 + ak) * b;
        }
        store_row(bi, i0, j0, cols, s0);
        store_row(bi, i0 + 1, j0, cols, s1);
        store_row(bi, i0 + 2, j0, cols, s2);
        store_row(bi, i0 + 3, j0, cols, s3);
        return;
    }
    for (var r = 0; r < rows; r++) {                   // the last rows (all of them when M < 4: decoding)
        let ar = a0 + r * A.ms[0];
        var s = vec4<f32>(0.0);
        for (var k = 0; k < A.K; k++) { s += b_a_ldf(TF_DT, ar + k * A.ms[1]) * b_cols(bc, k); }
        store_row(bi, i0 + r, j0, cols, s);
    }
}

//@kernel row_op
struct Args { gx: i32, gy: i32, op: i32, len: i32, xs: i32, os: i32, eps: f32, has_w: i32, has_b: i32, g: Geom,
              w_off: i32, ws: i32, b_off: i32, bs: i32 }

var<workgroup> v: array<f32, RWG>;

fn tree_sum(lid: i32) -> f32 {
    workgroupBarrier();
    for (var s = i32(RWG) / 2; s > 0; s >>= 1u) {
        if (lid < s) { v[lid] += v[lid + s]; }
        workgroupBarrier();
    }
    let r = v[0];
    workgroupBarrier();
    return r;
}

fn tree_max(lid: i32) -> f32 {                         // NaN sticky
    workgroupBarrier();
    for (var s = i32(RWG) / 2; s > 0; s >>= 1u) {
        if (lid < s) {
            let a = v[lid];
            let b = v[lid + s];
            if (!is_nan(a) && (is_nan(b) || b > a)) { v[lid] = b; }
        }
        workgroupBarrier();
    }
    let r = v[0];
    workgroupBarrier();
    return r;
}

// One workgroup per line: softmax, log_softmax, rmsnorm, layernorm; g covers
// the lines (operand 0 = x, 1 = out); xs/os step along the line.
@compute @workgroup_size(RWG)
fn row_op(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid3: vec3<u32>) {
    let line = group_id(wid, nwg);
    if (line * i32(RWG) >= A.gx) { return; }
    let lid = i32(lid3.x);
    let xb = offset_of(A.g, 0, line);
    let ob = offset_of(A.g, 1, line);
    let step = i32(RWG);
    if (OP == TF_OP_SOFTMAX || OP == TF_OP_LOG_SOFTMAX) {
        var m = -inf();
        for (var j = lid; j < A.len; j += step) {
            let x = b_x_ldf(TF_DT, xb + j * A.xs);
            if (!is_nan(m) && (is_nan(x) || x > m)) { m = x; }
        }
        v[lid] = m;
        m = tree_max(lid);
        var acc = 0.0;
        for (var j = lid; j < A.len; j += step) { acc += exp(b_x_ldf(TF_DT, xb + j * A.xs) - m); }
        v[lid] = acc;
        let sum = tree_sum(lid);
        for (var j = lid; j < A.len; j += step) {
            let d = b_x_ldf(TF_DT, xb + j * A.xs) - m;
            b_out_stf(TF_DT, ob + j * A.os, select(d - log(sum), exp(d) / sum, OP == TF_OP_SOFTMAX));
        }
        return;
    }
    var mean = 0.0;
    var acc = 0.0;
    if (OP == TF_OP_LAYERNORM) {
        for (var j = lid; j < A.len; j += step) { acc += b_x_ldf(TF_DT, xb + j * A.xs); }
        v[lid] = acc;
        mean = tree_sum(lid) / f32(A.len);
        acc = 0.0;
    }
    for (var j = lid; j < A.len; j += step) {
        let d = b_x_ldf(TF_DT, xb + j * A.xs) - mean;
        acc += d * d;
    }
    v[lid] = acc;
    let inv = 1.0 / sqrt(tree_sum(lid) / f32(A.len) + A.eps);
    for (var j = lid; j < A.len; j += step) {
        var r = (b_x_ldf(TF_DT, xb + j * A.xs) - mean) * inv;
        if (A.has_w != 0) { r *= b_w_ldf(TF_DT, A.w_off + j * A.ws); }
        if (A.has_b != 0) { r += b_b_ldf(TF_DT, A.b_off + j * A.bs); }
        b_out_stf(TF_DT, ob + j * A.os, r);
    }
}

//@kernel rope
struct Args { gx: i32, gy: i32, n: i32, neox: i32, rot: i32, theta: f32, ax: i32, g: Geom, p_off: i32, ps: i32,
              pos64: i32 }

// One invocation per element; g: the shape of x, operand 0 = x, 1 = out.
//@flat rope

fn rope_item(i: i32) {
    if (i >= A.n) { return; }
    var gg = A.g;
    var rest = i;
    var xo = gg.offset[0];
    var c_ax = 0;
    var e = 0;
    for (var d = gg.ndim - 1; d >= 0; d--) {
        let c = rest % gg.shape[d];
        rest /= gg.shape[d];
        xo += c * gg.stride[0][d];
        if (d == A.ax) { c_ax = c; }
        if (d == gg.ndim - 1) { e = c; }
    }
    var val = b_x_ldf(TF_DT, xo);
    if (e < A.rot) {
        let hd = A.rot / 2;
        let k = select(e / 2, e % hd, A.neox != 0);
        let partner = select(e ^ 1, select(e - hd, e + hd, e < hd), A.neox != 0);
        let first = select((e % 2) == 0, e < hd, A.neox != 0);
        let p = b_pos_ldi(select(DT_I32, DT_I64, A.pos64 != 0), A.p_off + c_ax * A.ps);
        let angle = f32(p) * pow_f32(A.theta, f32(-2 * k) / f32(A.rot));
        let u = b_x_ldf(TF_DT, xo + (partner - e) * gg.stride[0][gg.ndim - 1]);
        let sc = sincos_f32(angle);
        let cs = sc.y;
        let sn = sc.x;
        val = select(u * sn + val * cs, val * cs - u * sn, first);
    }
    b_out_stf(TF_DT, operand(A.g, 1, i), val);
}

//@kernel sdpa
struct AttnGeom { B: i32, Hq: i32, Lq: i32, D: i32, Hkv: i32, Lk: i32, Dv: i32, q_off: i32,
                  st: array<array<i32, 4>, 5>, off: array<i32, 5> }
struct Args { gx: i32, gy: i32, scale: f32, causal: i32, has_mask: i32, a: AttnGeom }

const DV_PER: i32 = (256 + i32(WG) - 1) / i32(WG);     // value dimensions per invocation (MAX_DV is 256)

var<workgroup> score: array<f32, WG>;

// One workgroup per query row (the plugin launches gx rows as gx groups):
// keys in tiles of WG, one score per invocation, then an online softmax
// over the tile that every invocation follows alike, each accumulating its
// own value dimensions e = lid + t * WG. Strides st[t] and offsets off[t]
// for t = q, k, v, mask, out; axes (b, h, l, d). A row with no visible key
// is 0/0 = NaN.
@compute @workgroup_size(WG)
fn sdpa(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid3: vec3<u32>) {
    let r = group_id(wid, nwg);
    if (r >= A.gx) { return; }
    var a = A.a;
    let lid = i32(lid3.x);
    let wg = i32(WG);
    let i = r % a.Lq;
    let h = (r / a.Lq) % a.Hq;
    let b = r / (a.Lq * a.Hq);
    let kh = h / (a.Hq / a.Hkv);
    let qb = a.off[0] + b * a.st[0][0] + h * a.st[0][1] + i * a.st[0][2];
    let kb = a.off[1] + b * a.st[1][0] + kh * a.st[1][1];
    let vb = a.off[2] + b * a.st[2][0] + kh * a.st[2][1];
    let mb = a.off[3] + b * a.st[3][0] + h * a.st[3][1] + i * a.st[3][2];
    var kend = a.Lk;
    if (A.causal != 0) { kend = clamp(a.q_off + i + 1, 0, a.Lk); }
    var acc: array<f32, DV_PER>;
    for (var t = 0; t < DV_PER; t++) { acc[t] = 0.0; }
    var m = -inf();
    var l = 0.0;
    for (var j0 = 0; j0 < kend; j0 += wg) {
        let j = j0 + lid;
        var s = -inf();
        if (j < kend) {
            var dot = 0.0;
            for (var d = 0; d < a.D; d++) {
                dot += b_q_ldf(TF_DT, qb + d * a.st[0][3]) * b_k_ldf(TF_DT, kb + j * a.st[1][2] + d * a.st[1][3]);
            }
            s = dot * A.scale;
            if (A.has_mask != 0) { s += b_mask_ldf(TF_DT, mb + j * a.st[3][3]); }
        }
        score[lid] = s;
        workgroupBarrier();
        let n = min(wg, kend - j0);
        var m_new = m;
        for (var t = 0; t < n; t++) {
            let x = score[t];
            if (!is_nan(m_new) && (is_nan(x) || x > m_new)) { m_new = x; }
        }
        if (!(is_inf(m_new) && m_new < 0.0)) {           // else every key so far is masked out
            let keep = exp(m - m_new);
            l *= keep;
            for (var u = 0; u < DV_PER; u++) { acc[u] *= keep; }
            for (var t = 0; t < n; t++) {
                let x = score[t];
                if (is_inf(x) && x < 0.0) { continue; }
                let p = exp(x - m_new);
                l += p;
                let vrow = vb + (j0 + t) * a.st[2][2];
                for (var u = 0; u < DV_PER; u++) {
                    let e = lid + u * wg;
                    if (e < a.Dv) { acc[u] += p * b_v_ldf(TF_DT, vrow + e * a.st[2][3]); }
                }
            }
            m = m_new;
        }
        workgroupBarrier();
    }
    let ob = a.off[4] + b * a.st[4][0] + h * a.st[4][1] + i * a.st[4][2];
    for (var u = 0; u < DV_PER; u++) {
        let e = lid + u * wg;
        if (e < a.Dv) { b_out_stf(TF_DT, ob + e * a.st[4][3], acc[u] / l); }
    }
}

//@kernel conv2d
struct Args { gx: i32, gy: i32, has_bias: i32, g: ConvGeom }

//@flat conv2d

fn conv2d_item(i: i32) {
    var g = A.g;
    if (i >= g.N * g.O * g.Ho * g.Wo) { return; }
    let xo = i % g.Wo;
    let y = (i / g.Wo) % g.Ho;
    let oc = (i / (g.Wo * g.Ho)) % g.O;
    let n = i / (g.Wo * g.Ho * g.O);
    let c0 = (oc / (g.O / g.groups)) * g.cg;
    var acc = 0.0;
    if (A.has_bias != 0) { acc = b_b_ldf(TF_DT, g.b_off + oc * g.bs); }
    for (var c = 0; c < g.cg; c++) {
        for (var a = 0; a < g.kh; a++) {
            let yi = y * g.stride[0] - g.pad[0] + a * g.dil[0];
            if (yi < 0 || yi >= g.H) { continue; }
            for (var bb = 0; bb < g.kw; bb++) {
                let xi = xo * g.stride[1] - g.pad[1] + bb * g.dil[1];
                if (xi < 0 || xi >= g.W) { continue; }
                acc += b_x_ldf(TF_DT, g.x_off + n * g.xs[0] + (c0 + c) * g.xs[1] + yi * g.xs[2] + xi * g.xs[3]) *
                       b_w_ldf(TF_DT, g.w_off + oc * g.ws[0] + c * g.ws[1] + a * g.ws[2] + bb * g.ws[3]);
            }
        }
    }
    b_out_stf(TF_DT, g.o_off + n * g.os[0] + oc * g.os[1] + y * g.os[2] + xo * g.os[3], acc);
}

//@kernel pool2d
struct Args { gx: i32, gy: i32, is_max: i32, count_pad: i32, g: ConvGeom }

// Max pooling (NaN sticky, -inf padding) or average pooling, count_pad
// deciding whether padding counts in the divisor.
//@flat pool2d

fn pool2d_item(i: i32) {
    var g = A.g;
    if (i >= g.N * g.C * g.Ho * g.Wo) { return; }
    let xo = i % g.Wo;
    let y = (i / g.Wo) % g.Ho;
    let c = (i / (g.Wo * g.Ho)) % g.C;
    let n = i / (g.Wo * g.Ho * g.C);
    let is_max = A.is_max != 0;
    var acc = select(0.0, -inf(), is_max);
    var counted = 0;
    for (var a = 0; a < g.kh; a++) {
        for (var bb = 0; bb < g.kw; bb++) {
            let yi = y * g.stride[0] - g.pad[0] + a * g.dil[0];
            let xi = xo * g.stride[1] - g.pad[1] + bb * g.dil[1];
            let inside = yi >= 0 && yi < g.H && xi >= 0 && xi < g.W;
            if (!is_max && (inside || A.count_pad != 0) && yi < g.H + g.pad[0] && xi < g.W + g.pad[1]) { counted++; }
            if (!inside) { continue; }
            let v = b_x_ldf(TF_DT, g.x_off + n * g.xs[0] + c * g.xs[1] + yi * g.xs[2] + xi * g.xs[3]);
            if (!is_max) { acc += v; }
            else if ((is_nan(v) || v > acc) && !is_nan(acc)) { acc = v; }
        }
    }
    if (!is_max) { acc = select(nan(), acc / f32(counted), counted != 0); }
    b_out_stf(TF_DT, g.o_off + n * g.os[0] + c * g.os[1] + y * g.os[2] + xo * g.os[3], acc);
}

//@kernel adam
struct Args { gx: i32, gy: i32, n: i32, g: Geom, lr: f32, b1: f32, b2: f32, eps: f32, wd: f32, c1: f32, c2: f32,
              decoupled: i32 }

// Adam / AdamW in place: operands param (0), grad (1), m (2), v (3).
//@flat adam

fn adam_item(i: i32) {
    if (i >= A.n) { return; }
    let po = offset_of(A.g, 0, i);
    let go = offset_of(A.g, 1, i);
    let mo = offset_of(A.g, 2, i);
    let vo = offset_of(A.g, 3, i);
    var pv = b_p_ldf(TF_DT, po);
    var gv = b_grad_ldf(TF_DT, go);
    if (A.decoupled != 0) { pv *= 1.0 - A.lr * A.wd; } else { gv += A.wd * pv; }
    let mv = A.b1 * b_m_ldf(TF_DT, mo) + (1.0 - A.b1) * gv;
    let vv = A.b2 * b_v_ldf(TF_DT, vo) + (1.0 - A.b2) * gv * gv;
    pv -= A.lr * (mv / A.c1) / (sqrt(vv / A.c2) + A.eps);
    b_m_stf(TF_DT, mo, mv);
    b_v_stf(TF_DT, vo, vv);
    b_p_stf(TF_DT, po, pv);
}

//@kernel quant
// ---- block-quantized dtypes (ggml's layouts; kernels.cl's quantized
// section, whose comments say why) ----
// Assembled after `common` into the four quantized kernels, each of which
// names its quantized buffer `q` (bytes; offsets below are absolute bytes).
// Decoding matches the CPU bit for bit with or without fused multiply-adds:
// every product of a scale (an f16, or an f16 times a 6- or 8-bit integer)
// and a quant of at most 6 bits fits f32's 24-bit significand exactly but
// Q6_K's, which is a lone product.
const DT_Q4_0: i32 = 9;
const DT_Q4_1: i32 = 10;
const DT_Q8_0: i32 = 11;
const DT_Q4_K: i32 = 12;
const DT_Q6_K: i32 = 13;
const DT_Q5_0: i32 = 14;
const DT_Q5_1: i32 = 15;
const DT_Q2_K: i32 = 16;
const DT_Q3_K: i32 = 17;
const DT_Q5_K: i32 = 18;
const DT_IQ4_NL: i32 = 19;
const DT_IQ4_XS: i32 = 20;

fn q_block_elems(wt: i32) -> i32 {
    let k = wt == DT_Q4_K || wt == DT_Q6_K || wt == DT_Q2_K || wt == DT_Q3_K || wt == DT_Q5_K || wt == DT_IQ4_XS;
    return select(32, 256, k);
}

fn q_block_bytes(wt: i32) -> i32 {
    switch (wt) {
        case 9: { return 18; }
        case 10: { return 20; }
        case 11: { return 34; }
        case 12: { return 144; }
        case 14: { return 22; }
        case 15: { return 24; }
        case 16: { return 84; }
        case 17: { return 110; }
        case 18: { return 176; }
        case 19: { return 18; }
        case 20: { return 136; }
        default: { return 210; }
    }
}

fn q_byte(i: i32) -> u32 { return (b_q_word(i >> 2u) >> (u32(i & 3) * 8u)) & 0xffu; }
fn q_i8(i: i32) -> i32 { return bitcast<i32>(q_byte(i) << 24u) >> 24u; }
// Every f16 of every layout sits at an even byte.
fn q_f16(i: i32) -> f32 { return f16_to_f32((b_q_word(i >> 2u) >> (u32(i & 2) * 8u)) & 0xffffu); }

// IQ4_NL's and IQ4_XS's codebook entry i, four to a packed word.
fn iq4_value(i: i32) -> i32 {
    let word = select(select(0xBFAD9881u, 0xF6EADDCFu, i >= 4), select(0x26190D01u, 0x71594535u, i >= 12), i >= 8);
    return bitcast<i32>(((word >> u32(8 * (i % 4))) & 0xffu) << 24u) >> 24u;
}

fn q_u32_bytes(i: i32) -> u32 { return q_byte(i) | (q_byte(i + 1) << 8u) | (q_byte(i + 2) << 16u) | (q_byte(i + 3) << 24u); }

// Q3_K's signed scale of group g (its 12 scale bytes at s); IQ4_XS's of
// sub-block j of the block at b.
fn q3_k_scale(s: i32, g: i32) -> i32 {
    return i32(((q_byte(s + g % 8) >> u32(4 * (g / 8))) & 15u) | (((q_byte(s + 8 + g % 4) >> u32(2 * (g / 4))) & 3u) << 4u)) - 32;
}
fn iq4_xs_scale(b: i32, j: i32) -> i32 {
    return i32(((q_byte(b + 4 + j / 2) >> u32(4 * (j % 2))) & 15u) | (((q_byte(b + 2 + j / 4) >> u32(2 * (j % 4))) & 3u) << 4u)) - 32;
}

// Q4_K sub-block j of the block at byte b: its scale and its minimum
// (d * sc, dmin * m), from the 12 bytes of 6-bit pairs (Q5_K's the same).
fn q4_k_scales(b: i32, j: i32) -> vec2<f32> {
    let s = b + 4;
    var sc: u32;
    var m: u32;
    if (j < 4) {
        sc = q_byte(s + j) & 63u;
        m = q_byte(s + j + 4) & 63u;
    } else {
        sc = (q_byte(s + j + 4) & 15u) | ((q_byte(s + j - 4) >> 6u) << 4u);
        m = (q_byte(s + j + 4) >> 4u) | ((q_byte(s + j) >> 6u) << 4u);
    }
    return vec2<f32>(q_f16(b) * f32(sc), q_f16(b + 2) * f32(m));
}

// Q6_K chunk c (row r of its block's 8): where its low and high bits are,
// their shifts, and the scales of its two halves.
struct Q6Chunk { lo: i32, hi: i32, lo_shift: u32, hi_shift: u32, ds0: f32, ds1: f32 }

fn q6_k_chunk(row: i32, c: i32) -> Q6Chunk {
    let b = row + c / 8 * 210;
    let r = c % 8;
    let d = q_f16(b + 208);
    return Q6Chunk(b + 64 * (r / 4) + 32 * (r % 2), b + 128 + 32 * (r / 4), u32(4 * ((r % 4) / 2)), u32(2 * (r % 4)),
                   d * f32(q_i8(b + 192 + 2 * r)), d * f32(q_i8(b + 193 + 2 * r)));
}

// The 32 elements of chunk c of the quantized row at byte `row`: a whole
// block of the 32-element formats, a sub-block (one scale) of the K-quants.
fn q_chunk32(wt: i32, row: i32, c: i32, y: ptr<function, array<f32, 32>>) {
    if (wt == DT_Q4_0) {
        let b = row + c * 18;
        let d = q_f16(b);
        for (var j = 0; j < 16; j++) {
            let v = q_byte(b + 2 + j);
            (*y)[j] = d * f32(i32(v & 15u) - 8);
            (*y)[j + 16] = d * f32(i32(v >> 4u) - 8);
        }
    } else if (wt == DT_Q4_1) {
        let b = row + c * 20;
        let d = q_f16(b);
        let m = q_f16(b + 2);
        for (var j = 0; j < 16; j++) {
            let v = q_byte(b + 4 + j);
            (*y)[j] = d * f32(v & 15u) + m;
            (*y)[j + 16] = d * f32(v >> 4u) + m;
        }
    } else if (wt == DT_Q8_0) {
        let b = row + c * 34;
        let d = q_f16(b);
        for (var j = 0; j < 32; j++) { (*y)[j] = f32(q_i8(b + 2 + j)) * d; }
    } else if (wt == DT_Q4_K) {
        let b = row + c / 8 * 144;
        let j = c % 8;
        let scales = q4_k_scales(b, j);
        let ds = scales.x;
        let dm = scales.y;
        let q = b + 16 + 32 * (j / 2);
        let shift = u32(4 * (j % 2));
        for (var l = 0; l < 32; l++) { (*y)[l] = ds * f32((q_byte(q + l) >> shift) & 15u) - dm; }
    } else if (wt == DT_Q5_0 || wt == DT_Q5_1) {
        let one = wt == DT_Q5_1;
        let b = row + c * select(22, 24, one);
        let qh = q_u32_bytes(b + select(2, 4, one));
        let qs = b + select(6, 8, one);
        let d = q_f16(b);
        let m = select(0.0, q_f16(b + 2), one);
        let bias = select(16, 0, one);
        for (var j = 0; j < 16; j++) {
            let v = q_byte(qs + j);
            let lo = i32((v & 15u) | (((qh >> u32(j)) & 1u) << 4u)) - bias;
            let hi = i32((v >> 4u) | (((qh >> u32(j + 16)) & 1u) << 4u)) - bias;
            (*y)[j] = d * f32(lo) + m;
            (*y)[j + 16] = d * f32(hi) + m;
        }
    } else if (wt == DT_Q2_K) {                          // chunk = 2-bit field r % 4 of bytes 32 (r / 4) ..
        let b = row + c / 8 * 84;
        let r = c % 8;
        let d = q_f16(b + 80);
        let dmin = q_f16(b + 82);
        let q = b + 16 + 32 * (r / 4);
        for (var l = 0; l < 32; l++) {
            let sc = q_byte(b + 2 * r + l / 16);
            let dl = d * f32(sc & 15u);
            let ml = dmin * f32(sc >> 4u);
            (*y)[l] = dl * f32((q_byte(q + l) >> u32(2 * (r % 4))) & 3u) - ml;
        }
    } else if (wt == DT_Q3_K) {
        let b = row + c / 8 * 110;
        let r = c % 8;
        let d = q_f16(b + 108);
        let dl0 = d * f32(q3_k_scale(b + 96, 2 * r));
        let dl1 = d * f32(q3_k_scale(b + 96, 2 * r + 1));
        let q = b + 32 + 32 * (r / 4);
        for (var l = 0; l < 32; l++) {
            let level = i32((q_byte(q + l) >> u32(2 * (r % 4))) & 3u) - select(4, 0, ((q_byte(b + l) >> u32(r)) & 1u) != 0u);
            (*y)[l] = select(dl1, dl0, l < 16) * f32(level);
        }
    } else if (wt == DT_Q5_K) {
        let b = row + c / 8 * 176;
        let j = c % 8;
        let scales = q4_k_scales(b, j);
        let q = b + 48 + 32 * (j / 2);
        for (var l = 0; l < 32; l++) {
            let v = ((q_byte(q + l) >> u32(4 * (j % 2))) & 15u) | (((q_byte(b + 16 + l) >> u32(j)) & 1u) << 4u);
            (*y)[l] = scales.x * f32(v) - scales.y;
        }
    } else if (wt == DT_IQ4_NL) {
        let b = row + c * 18;
        let d = q_f16(b);
        for (var j = 0; j < 16; j++) {
            let v = q_byte(b + 2 + j);
            (*y)[j] = d * f32(iq4_value(i32(v & 15u)));
            (*y)[j + 16] = d * f32(iq4_value(i32(v >> 4u)));
        }
    } else if (wt == DT_IQ4_XS) {
        let b = row + c / 8 * 136;
        let j = c % 8;
        let dl = q_f16(b) * f32(iq4_xs_scale(b, j));
        let q = b + 8 + 16 * j;
        for (var l = 0; l < 16; l++) {
            let v = q_byte(q + l);
            (*y)[l] = dl * f32(iq4_value(i32(v & 15u)));
            (*y)[l + 16] = dl * f32(iq4_value(i32(v >> 4u)));
        }
    } else {                                             // Q6_K: chunk = row r of the block's 8
        let k = q6_k_chunk(row, c);
        for (var l = 0; l < 32; l++) {
            let q = i32(((q_byte(k.lo + l) >> k.lo_shift) & 15u) | (((q_byte(k.hi + l) >> k.hi_shift) & 3u) << 4u)) - 32;
            (*y)[l] = select(k.ds1, k.ds0, l < 16) * f32(q);
        }
    }
}

//@kernel quant_decode
struct Args { gx: i32, gy: i32, wt: i32, nchunks: i32, g: Geom, src_off: i32 }

// One item per 32-element chunk. g: operand 0 = out, 1 = the quantized
// source in elements (offset 0; its byte offset is src_off). Chunks never
// straddle rows, so chunk i's source starts at element offset_of(g, 1, 32 i).
//@flat quant_decode

fn quant_decode_item(c: i32) {
    if (c >= A.nchunks) { return; }
    let first = 32 * c;
    let is = operand(A.g, 1, first);
    var y: array<f32, 32>;
    q_chunk32(A.wt, A.src_off, is / 32, &y);
    for (var e = 0; e < 32; e++) { b_out_stf(TF_DT, operand(A.g, 0, first + e), y[e]); }
}

//@kernel quant_encode
struct Args { gx: i32, gy: i32, wt: i32, nblocks: i32, g: Geom, dst_off: i32 }

var<private> xs: array<f32, 256>;                       // the block's source, as f32
var<private> blk: array<u32, 210>;                      // the block's bytes, one per entry
var<private> qcodes: array<u32, 32>;                    // Q5_0's and Q5_1's codes before packing

// One item per block; kernels.cl's encoders step for step (those of
// cpu_quant.c). g: operand 0 = the source, 1 = the quantized destination in
// elements (offset 0; its byte offset is dst_off). The block is built in
// private memory, then written word by word: words it shares with the
// neighbouring blocks (18-, 20- and 34-byte blocks do) keep their bytes.
//@flat quant_encode

// C's roundf: halves away from zero (WGSL's round goes to even).
fn round_away(x: f32) -> f32 {
    let t = trunc(x);
    return select(t, t + sign(x), abs(x - t) >= 0.5);
}

// Stores v as an f16 at byte `at` of the block; the value the field holds.
fn put_f16(at: i32, v: f32) -> f32 {
    let h = f32_to_f16(v);
    blk[at] = h & 0xffu;
    blk[at + 1] = h >> 8u;
    return f16_to_f32(h);
}

fn signed_absmax(first: i32, n: i32) -> f32 {
    var best = 0.0;
    var amax = 0.0;
    for (var i = 0; i < n; i++) {
        let v = xs[first + i];
        if (abs(v) > amax) {
            amax = abs(v);
            best = v;
        }
    }
    return best;
}

fn inverse(d: f32) -> f32 { return select(0.0, 1.0 / d, d != 0.0); }

fn q4_0_encode() {
    let d = signed_absmax(0, 32) / -8.0;
    let id = inverse(d);
    put_f16(0, d);
    for (var j = 0; j < 16; j++) {
        let lo = clamp(i32(xs[j] * id + 8.5), 0, 15);
        let hi = clamp(i32(xs[j + 16] * id + 8.5), 0, 15);
        blk[2 + j] = u32(lo | (hi << 4u));
    }
}

fn q4_1_encode() {
    var lo = xs[0];
    var hi = xs[0];
    for (var j = 1; j < 32; j++) {
        lo = min(lo, xs[j]);
        hi = max(hi, xs[j]);
    }
    let d = (hi - lo) / 15.0;
    let id = inverse(d);
    put_f16(0, d);
    put_f16(2, lo);
    for (var j = 0; j < 16; j++) {
        let a = clamp(i32((xs[j] - lo) * id + 0.5), 0, 15);
        let c = clamp(i32((xs[j + 16] - lo) * id + 0.5), 0, 15);
        blk[4 + j] = u32(a | (c << 4u));
    }
}

fn q8_0_encode() {
    var amax = 0.0;
    for (var j = 0; j < 32; j++) { amax = max(amax, abs(xs[j])); }
    let d = amax / 127.0;
    let id = inverse(d);
    put_f16(0, d);
    for (var j = 0; j < 32; j++) { blk[2 + j] = bitcast<u32>(clamp(i32(round_away(xs[j] * id)), -127, 127)) & 0xffu; }
}

fn put_q5(qh_at: i32, qs: i32) {                        // codes in qcodes[0..32]
    var qh = 0u;
    for (var j = 0; j < 16; j++) {
        blk[qs + j] = (qcodes[j] & 15u) | ((qcodes[j + 16] & 15u) << 4u);
        qh |= (((qcodes[j] >> 4u) & 1u) << u32(j)) | (((qcodes[j + 16] >> 4u) & 1u) << u32(j + 16));
    }
    for (var i = 0; i < 4; i++) { blk[qh_at + i] = (qh >> u32(8 * i)) & 0xffu; }
}

fn q5_0_encode() {
    let d = signed_absmax(0, 32) / -16.0;
    let id = inverse(d);
    put_f16(0, d);
    for (var e = 0; e < 32; e++) {
        let t = bitcast<i32>(u32(i32(xs[e] * id + 16.5)) << 24u) >> 24u;   // through int8, as ggml
        qcodes[e] = u32(min(t, 31)) & 0xffu;
    }
    put_q5(2, 6);
}

fn q5_1_encode() {
    var lo = xs[0];
    var hi = xs[0];
    for (var e = 1; e < 32; e++) {
        lo = select(lo, xs[e], xs[e] < lo);
        hi = select(hi, xs[e], xs[e] > hi);
    }
    let d = (hi - lo) / 31.0;
    let id = inverse(d);
    put_f16(0, d);
    put_f16(2, lo);
    for (var e = 0; e < 32; e++) { qcodes[e] = u32(min(i32(u32(i32((xs[e] - lo) * id + 0.5)) & 0xffu), 31)); }
    put_q5(4, 8);
}

// ---- the K-quants: cpu_quant_kfit.c's fits and encoders, step for step
// (ggml's without an importance matrix). Levels in kl, by element. ----
var<private> kl: array<i32, 256>;
var<private> ktrial: array<i32, 32>;
var<private> kw: array<f32, 32>;                         // a sub-block's weights
var<private> kneg_min: f32;                              // fit_scale_min's second result

// ggml's nearest_int: round half to even through the f32 mantissa.
fn nearest_k(v: f32) -> i32 { return i32(bitcast<u32>(v + 12582912.0) & 0x007fffffu) - 0x00400000; }

fn fit_scale_min(first: i32, n: i32, nmax: i32, rmin: f32, rdelta: f32, nstep: i32, mad: bool) -> f32 {
    var mn = xs[first];
    var mx = xs[first];
    var sum_w = kw[0];
    var sum_x = sum_w * xs[first];
    for (var i = 1; i < n; i++) {
        let x = xs[first + i];
        if (x < mn) { mn = x; }
        if (x > mx) { mx = x; }
        sum_w = sum_w + kw[i];
        sum_x = sum_x + kw[i] * x;
    }
    if (mn > 0.0) { mn = 0.0; }
    if (mx == mn) {
        for (var i = 0; i < n; i++) { kl[first + i] = 0; }
        kneg_min = -mn;
        return 0.0;
    }
    var iscale = f32(nmax) / (mx - mn);
    var scale = 1.0 / iscale;
    var best_error = 0.0;
    for (var i = 0; i < n; i++) {
        let l = clamp(nearest_k(iscale * (xs[first + i] - mn)), 0, nmax);
        kl[first + i] = l;
        var diff = scale * f32(l) + mn - xs[first + i];
        diff = select(diff * diff, abs(diff), mad);
        best_error = best_error + kw[i] * diff;
    }
    for (var is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * f32(is) + f32(nmax)) / (mx - mn);
        var sum_l = 0.0;
        var sum_l2 = 0.0;
        var sum_xl = 0.0;
        for (var i = 0; i < n; i++) {
            let l = clamp(nearest_k(iscale * (xs[first + i] - mn)), 0, nmax);
            ktrial[i] = l;
            let wl = kw[i] * f32(l);
            sum_l = sum_l + wl;
            sum_l2 = sum_l2 + wl * f32(l);
            sum_xl = sum_xl + wl * xs[first + i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0.0)) { continue; }
        var this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        var this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0.0) {
            this_min = 0.0;
            this_scale = sum_xl / sum_l2;
        }
        var err = 0.0;
        for (var i = 0; i < n; i++) {
            var diff = this_scale * f32(ktrial[i]) + this_min - xs[first + i];
            diff = select(diff * diff, abs(diff), mad);
            err = err + kw[i] * diff;
        }
        if (err < best_error) {
            for (var i = 0; i < n; i++) { kl[first + i] = ktrial[i]; }
            best_error = err;
            scale = this_scale;
            mn = this_min;
        }
    }
    kneg_min = -mn;
    return scale;
}

fn extreme_k(first: i32, n: i32) -> f32 {
    var mx = 0.0;
    var amax = 0.0;
    for (var i = 0; i < n; i++) {
        let v = xs[first + i];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    return select(mx, 0.0, amax < 1e-15);
}

fn fit_signed_refine(first: i32, n: i32, nmax: i32) -> f32 {
    let mx = extreme_k(first, n);
    if (mx == 0.0) {
        for (var i = 0; i < n; i++) { kl[first + i] = 0; }
        return 0.0;
    }
    let iscale = f32(-nmax) / mx;
    var sumlx = 0.0;
    var suml2 = 0.0;
    for (var i = 0; i < n; i++) {
        let x = xs[first + i];
        let l = clamp(nearest_k(iscale * x), -nmax, nmax - 1);
        kl[first + i] = l;
        let w = x * x;
        sumlx = sumlx + w * x * f32(l);
        suml2 = suml2 + w * f32(l) * f32(l);
    }
    for (var sweep = 0; sweep < 5; sweep++) {
        var changed = 0;
        for (var i = 0; i < n; i++) {
            let x = xs[first + i];
            let w = x * x;
            let li = f32(kl[first + i]);
            var slx = sumlx - w * x * li;
            if (!(slx > 0.0)) { continue; }
            var sl2 = suml2 - w * li * li;
            let l = clamp(nearest_k(x * sl2 / slx), -nmax, nmax - 1);
            if (l == kl[first + i]) { continue; }
            slx = slx + w * x * f32(l);
            sl2 = sl2 + w * f32(l) * f32(l);
            if (sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                kl[first + i] = l;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (changed == 0) { break; }
    }
    for (var i = 0; i < n; i++) { kl[first + i] += nmax; }
    return select(0.0, sumlx / suml2, suml2 > 0.0);
}

fn levels_sums(first: i32, n: i32, nmax: i32, iscale: f32) -> vec2<f32> {
    var a = 0.0;
    var c = 0.0;
    for (var i = 0; i < n; i++) {
        let x = xs[first + i];
        let l = f32(clamp(nearest_k(iscale * x), -nmax, nmax - 1));
        let w = x * x;
        a = a + w * x * l;
        c = c + w * l * l;
    }
    return vec2<f32>(a, c);
}

fn fit_signed_sweep(first: i32, n: i32, nmax: i32) -> f32 {
    let mx = extreme_k(first, n);
    if (mx == 0.0) {
        for (var i = 0; i < n; i++) { kl[first + i] = 0; }
        return 0.0;
    }
    var iscale = f32(-nmax) / mx;
    for (var i = 0; i < n; i++) { kl[first + i] = nmax + clamp(nearest_k(iscale * xs[first + i]), -nmax, nmax - 1); }
    var sums = levels_sums(first, n, nmax, iscale);
    var scale = select(0.0, sums.x / sums.y, sums.y != 0.0);
    var best = scale * sums.x;
    for (var is = -9; is <= 9; is++) {
        if (is == 0) { continue; }
        iscale = -(f32(nmax) + 0.1 * f32(is)) / mx;
        sums = levels_sums(first, n, nmax, iscale);
        if (sums.y > 0.0 && sums.x * sums.x > best * sums.y) {
            for (var i = 0; i < n; i++) { kl[first + i] = nmax + clamp(nearest_k(iscale * xs[first + i]), -nmax, nmax - 1); }
            scale = sums.x / sums.y;
            best = scale * sums.x;
        }
    }
    return scale;
}

fn pack_2bit_k(at: i32) {                               // kl's low 2 bits
    for (var e = 0; e < 256; e++) { blk[at + 32 * (e / 128) + e % 32] |= u32(kl[e] & 3) << u32(2 * ((e % 128) / 32)); }
}

fn pack_nibbles_k(at: i32) {
    for (var e = 0; e < 256; e++) { blk[at + 32 * (e / 64) + e % 32] |= u32(kl[e] & 15) << u32(4 * ((e / 32) % 2)); }
}

fn block_step_k(max_value: f32, top: f32) -> f32 { return select(0.0, top / max_value, max_value > 0.0); }

fn blk_f16(at: i32) -> f32 { return f16_to_f32(blk[at] | (blk[at + 1] << 8u)); }

fn q2_k_encode() {
    var scales: array<f32, 16>;
    var mins: array<f32, 16>;
    var max_scale = 0.0;
    var max_min = 0.0;
    for (var j = 0; j < 16; j++) {
        for (var l = 0; l < 16; l++) { kw[l] = abs(xs[16 * j + l]); }
        scales[j] = fit_scale_min(16 * j, 16, 3, -0.5, 0.1, 15, true);
        mins[j] = kneg_min;
        if (scales[j] > max_scale) { max_scale = scales[j]; }
        if (mins[j] > max_min) { max_min = mins[j]; }
    }
    if (max_scale > 0.0) {
        let iscale = block_step_k(max_scale, 15.0);
        for (var j = 0; j < 16; j++) { blk[j] = u32(nearest_k(iscale * scales[j])) & 0xffu; }
        put_f16(80, max_scale / 15.0);
    }
    if (max_min > 0.0) {
        let iscale = block_step_k(max_min, 15.0);
        for (var j = 0; j < 16; j++) { blk[j] = (blk[j] | (u32(nearest_k(iscale * mins[j])) << 4u)) & 0xffu; }
        put_f16(82, max_min / 15.0);
    }
    for (var j = 0; j < 16; j++) {
        let d = blk_f16(80) * f32(blk[j] & 15u);
        if (d == 0.0) { continue; }
        let dm = blk_f16(82) * f32(blk[j] >> 4u);
        for (var l = 0; l < 16; l++) { kl[16 * j + l] = clamp(nearest_k((xs[16 * j + l] + dm) / d), 0, 3); }
    }
    pack_2bit_k(16);
}

fn q3_k_encode() {
    var scales: array<f32, 16>;
    var max_scale = 0.0;
    var amax = 0.0;
    for (var j = 0; j < 16; j++) {
        scales[j] = fit_signed_refine(16 * j, 16, 4);
        if (abs(scales[j]) > amax) {
            amax = abs(scales[j]);
            max_scale = scales[j];
        }
    }
    if (max_scale != 0.0) {
        let iscale = -32.0 / max_scale;
        for (var j = 0; j < 16; j++) {
            let t = bitcast<i32>(u32(nearest_k(iscale * scales[j])) << 24u) >> 24u;   // through int8, as ggml
            let l = u32(clamp(t, -32, 31) + 32);
            blk[96 + j % 8] |= (l & 15u) << u32(4 * (j / 8));
            blk[104 + j % 4] |= (l >> 4u) << u32(2 * (j / 4));
        }
        put_f16(108, 1.0 / iscale);
    }
    for (var j = 0; j < 16; j++) {
        let sc = i32(((blk[96 + j % 8] >> u32(4 * (j / 8))) & 15u) | (((blk[104 + j % 4] >> u32(2 * (j / 4))) & 3u) << 4u));
        let d = blk_f16(108) * f32(sc - 32);
        if (d == 0.0) { continue; }
        for (var l = 0; l < 16; l++) { kl[16 * j + l] = clamp(nearest_k(xs[16 * j + l] / d), -4, 3) + 4; }
    }
    for (var e = 0; e < 256; e++) {
        if (kl[e] > 3) { blk[e % 32] |= 1u << u32(e / 32); }
    }
    pack_2bit_k(32);
}

fn k_scale_min_encode(nmax: i32, rmin: f32, nstep: i32) {
    var sc: array<f32, 8>;
    var mn: array<f32, 8>;
    var max_scale = 0.0;
    var max_min = 0.0;
    for (var j = 0; j < 8; j++) {
        var sum_x2 = 0.0;
        for (var l = 0; l < 32; l++) { sum_x2 = sum_x2 + xs[32 * j + l] * xs[32 * j + l]; }
        let av_x = sqrt(sum_x2 / 32.0);
        for (var l = 0; l < 32; l++) { kw[l] = av_x + abs(xs[32 * j + l]); }
        sc[j] = fit_scale_min(32 * j, 32, nmax, rmin, 0.1, nstep, false);
        mn[j] = kneg_min;
        if (sc[j] > max_scale) { max_scale = sc[j]; }
        if (mn[j] > max_min) { max_min = mn[j]; }
    }
    let inv_scale = block_step_k(max_scale, 63.0);
    let inv_min = block_step_k(max_min, 63.0);
    for (var j = 0; j < 8; j++) {
        let ls = min(u32(nearest_k(inv_scale * sc[j])) & 0xffu, 63u);
        let lm = min(u32(nearest_k(inv_min * mn[j])) & 0xffu, 63u);
        if (j < 4) {
            blk[4 + j] |= ls;
            blk[8 + j] |= lm;
        } else {
            blk[8 + j] = (ls & 15u) | ((lm & 15u) << 4u);
            blk[j] |= (ls >> 4u) << 6u;
            blk[4 + j] |= (lm >> 4u) << 6u;
        }
    }
    put_f16(0, max_scale / 63.0);
    put_f16(2, max_min / 63.0);
    for (var j = 0; j < 8; j++) {
        var s = 0u;
        var m = 0u;
        if (j < 4) {
            s = blk[4 + j] & 63u;
            m = blk[8 + j] & 63u;
        } else {
            s = (blk[8 + j] & 15u) | ((blk[j] >> 6u) << 4u);
            m = (blk[8 + j] >> 4u) | ((blk[4 + j] >> 6u) << 4u);
        }
        let d = blk_f16(0) * f32(s);
        if (d == 0.0) { continue; }
        let dm = blk_f16(2) * f32(m);
        for (var l = 0; l < 32; l++) { kl[32 * j + l] = clamp(nearest_k((xs[32 * j + l] + dm) / d), 0, nmax); }
    }
}

fn q4_k_encode() {
    k_scale_min_encode(15, -1.0, 20);
    pack_nibbles_k(16);
}

fn q5_k_encode() {
    k_scale_min_encode(31, -0.5, 15);
    for (var e = 0; e < 256; e++) { blk[16 + e % 32] |= u32(kl[e] >> 4u) << u32(e / 32); }
    pack_nibbles_k(48);
}

fn q6_k_encode() {
    var scales: array<f32, 16>;
    var max_scale = 0.0;
    var max_abs = 0.0;
    for (var j = 0; j < 16; j++) {
        scales[j] = fit_signed_sweep(16 * j, 16, 32);
        if (abs(scales[j]) > max_abs) {
            max_abs = abs(scales[j]);
            max_scale = scales[j];
        }
    }
    if (max_abs < 1e-15) { return; }                     // every byte 0
    let iscale = -128.0 / max_scale;
    put_f16(208, 1.0 / iscale);
    var sc: array<i32, 16>;
    for (var j = 0; j < 16; j++) {
        sc[j] = min(nearest_k(iscale * scales[j]), 127);
        sc[j] = bitcast<i32>(u32(sc[j]) << 24u) >> 24u;  // stored as int8
        blk[192 + j] = bitcast<u32>(sc[j]) & 0xffu;
    }
    for (var j = 0; j < 16; j++) {
        let d = blk_f16(208) * f32(sc[j]);
        if (d == 0.0) { continue; }
        for (var l = 0; l < 16; l++) { kl[16 * j + l] = clamp(nearest_k(xs[16 * j + l] / d), -32, 31) + 32; }
    }
    for (var e = 0; e < 256; e++) {
        let r = e / 32;
        let c = e % 32;
        let q = u32(kl[e]);
        blk[64 * (r / 4) + 32 * (r % 2) + c] |= (q & 15u) << u32(4 * ((r % 4) / 2));
        blk[128 + 32 * (r / 4) + c] |= (q >> 4u) << u32(2 * (r % 4));
    }
}

// The codebook index nearest v (ties up): ggml's best_index_int8.
fn iq4_nearest(v: f32) -> i32 {
    if (v <= -127.0) { return 0; }
    if (v >= 113.0) { return 15; }
    var lo = 0;
    var hi = 15;
    while (hi - lo > 1) {
        let mid = (lo + hi) / 2;
        if (v < f32(iq4_value(mid))) { hi = mid; } else { lo = mid; }
    }
    return select(hi, hi - 1, v - f32(iq4_value(hi - 1)) < f32(iq4_value(hi)) - v);
}

// sum w q x and sum w q q (w = x^2) over sub-block `first` for scale id.
fn iq4_fit(first: i32, id: f32) -> vec2<f32> {
    var qx = 0.0;
    var q2 = 0.0;
    for (var j = 0; j < 32; j++) {
        let x = xs[first + j];
        let q = f32(iq4_value(iq4_nearest(id * x)));
        let w = x * x;
        qx += w * q * x;
        q2 += w * q * q;
    }
    return vec2<f32>(qx, q2);
}

// The sub-block's element of largest magnitude (sign kept); 0 below 1e-15.
fn iq4_extreme(first: i32) -> f32 {
    var amax = 0.0;
    var mx = 0.0;
    for (var j = 0; j < 32; j++) {
        if (abs(xs[first + j]) > amax) {
            amax = abs(xs[first + j]);
            mx = xs[first + j];
        }
    }
    return select(mx, 0.0, amax < 1e-15);
}

// ggml's scale search for one sub-block (cpu_quant_ext.c's iq4_sub_block_scale).
fn iq4_sub_block_scale(first: i32, ntry: i32) -> f32 {
    let mx = iq4_extreme(first);
    if (mx == 0.0) { return 0.0; }
    var f = iq4_fit(first, 1.0 / select(mx / -127.0, -mx / -127.0, ntry > 0));
    var d = select(0.0, f.x / f.y, f.y > 0.0);
    var best = d * f.x;
    for (var t = -ntry; t <= ntry; t++) {
        f = iq4_fit(first, (f32(t) - 127.0) / mx);
        if (f.y > 0.0 && f.x * f.x > best * f.y) {
            d = f.x / f.y;
            best = d * f.x;
        }
    }
    return d;
}

// Sub-block `first`'s codes for scale d (0: the code nearest 0) into 16 bytes at `at`.
fn iq4_pack(first: i32, d: f32, at: i32) {
    let id = inverse(d);
    for (var j = 0; j < 16; j++) {
        blk[at + j] = u32(iq4_nearest(id * xs[first + j])) | (u32(iq4_nearest(id * xs[first + j + 16])) << 4u);
    }
}

// As llama-quantize: 7 tries each way, the codes refitted to the f32 scale.
fn iq4_nl_encode() {
    let d = iq4_sub_block_scale(0, 7);
    put_f16(0, d);
    iq4_pack(0, d, 2);
}

fn iq4_xs_encode() {
    var scales: array<f32, 8>;
    var max_scale = 0.0;
    var amax_scale = 0.0;
    for (var j = 0; j < 8; j++) {
        scales[j] = iq4_sub_block_scale(32 * j, 7);
        if (abs(scales[j]) > amax_scale) {
            amax_scale = abs(scales[j]);
            max_scale = scales[j];
        }
    }
    let d = -max_scale / 32.0;
    let id = inverse(d);
    put_f16(0, d);
    var high = 0u;
    for (var j = 0; j < 8; j++) {
        var l = clamp(i32(round(id * scales[j])), -32, 31);   // WGSL's round: half to even, as ggml's nearest_int
        iq4_pack(32 * j, d * f32(l), 8 + 16 * j);
        l += 32;
        blk[4 + j / 2] |= u32(l & 15) << u32(4 * (j % 2));
        high |= u32(l >> 4u) << u32(2 * j);
    }
    blk[2] = high & 0xffu;
    blk[3] = high >> 8u;
}

fn quant_encode_item(k: i32) {
    if (k >= A.nblocks) { return; }
    let n = q_block_elems(A.wt);
    let nb = q_block_bytes(A.wt);
    let first = k * n;
    var gg = A.g;
    let step = gg.stride[0][gg.ndim - 1];
    let is = offset_of(A.g, 0, first);
    let od = offset_of(A.g, 1, first);
    for (var e = 0; e < n; e++) { xs[e] = b_src_ldf(TF_DT, is + e * step); }
    for (var i = 0; i < nb; i++) { blk[i] = 0u; }
    if (A.wt == DT_Q4_0) { q4_0_encode(); }
    else if (A.wt == DT_Q4_1) { q4_1_encode(); }
    else if (A.wt == DT_Q8_0) { q8_0_encode(); }
    else if (A.wt == DT_Q4_K) { q4_k_encode(); }
    else if (A.wt == DT_Q5_0) { q5_0_encode(); }
    else if (A.wt == DT_Q5_1) { q5_1_encode(); }
    else if (A.wt == DT_Q2_K) { q2_k_encode(); }
    else if (A.wt == DT_Q3_K) { q3_k_encode(); }
    else if (A.wt == DT_Q5_K) { q5_k_encode(); }
    else if (A.wt == DT_IQ4_NL) { iq4_nl_encode(); }
    else if (A.wt == DT_IQ4_XS) { iq4_xs_encode(); }
    else { q6_k_encode(); }
    let at = A.dst_off + od / n * nb;
    for (var w = at >> 2u; w * 4 < at + nb; w++) {
        var bits = 0u;
        var keep = 0u;
        for (var b = 0; b < 4; b++) {
            let i = w * 4 + b;
            if (i >= at && i < at + nb) { bits |= blk[i - at] << u32(8 * b); } else { keep |= 0xffu << u32(8 * b); }
        }
        b_q_put(w, keep, bits);
    }
}

//@kernel qdot
// ---- dot products of f32 rows with quantized ones, for qgemv and qmatmul
// (whose activations are buffer `x`) ----
// Decoding straight into the sum, four quant bytes to a word read: no
// private array (which llvmpipe keeps in memory, lane by lane).

// The 4 bytes from byte i on (any alignment: blocks of 18, 20, 34 and 210
// bytes leave quants at every offset).
fn q_u32_at(i: i32) -> u32 {
    let s = u32(i & 3) * 8u;
    let lo = b_q_word(i >> 2u);
    if (s == 0u) { return lo; }
    return (lo >> s) | (b_q_word((i >> 2u) + 1) << (32u - s));
}

fn x_at(i: i32) -> f32 { return bitcast<f32>(b_x_word(i)); }

// sum over e < 32 of x[xo + e] * chunk c of the quantized row at byte `row`.
fn q_dot32(wt: i32, row: i32, c: i32, xo: i32) -> f32 {
    var sum = 0.0;
    if (wt == DT_Q4_0 || wt == DT_Q4_1) {
        let q41 = wt == DT_Q4_1;
        let b = row + c * select(18, 20, q41);
        let d = q_f16(b);
        let m = select(0.0, q_f16(b + 2), q41);
        let bias = select(8, 0, q41);
        let qs = b + select(2, 4, q41);
        for (var g = 0; g < 4; g++) {
            let v = q_u32_at(qs + 4 * g);
            for (var t = 0; t < 4; t++) {
                let byte = (v >> u32(8 * t)) & 0xffu;
                let e = 4 * g + t;
                sum += x_at(xo + e) * (d * f32(i32(byte & 15u) - bias) + m);
                sum += x_at(xo + e + 16) * (d * f32(i32(byte >> 4u) - bias) + m);
            }
        }
    } else if (wt == DT_Q8_0) {
        let b = row + c * 34;
        let d = q_f16(b);
        for (var g = 0; g < 8; g++) {
            let v = q_u32_at(b + 2 + 4 * g);
            for (var t = 0; t < 4; t++) {
                let q = bitcast<i32>(v << u32(24 - 8 * t)) >> 24u;
                sum += x_at(xo + 4 * g + t) * (f32(q) * d);
            }
        }
    } else if (wt == DT_Q4_K) {
        let b = row + c / 8 * 144;
        let j = c % 8;
        let scales = q4_k_scales(b, j);
        let ds = scales.x;
        let dm = scales.y;
        let qs = b + 16 + 32 * (j / 2);
        let shift = u32(4 * (j % 2));
        for (var g = 0; g < 8; g++) {
            let v = q_u32_at(qs + 4 * g);
            for (var t = 0; t < 4; t++) {
                sum += x_at(xo + 4 * g + t) * (ds * f32((v >> (u32(8 * t) + shift)) & 15u) - dm);
            }
        }
    } else if (wt == DT_Q5_0 || wt == DT_Q5_1) {
        let one = wt == DT_Q5_1;
        let b = row + c * select(22, 24, one);
        let qh = q_u32_at(b + select(2, 4, one));
        let qs = b + select(6, 8, one);
        let d = q_f16(b);
        let m = select(0.0, q_f16(b + 2), one);
        let bias = select(16, 0, one);
        for (var g = 0; g < 4; g++) {
            let v = q_u32_at(qs + 4 * g);
            for (var t = 0; t < 4; t++) {
                let byte = (v >> u32(8 * t)) & 0xffu;
                let e = 4 * g + t;
                let lo = i32((byte & 15u) | (((qh >> u32(e)) & 1u) << 4u)) - bias;
                let hi = i32((byte >> 4u) | (((qh >> u32(e + 16)) & 1u) << 4u)) - bias;
                sum += x_at(xo + e) * (d * f32(lo) + m);
                sum += x_at(xo + e + 16) * (d * f32(hi) + m);
            }
        }
    } else if (wt == DT_Q2_K) {
        let b = row + c / 8 * 84;
        let r = c % 8;
        let d = q_f16(b + 80);
        let dmin = q_f16(b + 82);
        let qs = b + 16 + 32 * (r / 4);
        let shift = u32(2 * (r % 4));
        for (var g = 0; g < 8; g++) {
            let sc = q_byte(b + 2 * r + g / 4);
            let dl = d * f32(sc & 15u);
            let ml = dmin * f32(sc >> 4u);
            let v = q_u32_at(qs + 4 * g);
            for (var t = 0; t < 4; t++) { sum += x_at(xo + 4 * g + t) * (dl * f32((v >> (u32(8 * t) + shift)) & 3u) - ml); }
        }
    } else if (wt == DT_Q3_K) {
        let b = row + c / 8 * 110;
        let r = c % 8;
        let d = q_f16(b + 108);
        let qs = b + 32 + 32 * (r / 4);
        let shift = u32(2 * (r % 4));
        for (var g = 0; g < 8; g++) {
            let dl = d * f32(q3_k_scale(b + 96, 2 * r + g / 4));
            let v = q_u32_at(qs + 4 * g);
            let h = q_u32_at(b + 4 * g);
            for (var t = 0; t < 4; t++) {
                let level = i32((v >> (u32(8 * t) + shift)) & 3u) - select(4, 0, ((h >> (u32(8 * t) + u32(r))) & 1u) != 0u);
                sum += x_at(xo + 4 * g + t) * (dl * f32(level));
            }
        }
    } else if (wt == DT_Q5_K) {
        let b = row + c / 8 * 176;
        let j = c % 8;
        let scales = q4_k_scales(b, j);
        let qs = b + 48 + 32 * (j / 2);
        let shift = u32(4 * (j % 2));
        for (var g = 0; g < 8; g++) {
            let v = q_u32_at(qs + 4 * g);
            let h = q_u32_at(b + 16 + 4 * g);
            for (var t = 0; t < 4; t++) {
                let q = ((v >> (u32(8 * t) + shift)) & 15u) | (((h >> (u32(8 * t) + u32(j))) & 1u) << 4u);
                sum += x_at(xo + 4 * g + t) * (scales.x * f32(q) - scales.y);
            }
        }
    } else if (wt == DT_IQ4_NL || wt == DT_IQ4_XS) {
        let xs4 = wt == DT_IQ4_XS;
        let b = select(row + c * 18, row + c / 8 * 136, xs4);
        let dl = select(q_f16(b), q_f16(b) * f32(iq4_xs_scale(b, c % 8)), xs4);
        let qs = select(b + 2, b + 8 + 16 * (c % 8), xs4);
        for (var g = 0; g < 4; g++) {
            let v = q_u32_at(qs + 4 * g);
            for (var t = 0; t < 4; t++) {
                let byte = (v >> u32(8 * t)) & 0xffu;
                let e = 4 * g + t;
                sum += x_at(xo + e) * (dl * f32(iq4_value(i32(byte & 15u))));
                sum += x_at(xo + e + 16) * (dl * f32(iq4_value(i32(byte >> 4u))));
            }
        }
    } else {                                             // Q6_K
        let k = q6_k_chunk(row, c);
        for (var g = 0; g < 8; g++) {
            let vl = q_u32_at(k.lo + 4 * g);
            let vh = q_u32_at(k.hi + 4 * g);
            let ds = select(k.ds1, k.ds0, g < 4);
            for (var t = 0; t < 4; t++) {
                let q = i32(((vl >> (u32(8 * t) + k.lo_shift)) & 15u) | (((vh >> (u32(8 * t) + k.hi_shift)) & 3u) << 4u)) - 32;
                sum += x_at(xo + 4 * g + t) * (ds * f32(q));
            }
        }
    }
    return sum;
}

//@kernel qgemv
struct Args { gx: i32, gy: i32, wt: i32, M: i32, N: i32, K: i32, x_off: i32, ldx: i32, w_off: i32, ldw: i32,
              o_off: i32, ldo: i32 }

const QGEMV_LANES: i32 = 32;
var<workgroup> part: array<f32, RWG>;

// out[m, n] = sum_k x[m, k] w[n, k], w quantized (rows ldw bytes apart from
// w_off), for a few rows of x (token generation): QGEMV_LANES invocations
// per output column, lane l taking chunks l, l + 32, ..., a column's
// partial sums meeting in workgroup memory; row by row.
@compute @workgroup_size(RWG)
fn qgemv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = i32(lid3.x);
    let lane = lid % QGEMV_LANES;
    let j = group_id(wid, nwg) * (i32(RWG) / QGEMV_LANES) + lid / QGEMV_LANES;
    let row = A.w_off + j * A.ldw;
    for (var m = 0; m < A.M; m++) {                      // every invocation reaches every barrier
        var acc = 0.0;
        for (var c = lane; j < A.N && c < A.K / 32; c += QGEMV_LANES) {
            acc += q_dot32(A.wt, row, c, A.x_off + m * A.ldx + c * 32);
        }
        part[lid] = acc;
        workgroupBarrier();
        for (var s = QGEMV_LANES / 2; s > 0; s /= 2) {
            if (lane < s) { part[lid] += part[lid + s]; }
            workgroupBarrier();
        }
        if (lane == 0 && j < A.N) { b_out_put(A.o_off + m * A.ldo + j, 0u, bitcast<u32>(part[lid])); }
        workgroupBarrier();
    }
}

//@kernel qmatmul
struct Args { gx: i32, gy: i32, wt: i32, M: i32, N: i32, K: i32, x_off: i32, ldx: i32, w_off: i32, ldw: i32,
              o_off: i32, ldo: i32 }

// For many rows (a prompt), and every row count on a CPU adapter: one
// invocation per output, outputs laid flat over the (N / TS) x (M / TS)
// workgroups plan.c dispatches (so one activation row fills them too),
// decoding its weight row's chunks into the sum. No workgroup memory and
// no barrier (llvmpipe pays dearly for each); each chunk is decoded once
// per activation row.
@compute @workgroup_size(TS, TS)
fn qmatmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_id) l: vec3<u32>) {
    let ts = i32(TS);
    let g = i32(wid.z * nwg.y + wid.y) * i32(nwg.x) + i32(wid.x);
    let id = (g * ts + i32(l.y)) * ts + i32(l.x);
    if (id >= A.M * A.N) { return; }
    let i = id / A.N;
    let j = id % A.N;
    var acc = 0.0;
    let row = A.w_off + j * A.ldw;
    let xo = A.x_off + i * A.ldx;
    for (var c = 0; c < A.K / 32; c++) { acc += q_dot32(A.wt, row, c, xo + c * 32); }
    b_out_put(A.o_off + i * A.ldo + j, 0u, bitcast<u32>(acc));
}
