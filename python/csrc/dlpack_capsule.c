/* The destructor of the DLPack capsules tensorframe's Python package makes.
 *
 * It is C, not a ctypes callback, because CPython runs a capsule destructor
 * wherever the capsule dies - often while an exception is being raised (a
 * consumer that refused the tensor) - and Python code cannot run then
 * without clobbering that exception. It gives back a managed tensor that no
 * consumer took: a consumed capsule has been renamed "used_...".
 *
 * The few CPython calls are declared here rather than taken from Python.h:
 * they are the stable ABI, and this module is loaded into a running
 * interpreter, which provides them (nothing links libpython). */
#include <stddef.h>

#include "tensorframe/dlpack.h"

typedef struct _object PyObject;
extern int PyCapsule_IsValid(PyObject *capsule, const char *name);
extern void *PyCapsule_GetPointer(PyObject *capsule, const char *name);
extern void PyErr_Fetch(PyObject **type, PyObject **value, PyObject **traceback);
extern void PyErr_Restore(PyObject *type, PyObject *value, PyObject *traceback);

__attribute__((visibility("default"))) void tf_py_dlpack_capsule_destructor(PyObject *capsule) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);          /* the exception in flight, if any, survives */
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        if (m && m->deleter) m->deleter(m);
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
        if (m && m->deleter) m->deleter(m);
    }
    PyErr_Restore(type, value, traceback);
}
