/* The Python package's hot path in C: the Array type's storage and the calls
 * a program makes most (x + y, x * 2.0, x[1:9:2], x.shape, freeing an
 * array), without ctypes in each call.
 *
 * Built for CPython's stable ABI (Py_LIMITED_API 3.9: one binary for every
 * CPython from 3.9) and loaded by the package through ctypes.PyDLL, like the
 * DLPack capsule destructor beside it: nothing links libpython, and the
 * library's functions come as addresses from the package's ctypes handle, so
 * this module does not link libtensorframe either.
 *
 * tf_py_native_init() makes ArrayBase, the base of tensorframe.Array: it
 * holds the tensor handle, releases it when the array dies, and answers
 * + - * / @ and basic indexing itself when the operands are plain (two arrays
 * of one dtype, or an array and a Python number it takes as is; an integer,
 * or slices of positive step). Everything else - and any call the library
 * refuses - goes to the package's Python implementation, which raises the
 * error the library gave, so the two paths cannot disagree on a result.
 */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include "tensorframe/tensorframe.h"

/* ---- the library, by address ---- */

typedef tf_status (*binary_fn)(const tf_tensor *, const tf_tensor *, tf_tensor **);
static struct {
    binary_fn add, sub, mul, div, matmul;
    tf_status (*slice)(const tf_tensor *, int, int64_t, int64_t, int64_t, tf_tensor **);
    tf_status (*squeeze)(const tf_tensor *, int, tf_tensor **);
    tf_status (*scalar)(tf_device *, tf_dtype, double, tf_tensor **);
    void (*release)(tf_tensor *);
    tf_dtype (*dtype)(const tf_tensor *);
    int (*ndim)(const tf_tensor *);
    const int64_t *(*shape)(const tf_tensor *);
    int64_t (*numel)(const tf_tensor *);
    tf_device *(*device)(const tf_tensor *);
    tf_status (*reduce[4])(const tf_tensor *, int, bool, tf_tensor **);   /* sum, prod, max, min */
    tf_status (*from_dlpack)(void *managed, tf_tensor **);                /* versioned, then legacy */
    tf_status (*from_dlpack_legacy)(void *managed, tf_tensor **);
} lib;

/* Elements past which a call lets other Python threads run (releasing the
 * GIL costs more than a tiny op). */
#define GIL_FREE_ELEMENTS (1 << 15)

typedef struct {
    PyObject_HEAD
    tf_tensor *h;
} ArrayObject;

static PyTypeObject *base_type;      /* ArrayBase */
static PyObject *array_class;        /* tensorframe.Array: what results are made as */
static PyObject *dtypes;             /* tuple: DType by the library's code */
static PyObject *slow_ops[5][2];     /* the Python op and reflected op, per operator */
static PyObject *slow_index;         /* _index(x, key) */
static PyObject *legacy_producers;   /* set: types whose __dlpack__ takes no keywords */
static PyObject *slow_from_dlpack;   /* the package's from_dlpack, for every other case */
/* __dlpack__(max_version=(1, 0)), made once: the name, no positional
 * arguments and the keywords (a dict built per call cost 60 ns) */
static PyObject *dlpack_name, *no_args, *versioned_kw;

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MATMUL, N_OPS };

static bool is_array(PyObject *o) { return base_type && PyObject_TypeCheck(o, base_type); }
static tf_tensor *handle(PyObject *o) { return ((ArrayObject *)o)->h; }

/* A new tensorframe.Array owning h (released here if that fails). */
static PyObject *wrap(tf_tensor *h) {
    PyTypeObject *cls = (PyTypeObject *)array_class;
    allocfunc alloc = cls ? (allocfunc)PyType_GetSlot(cls, Py_tp_alloc) : NULL;
    PyObject *o = alloc ? alloc(cls, 0) : NULL;
    if (!o) {
        lib.release(h);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "tensorframe._native: the package did not configure its array class");
        return NULL;
    }
    ((ArrayObject *)o)->h = h;
    return o;
}

/* ---- ArrayBase ---- */

static void array_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    tf_tensor *h = handle(self);
    ((ArrayObject *)self)->h = NULL;
    if (h) lib.release(h);
    freefunc free_fn = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    free_fn(self);
    Py_DECREF(tp);                   /* a heap type's instances hold a reference to it */
}

static PyObject *get_h(PyObject *self, void *closure) {
    (void)closure;
    if (!handle(self)) Py_RETURN_NONE;
    return PyLong_FromVoidPtr(handle(self));
}

/* An array whose tensor is gone: the Python class's message. */
static bool released(PyObject *self) {
    if (handle(self)) return false;
    PyErr_SetString(PyExc_ValueError, "tensorframe: this array was released (its tensor is gone); use another array");
    return true;
}

static PyObject *get_ndim(PyObject *self, void *closure) {
    (void)closure;
    return released(self) ? NULL : PyLong_FromLong(lib.ndim(handle(self)));
}

static PyObject *get_shape(PyObject *self, void *closure) {
    (void)closure;
    if (released(self)) return NULL;
    int n = lib.ndim(handle(self));
    const int64_t *s = lib.shape(handle(self));
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *v = PyLong_FromLongLong(s[i]);
        if (!v || PyTuple_SetItem(t, i, v) < 0) {
            Py_DECREF(t);
            return NULL;
        }
    }
    return t;
}

static PyObject *get_size(PyObject *self, void *closure) {
    (void)closure;
    return released(self) ? NULL : PyLong_FromLongLong(lib.numel(handle(self)));
}

static PyObject *get_dtype(PyObject *self, void *closure) {
    (void)closure;
    if (released(self)) return NULL;
    PyObject *d = PySequence_GetItem(dtypes, (Py_ssize_t)lib.dtype(handle(self)));
    return d;                        /* a new reference (or NULL with the error set) */
}

static PyGetSetDef array_getset[] = {
    {"_h", get_h, NULL, "the tensor handle (an int): read-only, so no Python code can make it dangle", NULL},
    {"ndim", get_ndim, NULL, NULL, NULL},
    {"shape", get_shape, NULL, NULL, NULL},
    {"size", get_size, NULL, NULL, NULL},
    {"dtype", get_dtype, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- + - * / ---- */

static bool is_float_dtype(tf_dtype d) { return d == TF_F32 || d == TF_F64 || d == TF_F16 || d == TF_BF16; }

/* A Python number the array's dtype takes as is (the array API's scalar
 * rule): a float or an exact int for float arrays, an int within range for
 * integer arrays. Anything else (bool arrays, big ints, ...) is the Python
 * path's to judge. */
static bool plain_scalar(PyObject *v, tf_dtype dt, double *out) {
    if (PyBool_Check(v)) return false;
    if (PyFloat_Check(v)) {
        if (!is_float_dtype(dt)) return false;
        *out = PyFloat_AsDouble(v);
        return true;
    }
    if (!PyLong_Check(v)) return false;
    int overflow = 0;
    long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (i == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
    }
    long long lo, hi;
    switch (dt) {
    case TF_I8: lo = -128, hi = 127; break;
    case TF_U8: lo = 0, hi = 255; break;
    case TF_I32: lo = INT32_MIN, hi = INT32_MAX; break;
    case TF_BOOL: return false;
    default: lo = -(1ll << 53), hi = 1ll << 53; break;   /* exact through the double tf_scalar takes */
    }
    if (i < lo || i > hi) return false;
    *out = (double)i;
    return true;
}

static tf_status run_binary(binary_fn fn, const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    tf_status s;
    if (lib.numel(a) + lib.numel(b) >= GIL_FREE_ELEMENTS) {
        Py_BEGIN_ALLOW_THREADS
        s = fn(a, b, out);
        Py_END_ALLOW_THREADS
    } else {
        s = fn(a, b, out);
    }
    return s;
}

/* The library's result, or NULL with nothing set: the slow path decides. */
static PyObject *fast_binary(int op, PyObject *x, PyObject *y) {
    static const binary_fn *fns[N_OPS] = {&lib.add, &lib.sub, &lib.mul, &lib.div, &lib.matmul};
    binary_fn fn = *fns[op];
    tf_tensor *out = NULL, *tmp = NULL;
    tf_status s = TF_ERR_INVALID_ARGUMENT;
    double v;
    if (is_array(x) && is_array(y)) {
        if (handle(x) && handle(y) && lib.dtype(handle(x)) == lib.dtype(handle(y)))
            s = run_binary(fn, handle(x), handle(y), &out);
    } else if (op == OP_MATMUL) {
        /* a product takes arrays only: the Python path says so */
    } else if (is_array(x) && handle(x) && plain_scalar(y, lib.dtype(handle(x)), &v)) {
        s = lib.scalar(lib.device(handle(x)), lib.dtype(handle(x)), v, &tmp);
        if (s == TF_OK) s = run_binary(fn, handle(x), tmp, &out);
    } else if (is_array(y) && handle(y) && plain_scalar(x, lib.dtype(handle(y)), &v)) {
        s = lib.scalar(lib.device(handle(y)), lib.dtype(handle(y)), v, &tmp);
        if (s == TF_OK) s = run_binary(fn, tmp, handle(y), &out);
    }
    if (tmp) lib.release(tmp);
    return s == TF_OK ? wrap(out) : NULL;
}

static PyObject *binary(int op, PyObject *x, PyObject *y) {
    PyObject *r = fast_binary(op, x, y);
    if (r || PyErr_Occurred()) return r;
    if (is_array(x)) return PyObject_CallFunctionObjArgs(slow_ops[op][0], x, y, NULL);
    return PyObject_CallFunctionObjArgs(slow_ops[op][1], y, x, NULL);      /* x op array: the reflected form */
}

static PyObject *nb_add(PyObject *x, PyObject *y) { return binary(OP_ADD, x, y); }
static PyObject *nb_sub(PyObject *x, PyObject *y) { return binary(OP_SUB, x, y); }
static PyObject *nb_mul(PyObject *x, PyObject *y) { return binary(OP_MUL, x, y); }
static PyObject *nb_div(PyObject *x, PyObject *y) { return binary(OP_DIV, x, y); }
static PyObject *nb_matmul(PyObject *x, PyObject *y) { return binary(OP_MATMUL, x, y); }

/* ---- basic indexing ---- */

/* Axis `axis` of *t narrowed by a slice of positive step, or NULL-status
 * failure; *t is replaced (the old one released) when it changes. */
static bool slice_axis(tf_tensor **t, int axis, PyObject *key) {
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0) {
        PyErr_Clear();
        return false;
    }
    if (step <= 0) return false;                     /* a negative step copies: the Python path's */
    int64_t n = lib.shape(*t)[axis];
    PySlice_AdjustIndices((Py_ssize_t)n, &start, &stop, step);
    if (start == 0 && stop == n && step == 1) return true;
    tf_tensor *v = NULL;
    if (lib.slice(*t, axis, start, stop > start ? stop : start, step, &v) != TF_OK) return false;
    lib.release(*t);
    *t = v;
    return true;
}

static bool index_axis(tf_tensor **t, int axis, PyObject *key) {
    int overflow = 0;
    long long i = PyLong_AsLongLongAndOverflow(key, &overflow);
    if (overflow || (i == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
    }
    int64_t n = lib.shape(*t)[axis];
    if (i < -n || i >= n) return false;              /* the Python path says which index and axis */
    if (i < 0) i += n;
    tf_tensor *s = NULL, *v = NULL;
    if (lib.slice(*t, axis, i, i + 1, 1, &s) != TF_OK) return false;
    tf_status st = lib.squeeze(s, axis, &v);
    lib.release(s);
    if (st != TF_OK) return false;
    lib.release(*t);
    *t = v;
    return true;
}

/* A view for ints and positive-step slices, one per leading axis; NULL with
 * nothing set for anything else. */
static PyObject *fast_index(PyObject *self, PyObject *key) {
    tf_tensor *x = handle(self);
    int ndim = lib.ndim(x);
    bool tuple = PyTuple_Check(key);
    Py_ssize_t nkeys = tuple ? PyTuple_Size(key) : 1;
    if (nkeys > ndim) return NULL;
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *item = tuple ? PyTuple_GetItem(key, k) : key;
        if (!PySlice_Check(item) && !(PyLong_Check(item) && !PyBool_Check(item))) return NULL;
    }
    tf_tensor *t = NULL;
    if (lib.slice(x, 0, 0, ndim ? lib.shape(x)[0] : 0, 1, &t) != TF_OK) return NULL;   /* a new reference */
    int axis = 0;
    bool ok = true;
    for (Py_ssize_t k = 0; ok && k < nkeys; k++) {
        PyObject *item = tuple ? PyTuple_GetItem(key, k) : key;
        if (PySlice_Check(item)) ok = slice_axis(&t, axis++, item);
        else ok = index_axis(&t, axis, item);        /* the axis goes: the next key is for the same position */
    }
    if (!ok) {
        lib.release(t);
        return NULL;
    }
    return wrap(t);
}

static PyObject *mp_subscript(PyObject *self, PyObject *key) {
    PyObject *r = handle(self) && lib.ndim(handle(self)) > 0 ? fast_index(self, key) : NULL;
    if (r || PyErr_Occurred()) return r;
    return PyObject_CallFunctionObjArgs(slow_index, self, key, NULL);
}

/* ---- reductions ---- */

#define ALL_AXES (-1000)                 /* TF_ALL_AXES */

/* reduce(which, x, axis, keepdims): sum, prod, max or min (0-3) over one
 * axis (an int) or all (None); None back when the library refuses, so that
 * the Python path raises its error. */
static PyObject *py_reduce(PyObject *module, PyObject *args) {
    (void)module;
    int which, keepdims;
    PyObject *x, *axis;
    if (!PyArg_ParseTuple(args, "iOOp", &which, &x, &axis, &keepdims)) return NULL;
    if (which < 0 || which > 3 || !is_array(x) || !handle(x)) Py_RETURN_NONE;
    int ax = ALL_AXES;
    if (axis != Py_None) {          /* a 0-d array's axis is the Python path's to judge */
        if (!PyLong_Check(axis) || PyBool_Check(axis) || lib.ndim(handle(x)) == 0) Py_RETURN_NONE;
        long v = PyLong_AsLong(axis);
        if ((v == -1 && PyErr_Occurred()) || v < -64 || v > 64) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        ax = (int)v;
    }
    tf_tensor *out = NULL;
    tf_status s;
    if (lib.numel(handle(x)) >= GIL_FREE_ELEMENTS) {
        Py_BEGIN_ALLOW_THREADS
        s = lib.reduce[which](handle(x), ax, keepdims != 0, &out);
        Py_END_ALLOW_THREADS
    } else {
        s = lib.reduce[which](handle(x), ax, keepdims != 0, &out);
    }
    if (s != TF_OK) Py_RETURN_NONE;
    return wrap(out);
}

/* ---- DLPack in ---- */

/* from_dlpack(x): an Array over the host memory of x's DLPack capsule, the
 * capsule marked used; None for anything else (device memory, a capsule
 * the library refuses, an error): the Python path judges and says why.
 * Only the call without device= or copy= comes here. */
static PyObject *py_from_dlpack(PyObject *module, PyObject *x) {
    (void)module;
    /* No __dlpack_device__ first: the library refuses a capsule of device
     * memory, and then the Python path asks and explains. */
    int legacy = legacy_producers ? PySet_Contains(legacy_producers, (PyObject *)Py_TYPE(x)) : 1;
    PyObject *capsule = NULL;
    if (legacy == 0 && dlpack_name && no_args && versioned_kw) {
        PyObject *method = PyObject_GetAttr(x, dlpack_name);
        if (method) capsule = PyObject_Call(method, no_args, versioned_kw);
        Py_XDECREF(method);
    } else if (legacy == 1) {
        capsule = PyObject_CallMethod(x, "__dlpack__", NULL);
    }
    if (!capsule) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    tf_tensor *out = NULL;
    tf_status s = TF_ERR_INVALID_ARGUMENT;
    const char *used = NULL;
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        s = lib.from_dlpack(PyCapsule_GetPointer(capsule, "dltensor_versioned"), &out);
        used = "used_dltensor_versioned";
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        s = lib.from_dlpack_legacy(PyCapsule_GetPointer(capsule, "dltensor"), &out);
        used = "used_dltensor";
    }
    if (s == TF_OK && PyCapsule_SetName(capsule, used) < 0) s = TF_ERR_INVALID_ARGUMENT;   /* cannot happen */
    Py_DECREF(capsule);                                  /* unused: its destructor gives the tensor back */
    PyErr_Clear();
    if (s != TF_OK) Py_RETURN_NONE;
    return wrap(out);
}

static PyType_Slot array_slots[] = {
    {Py_tp_doc, "tensorframe's array storage: the tensor handle and the hot calls (C)"},
    {Py_tp_dealloc, array_dealloc},
    {Py_tp_getset, array_getset},
    {Py_nb_add, nb_add},
    {Py_nb_subtract, nb_sub},
    {Py_nb_multiply, nb_mul},
    {Py_nb_true_divide, nb_div},
    {Py_nb_matrix_multiply, nb_matmul},
    {Py_mp_subscript, mp_subscript},
    {0, NULL},
};

static PyType_Spec array_spec = {
    "tensorframe._native.ArrayBase", sizeof(ArrayObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, array_slots,
};

/* ---- set-up, from the package ---- */

/* *slot = value (a new reference), the old one dropped (Py_XSETREF is not
 * in the limited API). */
static void replace_ref(PyObject **slot, PyObject *value) {
    PyObject *old = *slot;
    *slot = value;
    Py_XDECREF(old);
}

/* configure(array_class, dtypes, slow_ops, slow_index, legacy_producers):
 * what results are made as and where the general cases go. slow_ops is
 * ((add, radd), (sub, rsub), (mul, rmul), (truediv, rtruediv), (matmul, rmatmul));
 * legacy_producers the Python path's set of types whose __dlpack__ takes
 * no keywords (it adds to it; this reads it). */
static PyObject *configure(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *cls, *types, *ops, *index, *legacy;
    if (!PyArg_ParseTuple(args, "OOOOO", &cls, &types, &ops, &index, &legacy)) return NULL;
    if (!PySet_Check(legacy)) {
        PyErr_SetString(PyExc_TypeError, "configure: the legacy producers are a set");
        return NULL;
    }
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, base_type)) {
        PyErr_SetString(PyExc_TypeError, "configure: the array class must derive from ArrayBase");
        return NULL;
    }
    for (int i = 0; i < N_OPS; i++)
        for (int j = 0; j < 2; j++) {
            PyObject *pair = PySequence_GetItem(ops, i), *fn = pair ? PySequence_GetItem(pair, j) : NULL;
            Py_XDECREF(pair);
            if (!fn) return NULL;
            replace_ref(&slow_ops[i][j], fn);
        }
    Py_INCREF(cls);
    replace_ref(&array_class, cls);
    Py_INCREF(types);
    replace_ref(&dtypes, types);
    Py_INCREF(index);
    replace_ref(&slow_index, index);
    Py_INCREF(legacy);
    replace_ref(&legacy_producers, legacy);
    if (!dlpack_name) dlpack_name = PyUnicode_InternFromString("__dlpack__");
    if (!no_args) no_args = PyTuple_New(0);
    if (!versioned_kw) versioned_kw = Py_BuildValue("{s:(ii)}", "max_version", 1, 0);
    if (!dlpack_name || !no_args || !versioned_kw) return NULL;
    Py_RETURN_NONE;
}

/* wrap(handle): a new Array owning the tensor handle (an int). */
static PyObject *py_wrap(PyObject *module, PyObject *arg) {
    (void)module;
    void *p = PyLong_AsVoidPtr(arg);
    if (!p) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "wrap: a NULL tensor handle");
        return NULL;
    }
    return wrap(p);
}

/* tensorframe.from_dlpack itself: the host-memory import above for a plain
 * call, the package's Python function for the rest (devices, copies,
 * arrays, refusals: it raises the error). */
static PyObject *py_from_dlpack_entry(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"", "device", "copy", NULL};
    PyObject *x, *device = Py_None, *copy = Py_None;
    if (!kwargs && PyTuple_Size(args) == 1) x = PyTuple_GetItem(args, 0);      /* the plain call, unparsed */
    else if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OO:from_dlpack", names, &x, &device, &copy)) return NULL;
    if (device == Py_None && copy == Py_None && !is_array(x)) {
        PyObject *r = py_from_dlpack(module, x);
        if (r != Py_None || PyErr_Occurred()) return r;
        Py_DECREF(r);
    }
    if (!slow_from_dlpack) {
        PyErr_SetString(PyExc_RuntimeError, "from_dlpack: the package did not set its general path");
        return NULL;
    }
    return PyObject_Call(slow_from_dlpack, args, kwargs);
}

/* set_from_dlpack(fn): the package's general from_dlpack. */
static PyObject *py_set_from_dlpack(PyObject *module, PyObject *fn) {
    (void)module;
    Py_INCREF(fn);
    replace_ref(&slow_from_dlpack, fn);
    Py_RETURN_NONE;
}

static PyMethodDef functions[] = {
    {"configure", configure, METH_VARARGS, NULL},
    {"wrap", py_wrap, METH_O, NULL},
    {"reduce", py_reduce, METH_VARARGS, NULL},
    {"import_host", py_from_dlpack, METH_O, NULL},
    {"from_dlpack", (PyCFunction)(void (*)(void))py_from_dlpack_entry, METH_VARARGS | METH_KEYWORDS,
     "from_dlpack(x, /, *, device=None, copy=None)\n--\n\n"
     "An Array over the memory of anything with __dlpack__ (or a DLPack capsule): no copy for host memory, which "
     "tensorframe then holds until its last view is gone; BufferError when only a copy could do and copy=False, "
     "or when the producer's memory cannot be read here."},
    {"set_from_dlpack", py_set_from_dlpack, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

/* The entry point: addresses is a sequence of the library functions' addresses
 * in the order of `lib` above. Returns {"ArrayBase": type, "configure": fn,
 * "wrap": fn}. */
__attribute__((visibility("default"))) PyObject *tf_py_native_init(PyObject *addresses) {
    void **slots = (void **)&lib;
    Py_ssize_t n = (Py_ssize_t)(sizeof lib / sizeof(void *));
    if (PySequence_Size(addresses) != n) {
        PyErr_Format(PyExc_ValueError, "tf_py_native_init: %zd addresses expected", n);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PySequence_GetItem(addresses, i);
        slots[i] = a ? PyLong_AsVoidPtr(a) : NULL;
        Py_XDECREF(a);
        if (!slots[i]) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "tf_py_native_init: address %zd is NULL", i);
            return NULL;
        }
    }
    if (!base_type) base_type = (PyTypeObject *)PyType_FromSpec(&array_spec);
    if (!base_type) return NULL;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    bool ok = PyDict_SetItemString(d, "ArrayBase", (PyObject *)base_type) == 0;
    for (PyMethodDef *m = functions; ok && m->ml_name; m++) {
        PyObject *f = PyCFunction_NewEx(m, NULL, NULL);
        ok = f && PyDict_SetItemString(d, m->ml_name, f) == 0;
        Py_XDECREF(f);
    }
    if (!ok) Py_CLEAR(d);
    return d;
}
