"""Dtypes: the C library's, under the array API's names, with the Python
scalar rules and host formats the package needs."""
import builtins


class DType:
    """A tensorframe dtype: compare with ==, name as the array API spells it."""
    __slots__ = ("name", "code", "short", "kind", "itemsize", "format")

    def __init__(self, name, code, short, kind, itemsize, fmt):
        self.name = name          # "float32"
        self.code = code          # the C enum value (ABI)
        self.short = short        # "f32", as the C library names it
        self.kind = kind          # "bool", "signed", "unsigned", "float", "complex", "quantized"
        self.itemsize = itemsize
        self.format = fmt         # struct format of one element (of each part, complex) on the host ("" for none)

    def __repr__(self):
        return "tensorframe." + self.name

    __str__ = __repr__

    def __eq__(self, other):
        return isinstance(other, DType) and other.code == self.code

    def __hash__(self):
        return hash(("tensorframe.dtype", self.code))

    @property
    def is_float(self):
        return self.kind == "float"

    @property
    def is_integer(self):
        return self.kind in ("signed", "unsigned")

    @property
    def is_complex(self):
        return self.kind == "complex"

    @property
    def is_inexact(self):
        """Real or complex floating point (the math functions' domain)."""
        return self.kind in ("float", "complex")


# Order = the C enum (tf_dtype), which is ABI.
float32 = DType("float32", 0, "f32", "float", 4, "f")
float64 = DType("float64", 1, "f64", "float", 8, "d")
float16 = DType("float16", 2, "f16", "float", 2, "e")
bfloat16 = DType("bfloat16", 3, "bf16", "float", 2, "H")   # read as raw bits, widened by hand
int8 = DType("int8", 4, "i8", "signed", 1, "b")
int32 = DType("int32", 5, "i32", "signed", 4, "i")
int64 = DType("int64", 6, "i64", "signed", 8, "q")
uint8 = DType("uint8", 7, "u8", "unsigned", 1, "B")
bool = DType("bool", 8, "bool", "bool", 1, "?")  # noqa: A001 - the array API's name
q4_0 = DType("q4_0", 9, "q4_0", "quantized", 0, "")
q4_1 = DType("q4_1", 10, "q4_1", "quantized", 0, "")
q8_0 = DType("q8_0", 11, "q8_0", "quantized", 0, "")
q4_k = DType("q4_k", 12, "q4_k", "quantized", 0, "")
q6_k = DType("q6_k", 13, "q6_k", "quantized", 0, "")
q5_0 = DType("q5_0", 14, "q5_0", "quantized", 0, "")
q5_1 = DType("q5_1", 15, "q5_1", "quantized", 0, "")
q2_k = DType("q2_k", 16, "q2_k", "quantized", 0, "")
q3_k = DType("q3_k", 17, "q3_k", "quantized", 0, "")
q5_k = DType("q5_k", 18, "q5_k", "quantized", 0, "")
iq4_nl = DType("iq4_nl", 19, "iq4_nl", "quantized", 0, "")
iq4_xs = DType("iq4_xs", 20, "iq4_xs", "quantized", 0, "")
complex64 = DType("complex64", 21, "c64", "complex", 8, "f")      # format: each part's
complex128 = DType("complex128", 22, "c128", "complex", 16, "d")

ALL = (float32, float64, float16, bfloat16, int8, int32, int64, uint8, bool, q4_0, q4_1, q8_0, q4_k, q6_k,
       q5_0, q5_1, q2_k, q3_k, q5_k, iq4_nl, iq4_xs, complex64, complex128)
ELEMENT = ALL[:9] + (complex64, complex128)
BY_CODE = {d.code: d for d in ALL}
BY_NAME = {}
for _d in ALL:
    BY_NAME[_d.name] = _d
    BY_NAME[_d.short] = _d

default_float = float32
default_complex = complex64          # the default float's precision, as the standard asks
default_int = int64
default_index = int64


def complex_of(d):
    """The complex dtype with parts of real dtype d (float64 -> complex128,
    the other real dtypes -> complex64); a complex d itself."""
    return d if d.is_complex else complex128 if d == float64 else complex64


def real_of(d):
    """The dtype of a complex dtype's parts; a real d itself."""
    return float32 if d == complex64 else float64 if d == complex128 else d


def dtype_of(x):
    """A DType from a DType, a name ("float32", "f32") or anything with a
    .name or str() that is one (numpy dtypes, numpy scalar types)."""
    if isinstance(x, DType):
        return x
    if x is None:
        raise TypeError("dtype is None")
    name = x if isinstance(x, str) else getattr(x, "name", None) or getattr(x, "__name__", None) or str(x)
    if name in ("float", "builtins.float"):
        return float64
    if name in ("complex", "builtins.complex"):
        return complex128
    if name in ("int",):
        return int64
    if name in BY_NAME:
        return BY_NAME[name]
    raise TypeError("tensorframe has no dtype %r" % (x,))


def check_int_fits(value, dtype):
    """NumPy 2's rule for Python integers: one outside an integer dtype's
    range is OverflowError, never wrapped or saturated."""
    if not dtype.is_integer or isinstance(value, builtins.bool) or not isinstance(value, int):
        return
    bits = dtype.itemsize * 8
    lo, hi = (0, (1 << bits) - 1) if dtype.kind == "unsigned" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if not lo <= value <= hi:
        raise OverflowError("Python integer %d out of bounds for %s" % (value, dtype.name))


def scalar_dtype(value, array_dtype):
    """The dtype a Python scalar takes beside an array (the array API's
    rule: a scalar of the array's kind takes the array's dtype)."""
    if isinstance(value, builtins.bool):
        return array_dtype
    if isinstance(value, int):
        if array_dtype.kind == "bool":
            return default_int
        return array_dtype
    if isinstance(value, float):
        return array_dtype if array_dtype.is_inexact else default_float
    if isinstance(value, complex):
        if array_dtype.is_inexact:                   # a float array's precision, complex
            return complex_of(array_dtype)
        raise TypeError("tensorframe: a complex scalar takes part with floating-point arrays only, not %s"
                        % array_dtype.name)
    raise TypeError("tensorframe: %s is not a Python scalar (bool, int, float, complex) or an array"
                    % type(value).__name__)
