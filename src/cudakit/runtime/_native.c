/* cudakit's native launcher: packs Python ints/floats into a kernel's parameter slots and calls
 * cuLaunchKernel, with no per-argument Python objects in between.
 *
 * Built on first use by cudakit/runtime/native.py with the system C compiler (no CUDA headers or
 * libraries needed: the address of cuLaunchKernel comes from the already-loaded libcuda through
 * set_launch). Every launch of a cudakit kernel through CuPy's typed binding costs about 3.7 us of
 * host time on an H100 host; the driver call itself is most of what remains here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define CK_MAX_PARAMS 64

typedef int (*ck_launch_fn)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned smem, void* stream, void** params, void** extra);

static ck_launch_fn ck_launch = NULL;

static PyObject* set_launch(PyObject* self, PyObject* addr) {
  void* p = PyLong_AsVoidPtr(addr);
  if (p == NULL && PyErr_Occurred()) return NULL;
  ck_launch = (ck_launch_fn)p;
  Py_RETURN_NONE;
}

/* One parameter into its 8-byte slot. Codes: 'Q' 8-byte integer (pointer, int64 or uint64; a
 * negative int is stored as its two's complement), 'i' 4-byte integer, 'h' 2-byte integer (the bit
 * pattern of a 16-bit float), 'f' float32, 'd' float64. */
static int ck_pack(char code, PyObject* o, uint64_t* slot) {
  *slot = 0;
  switch (code) {
    case 'Q': {
      unsigned long long v = PyLong_AsUnsignedLongLongMask(o);
      if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
      memcpy(slot, &v, 8);
      return 0;
    }
    case 'i': case 'h': {
      unsigned long long v = PyLong_AsUnsignedLongLongMask(o);
      if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
      if (code == 'i') { uint32_t w = (uint32_t)v; memcpy(slot, &w, 4); }
      else { uint16_t w = (uint16_t)v; memcpy(slot, &w, 2); }
      return 0;
    }
    case 'f': case 'd': {
      double d = PyFloat_Check(o) ? PyFloat_AS_DOUBLE(o) : PyFloat_AsDouble(o);
      if (d == -1.0 && PyErr_Occurred()) return -1;
      if (code == 'f') { float f = (float)d; memcpy(slot, &f, 4); }
      else memcpy(slot, &d, 8);
      return 0;
    }
    default:
      PyErr_Format(PyExc_ValueError, "unknown parameter code %c (expected one of Q, i, h, f, d)", code);
      return -1;
  }
}

/* An unsigned int from an int or any object with __index__ (a NumPy integer). */
static int ck_uint(PyObject* o, unsigned* out) {
  PyObject* i = PyNumber_Index(o);
  if (i == NULL) return -1;
  unsigned long v = PyLong_AsUnsignedLong(i);
  Py_DECREF(i);
  if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
  if (v > 0xffffffffUL) {
    PyErr_Format(PyExc_OverflowError, "launch dimension %lu does not fit in 32 bits", v);
    return -1;
  }
  *out = (unsigned)v;
  return 0;
}

/* A pointer-sized value from an int or any object with __index__. */
static int ck_ptr(PyObject* o, void** out) {
  PyObject* i = PyNumber_Index(o);
  if (i == NULL) return -1;
  *out = PyLong_AsVoidPtr(i);
  Py_DECREF(i);
  return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
}

/* launch(func, gx, gy, gz, bx, by, bz, smem, stream, codes, *values) -> CUresult (0: queued).
 * codes: bytes, one code per value. */
static PyObject* launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  unsigned dims[7];
  if (nargs < 10) {
    PyErr_SetString(PyExc_TypeError, "launch(func, gx, gy, gz, bx, by, bz, smem, stream, codes, *values)");
    return NULL;
  }
  if (ck_launch == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "set_launch() was not called");
    return NULL;
  }
  void* func;
  if (ck_ptr(args[0], &func) < 0) return NULL;
  if (func == NULL) {
    PyErr_SetString(PyExc_ValueError, "func is a null CUfunction");
    return NULL;
  }
  for (int i = 0; i < 7; ++i)
    if (ck_uint(args[1 + i], &dims[i]) < 0) return NULL;
  void* stream;
  if (ck_ptr(args[8], &stream) < 0) return NULL;
  if (!PyBytes_Check(args[9])) {
    PyErr_SetString(PyExc_TypeError, "codes must be bytes");
    return NULL;
  }
  const char* codes = PyBytes_AS_STRING(args[9]);
  const Py_ssize_t n = nargs - 10;
  if (PyBytes_GET_SIZE(args[9]) != n) {
    PyErr_Format(PyExc_TypeError, "%zd parameter codes for %zd values", PyBytes_GET_SIZE(args[9]), n);
    return NULL;
  }
  if (n > CK_MAX_PARAMS) {
    PyErr_Format(PyExc_ValueError, "at most %d kernel parameters (got %zd)", CK_MAX_PARAMS, n);
    return NULL;
  }
  uint64_t slots[CK_MAX_PARAMS];
  void* ptrs[CK_MAX_PARAMS];
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (ck_pack(codes[i], args[10 + i], &slots[i]) < 0) return NULL;
    ptrs[i] = &slots[i];
  }
  int r = ck_launch(func, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], stream, ptrs, NULL);
  return PyLong_FromLong(r);
}

static PyMethodDef methods[] = {
    {"set_launch", (PyCFunction)set_launch, METH_O, "set_launch(address of cuLaunchKernel)"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(func, gx, gy, gz, bx, by, bz, smem, stream, codes, *values) -> CUresult"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cudakit_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cudakit_native(void) { return PyModule_Create(&module); }
