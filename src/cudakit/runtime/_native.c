/* cudakit's native launcher: packs Python ints/floats into a kernel's parameter slots and calls
 * cuLaunchKernel, with no per-argument Python objects in between. Two more host-time-critical pieces
 * live here for the same reason: the counting allocator in front of CuPy's pool (mem_*) and the
 * dispatch of a tiny same-shape elementwise op (ew).
 *
 * Built on first use by cudakit/runtime/native.py with the system C compiler (no CUDA headers or
 * libraries needed: the address of cuLaunchKernel comes from the already-loaded libcuda through
 * set_launch). Every launch of a cudakit kernel through CuPy's typed binding costs about 3.7 us of
 * host time on an H100 host; the driver call itself is most of what remains here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CK_MAX_PARAMS 64

typedef int (*ck_launch_fn)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned smem, void* stream, void** params, void** extra);

static ck_launch_fn ck_launch = NULL;        /* every launch below: ck_launch_any once set_launch ran */
static ck_launch_fn ck_launch_plain = NULL;  /* cuLaunchKernel */

/* ---- programmatic dependent launch (PDL) ------------------------------------------------------
 * A kernel registered here (pdl_register: a Triton kernel compiled with its PDL constexpr set,
 * which waits on griddepcontrol.wait before touching global memory) is launched through
 * cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so that its launch
 * and prologue overlap the previous kernel's tail in the stream instead of following its
 * completion. The layouts are cuda.h's CUlaunchAttribute and CUlaunchConfig (CUDA 12+). */
typedef struct { int id; char pad[4]; char value[64]; } ck_attr;
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, smem;
  void* stream;
  ck_attr* attrs;
  unsigned n_attrs;
} ck_config;
/* (cuda.h's offsets on a 64-bit host: a mismatch fails the build, not a launch) */
typedef char ck_config_layout[(offsetof(ck_config, stream) == 32 && offsetof(ck_config, attrs) == 40 &&
                               offsetof(ck_config, n_attrs) == 48 && offsetof(ck_attr, value) == 8 &&
                               sizeof(ck_attr) == 72) ? 1 : -1];
typedef int (*ck_launchex_fn)(const ck_config* config, void* f, void** params, void** extra);
static ck_launchex_fn ck_launch_ex = NULL;   /* cuLaunchKernelEx (NULL: this driver has none) */

#define CK_PDL_SLOTS 4096                    /* an open-addressing set of CUfunctions, at most half full */
static void* ck_pdl[CK_PDL_SLOTS];
static int ck_pdl_count = 0;

static size_t ck_pdl_slot(void* f) { return ((uintptr_t)f >> 4) & (CK_PDL_SLOTS - 1); }

static int ck_pdl_has(void* f) {
  for (size_t h = ck_pdl_slot(f);; h = (h + 1) & (CK_PDL_SLOTS - 1)) {
    void* e = ck_pdl[h];
    if (e == f) return 1;
    if (e == NULL) return 0;
  }
}

static int ck_launch_any(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned smem, void* stream, void** params, void** extra) {
  if (ck_pdl_count && ck_pdl_has(f)) {
    ck_attr a;
    memset(&a, 0, sizeof a);
    a.id = 6;   /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
    int allowed = 1;
    memcpy(a.value, &allowed, sizeof allowed);
    ck_config c = {gx, gy, gz, bx, by, bz, smem, stream, &a, 1};
    return ck_launch_ex(&c, f, params, extra);
  }
  return ck_launch_plain(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra);
}

/* A nonzero address from a Python int, else NULL with ValueError "<fn> needs <what> (got 0)". */
static void* ck_address(PyObject* addr, const char* fn, const char* what) {
  void* p = PyLong_AsVoidPtr(addr);
  if (p == NULL && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s needs %s (got 0)", fn, what);
  return p;
}

static PyObject* set_launch(PyObject* self, PyObject* addr) {
  void* p = ck_address(addr, "set_launch", "the address of cuLaunchKernel");
  if (p == NULL) return NULL;
  ck_launch_plain = (ck_launch_fn)p;
  ck_launch = ck_launch_any;
  Py_RETURN_NONE;
}

/* set_launch_ex(address of cuLaunchKernelEx): what pdl_register needs */
static PyObject* set_launch_ex(PyObject* self, PyObject* addr) {
  void* p = ck_address(addr, "set_launch_ex", "the address of cuLaunchKernelEx");
  if (p == NULL) return NULL;
  ck_launch_ex = (ck_launchex_fn)p;
  Py_RETURN_NONE;
}

/* pdl_register(CUfunction address) -> bool: whether its launches now carry the PDL attribute
 * (False: no cuLaunchKernelEx, or the set is full; it then launches as any other kernel) */
static PyObject* pdl_register(PyObject* self, PyObject* addr) {
  void* f = ck_address(addr, "pdl_register", "a CUfunction");
  if (f == NULL) return NULL;
  if (ck_launch_ex == NULL) Py_RETURN_FALSE;
  if (ck_pdl_has(f)) Py_RETURN_TRUE;
  if (ck_pdl_count >= CK_PDL_SLOTS / 2) Py_RETURN_FALSE;
  size_t h = ck_pdl_slot(f);
  while (ck_pdl[h] != NULL) h = (h + 1) & (CK_PDL_SLOTS - 1);
  ck_pdl[h] = f;   /* (the slot before the count: a launch reading the count sees a whole entry) */
  ck_pdl_count++;
  Py_RETURN_TRUE;
}

/* pdl_has(CUfunction address) -> bool: whether its launches carry the PDL attribute */
static PyObject* pdl_has(PyObject* self, PyObject* addr) {
  void* f = ck_address(addr, "pdl_has", "a CUfunction");
  if (f == NULL) return NULL;
  return PyBool_FromLong(ck_pdl_has(f));
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
      PyErr_Format(PyExc_ValueError, "unknown parameter code %c (expected one of Q, i, h, f, d)",
                   (int)(unsigned char)code < 128 ? code : '?');
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
  ck_launch_fn fn = ck_launch;
  int r;
  /* without the GIL: cuLaunchKernel blocks while the stream's queue is full, and a Python host
   * callback queued ahead of it needs the GIL to drain it */
  Py_BEGIN_ALLOW_THREADS
  r = fn(func, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], stream, ptrs, NULL);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(r);
}

/* ---- cuBLASLt ---------------------------------------------------------------------------------
 * lt_matmul(matmul_fn, setattr_fn, handle, desc, bias, aux, alpha, A, la, B, lb, beta, C, lc, D, ld,
 * algo, workspace, wsize, stream) -> cublasStatus_t: sets the descriptor's bias and aux pointer
 * attributes where nonzero (8 and 11: CUBLASLT_MATMUL_DESC_BIAS_POINTER, _EPILOGUE_AUX_POINTER) and
 * calls cublasLtMatmul, every argument an integer address. The GIL is held throughout, so no other
 * thread sees the descriptor between its attribute writes and the call. Through ctypes the same
 * call cost several microseconds of argument conversion. */
typedef int (*ck_ltmm_fn)(void*, void*, const void*, const void*, void*, const void*, void*, const void*,
                          const void*, void*, void*, void*, const void*, void*, size_t, void*);
typedef int (*ck_ltset_fn)(void*, int, const void*, size_t);

/* The call lt_matmul and a replayed plan's cuBLASLt step make, from the 20 addresses. */
static int ck_lt_call(void* const v[20]) {
  ck_ltset_fn set = (ck_ltset_fn)v[1];
  int r;
  if (v[4] != NULL && (r = set(v[3], 8, &v[4], sizeof(void*))) != 0) return r;
  if (v[5] != NULL && (r = set(v[3], 11, &v[5], sizeof(void*))) != 0) return r;
  return ((ck_ltmm_fn)v[0])(v[2], v[3], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15],
                            v[16], v[17], (size_t)(uintptr_t)v[18], v[19]);
}

static PyObject* lt_matmul(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 20) {
    PyErr_SetString(PyExc_TypeError, "lt_matmul takes 20 integer addresses");
    return NULL;
  }
  void* v[20];
  for (int i = 0; i < 20; ++i)
    if (ck_ptr(args[i], &v[i]) < 0) return NULL;
  if (v[0] == NULL || v[1] == NULL) {
    PyErr_SetString(PyExc_ValueError, "lt_matmul: null cublasLtMatmul or attribute setter");
    return NULL;
  }
  return PyLong_FromLong(ck_lt_call(v));
}

/* ---- the counting allocator ----------------------------------------------------------------
 * cupy.cuda.set_allocator(mem_malloc): each block comes from CuPy's pool (pool.malloc); a ck_block
 * whose C destructor counts the free rides in the pooled memory's __dict__ (the pool's own
 * MemoryPointer is handed out), or, where the memory object takes no attributes, owns the pool's
 * pointer and is handed out as MemoryPointer(UnownedMemory(ptr, size, owner=ck_block, device)).
 * Same counting as memory._malloc in Python, without a Python __init__/__del__ per array. */
#define CK_MAX_DEV 64
typedef struct { long long allocations, frees, allocated, peak; } ck_counts;
static ck_counts ck_mem[CK_MAX_DEV];
static PyObject *ck_pool_malloc, *ck_unowned, *ck_memptr, *ck_pool_oom, *ck_after_oom, *ck_mem_cb;
static PyObject *s_ptr, *s_mem, *s_size, *s_device_id, *s_alloc, *s_free, *s_block_attr;

typedef struct {
  PyObject_HEAD
  PyObject* inner; /* the pool's MemoryPointer: dropping it returns the block */
  long long size;  /* the block's size (the request rounded to the pool's unit) */
  int dev;
  int counted;     /* its allocation was counted: its free is */
} ck_block;

static void ck_event(PyObject* what, int dev, long long size) {
  PyObject* cb = Py_NewRef(ck_mem_cb); /* the callback may replace itself */
  PyObject* r = PyObject_CallFunction(cb, "OiL", what, dev, size);
  if (r == NULL) PyErr_WriteUnraisable(cb);  /* a callback cannot fail an allocation or a free */
  Py_XDECREF(r);
  Py_DECREF(cb);
}

/* The cached-memory cap (mem_set_cache_cap): after each counted allocation on a device with a cap,
 * reserved bytes (ck_reserved_fn(), the pool's total_bytes on the current device) minus allocated
 * bytes above the cap call ck_trim_fn(device), which frees the pool's cached blocks. Checked at
 * allocation, not at a free: a free runs inside the pool's own release of the block. */
static char ck_has_cap[CK_MAX_DEV];
static long long ck_cap[CK_MAX_DEV];
static PyObject *ck_reserved_fn, *ck_trim_fn;

static void ck_check_cache(int dev) {
  if (!ck_has_cap[dev] || ck_reserved_fn == NULL) return;
  PyObject* t = PyObject_CallNoArgs(ck_reserved_fn);
  long long reserved = t == NULL ? -1 : PyLong_AsLongLong(t);
  Py_XDECREF(t);
  if (reserved == -1 && PyErr_Occurred()) {
    PyErr_WriteUnraisable(ck_reserved_fn);  /* a failed check cannot fail the allocation */
    return;
  }
  if (reserved - ck_mem[dev].allocated <= ck_cap[dev]) return;
  PyObject* r = PyObject_CallFunction(ck_trim_fn, "i", dev);
  if (r == NULL) PyErr_WriteUnraisable(ck_trim_fn);
  Py_XDECREF(r);
}

static void ck_count_alloc(int dev, long long size) {
  ck_counts* c = &ck_mem[dev];
  c->allocations += 1;
  c->allocated += size;
  if (c->allocated > c->peak) c->peak = c->allocated;
  if (ck_mem_cb != NULL) ck_event(s_alloc, dev, size);
  ck_check_cache(dev);
}

static int ck_in_dict = 1;  /* blocks go into the pooled memory's __dict__ while it takes them */

static void ck_block_dealloc(PyObject* o) {
  ck_block* b = (ck_block*)o;
  if (b->counted) {
    ck_counts* c = &ck_mem[b->dev];
    c->frees += 1;
    c->allocated -= b->size;
    if (ck_mem_cb != NULL) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);  /* a free can run while an exception is pending */
      ck_event(s_free, b->dev, b->size);
      PyErr_Restore(t, v, tb);
    }
  }
  Py_XDECREF(b->inner);
  Py_TYPE(o)->tp_free(o);
}

static PyTypeObject ck_block_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_cudakit_native.Block",
    .tp_basicsize = sizeof(ck_block),
    .tp_dealloc = ck_block_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pool block counted by cudakit's allocator; freeing it returns the block to the pool.",
};

static int ck_getll(PyObject* o, PyObject* name, long long* out) {
  PyObject* v = PyObject_GetAttr(o, name);
  if (v == NULL) return -1;
  *out = PyLong_AsLongLong(v);
  Py_DECREF(v);
  return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* mem_setup(pool_malloc, UnownedMemory, MemoryPointer, pool OutOfMemoryError, after_oom):
 * after_oom(size) is called when pool_malloc raised the pool's OutOfMemoryError; it returns the
 * pool's MemoryPointer after freeing cached blocks and retrying, or raises. */
/* Store the five objects of a *_setup call in the module globals `dst` (owned references). */
static PyObject* ck_setup5(PyObject* args, PyObject** dst[5]) {
  PyObject* v[5];
  if (!PyArg_ParseTuple(args, "OOOOO", &v[0], &v[1], &v[2], &v[3], &v[4])) return NULL;
  for (int i = 0; i < 5; ++i) Py_XSETREF(*dst[i], Py_NewRef(v[i]));
  Py_RETURN_NONE;
}

static PyObject* mem_setup(PyObject* self, PyObject* args) {
  PyObject** dst[5] = {&ck_pool_malloc, &ck_unowned, &ck_memptr, &ck_pool_oom, &ck_after_oom};
  ck_in_dict = 1;
  return ck_setup5(args, dst);
}

/* CuPy's C functions for the current device and stream (see fast_setup), or NULL */
typedef int (*ck_getdev_fn)(int);
typedef intptr_t (*ck_stream_fn)(void);
static ck_getdev_fn ck_getdev_c;
static ck_stream_fn ck_stream_c;
static int ck_current_device(long long* out);

static PyObject* ck_alloc(PyObject* size, long long* ptr_out);

static PyObject* mem_malloc(PyObject* self, PyObject* size) {
  long long ptr;
  return ck_alloc(size, &ptr);
}

/* mem_malloc's work; *ptr_out: the block's device pointer (0 for 0 bytes). */
static PyObject* ck_alloc(PyObject* size, long long* ptr_out) {
  *ptr_out = 0;
  if (ck_pool_malloc == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "mem_setup() was not called");
    return NULL;
  }
  PyObject* inner = PyObject_CallOneArg(ck_pool_malloc, size);
  if (inner == NULL) {
    if (!PyErr_ExceptionMatches(ck_pool_oom)) return NULL;
    PyErr_Clear();
    inner = PyObject_CallOneArg(ck_after_oom, size);
    if (inner == NULL) return NULL;
  }
  long long req = PyLong_AsLongLong(size), ptr, dev, bsize;
  if (req == -1 && PyErr_Occurred()) goto fail;
  if (req == 0) return inner; /* CuPy hands out a null pointer for 0 bytes: nothing to count */
  PyObject* mem = PyObject_GetAttr(inner, s_mem);
  if (mem == NULL) goto fail;
  if (ck_getll(mem, s_size, &bsize) || ck_getll(inner, s_ptr, &ptr)) { Py_DECREF(mem); goto fail; }
  /* the pool allocates on the current device: CuPy's C function says which without an
   * attribute read (set by fast_setup), else the pointer's device_id */
  if (ck_getdev_c != NULL ? ck_current_device(&dev) : ck_getll(inner, s_device_id, &dev)) goto fail;
  if (dev < 0 || dev >= CK_MAX_DEV) {
    PyErr_Format(PyExc_ValueError, "cudakit's allocator counts devices 0..%d (got %lld)", CK_MAX_DEV - 1, dev);
    Py_DECREF(mem);
    goto fail;
  }
  ck_block* b = PyObject_New(ck_block, &ck_block_type);
  if (b == NULL) { Py_DECREF(mem); goto fail; }
  b->inner = NULL;
  b->counted = 0;
  b->size = bsize;
  b->dev = (int)dev;
  /* CuPy's PooledMemory has a __dict__: the block kept there is dropped with the pooled memory
   * (when the last array or view on it dies) and counts the free, and the array gets the pool's
   * own MemoryPointer -- no wrapper objects. A memory object without one (another allocator
   * behind pool_malloc) makes the block own the pool's pointer inside an UnownedMemory instead. */
  if (ck_in_dict) {
    if (PyObject_SetAttr(mem, s_block_attr, (PyObject*)b) == 0) {
      Py_DECREF(mem);
      ck_count_alloc((int)dev, bsize);
      b->counted = 1;
      Py_DECREF(b);  /* the pooled memory's __dict__ holds it */
      *ptr_out = ptr;
      return inner;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
      Py_DECREF(mem);
      Py_DECREF(b);  /* not counted yet: its free is not counted either */
      goto fail;
    }
    PyErr_Clear();
    ck_in_dict = 0;
  }
  Py_DECREF(mem);
  b->inner = inner; /* the block owns it from here */
  ck_count_alloc((int)dev, bsize);
  b->counted = 1;
  PyObject* um = PyObject_CallFunction(ck_unowned, "LLOL", ptr, bsize, (PyObject*)b, dev);
  Py_DECREF(b); /* UnownedMemory holds it now (or, on failure, the block is freed and counted) */
  if (um == NULL) return NULL;
  PyObject* r = PyObject_CallFunction(ck_memptr, "Oi", um, 0);
  Py_DECREF(um);
  *ptr_out = ptr;
  return r;
fail:
  Py_DECREF(inner);
  return NULL;
}

/* mem_counts(device) -> (allocations, frees, allocated bytes, peak allocated bytes) */
static PyObject* mem_counts(PyObject* self, PyObject* arg) {
  long d = PyLong_AsLong(arg);
  if (d == -1 && PyErr_Occurred()) return NULL;
  if (d < 0 || d >= CK_MAX_DEV) return Py_BuildValue("LLLL", 0LL, 0LL, 0LL, 0LL);
  ck_counts* c = &ck_mem[d];
  return Py_BuildValue("LLLL", c->allocations, c->frees, c->allocated, c->peak);
}

/* mem_reset_peak(device): peak = allocated now */
static PyObject* mem_reset_peak(PyObject* self, PyObject* arg) {
  long d = PyLong_AsLong(arg);
  if (d == -1 && PyErr_Occurred()) return NULL;
  if (d >= 0 && d < CK_MAX_DEV) ck_mem[d].peak = ck_mem[d].allocated;
  Py_RETURN_NONE;
}

/* mem_set_cache_cap(device, cap bytes or None, reserved_fn, trim_fn): see ck_check_cache */
static PyObject* mem_set_cache_cap(PyObject* self, PyObject* args) {
  int d;
  PyObject *cap, *reserved_fn, *trim_fn;
  if (!PyArg_ParseTuple(args, "iOOO", &d, &cap, &reserved_fn, &trim_fn)) return NULL;
  if (d < 0 || d >= CK_MAX_DEV)
    return PyErr_Format(PyExc_ValueError, "cudakit's allocator counts devices 0..%d (got %d)", CK_MAX_DEV - 1, d);
  long long c = 0;
  if (cap != Py_None) {
    c = PyLong_AsLongLong(cap);
    if (c == -1 && PyErr_Occurred()) return NULL;
    if (c < 0) return PyErr_Format(PyExc_ValueError, "cache cap must be >= 0 (got %lld)", c);
  }
  Py_XSETREF(ck_reserved_fn, Py_NewRef(reserved_fn));
  Py_XSETREF(ck_trim_fn, Py_NewRef(trim_fn));
  ck_cap[d] = c;
  ck_has_cap[d] = cap != Py_None;
  Py_RETURN_NONE;
}

/* mem_set_callback(fn or None): fn("alloc"|"free", device, nbytes) on every counted block */
static PyObject* mem_set_callback(PyObject* self, PyObject* fn) {
  Py_XSETREF(ck_mem_cb, fn == Py_None ? NULL : Py_NewRef(fn));
  Py_RETURN_NONE;
}

/* ---- the tiny elementwise op -------------------------------------------------------------------
 * ew(table, x0, x1 or None, p): op(x0[, x1]) into a new array when the inputs are C-contiguous
 * arrays of one dtype and shape on the current device and `table` holds the kernel for
 * key = dtype.num * 4096 + device * 32 + vector width, as (CUfunction, elements per block,
 * threads, name, block tuple, dynamic shared bytes); else None, and the caller takes the Python
 * path (which fills the table). The kernel's parameters: the input pointers, out, n (int64),
 * p (double). Closed by fast_gate(False) while a profile is recording or launches are synchronous. */
static PyObject *ck_nd, *ck_get_device, *ck_get_stream, *ck_recent, *ck_on_error;
static int ck_gate;
static long ck_hold; /* fast_hold(+1) while a profile records: fast_gate(True) cannot open it then */
#define CK_OPEN (ck_gate && ck_hold == 0)
static PyObject *s_c_contig, *s_dtype, *s_shape, *s_data, *s_num, *s_itemsize, *s_strides;

/* ---- CuPy's object layout ----------------------------------------------------------------
 * fast_layout() hands over the byte offsets that runtime/_cupy_layout.py found in CuPy's ndarray
 * and MemoryPointer (checked there against objects with known values, bounds-checked here): ew()
 * then reads contiguity, size, shape, dtype and data pointer straight from the array instead of
 * through six attribute getters per operand, and builds its output with CuPy's own C constructor
 * _ndarray_init (the one cupy.empty uses) instead of calling cupy.ndarray(shape, dtype, memptr). */
#define CK_MAX_NDIM 64
static int ck_layout; /* the offsets below are known */
static Py_ssize_t L_size, L_shape, L_contig, L_dtype, L_data, L_ptr, L_dev, L_strides;
static PyObject* ck_mp_type; /* cupy.cuda.memory.MemoryPointer */
#define CK_FIELD(o, off, T) (*(T*)((char*)(o) + (off)))
/* libstdc++'s and libc++'s std::vector: three pointers (the layout _cupy_layout.py checked) */
typedef struct { Py_ssize_t *begin, *end, *cap; } ck_vec;
typedef PyObject* (*ck_ndinit_fn)(PyObject* subtype, const ck_vec* shape, PyObject* dtype, PyObject* obj);
static ck_ndinit_fn ck_ndinit;
#define CK_SIG_NDINIT "struct __pyx_obj_4cupy_5_core_4core__ndarray_base *(PyObject *, " \
                      "__pyx_t_4cupy_5_core_7_carray_shape_t const &, PyObject *, PyObject *)"

static int ck_capsule_fn(PyObject* o, const char* sig, void** fn);

static int ck_offset_ok(Py_ssize_t off, Py_ssize_t width, PyObject* type) {
  return off >= (Py_ssize_t)sizeof(PyObject) && off + width <= ((PyTypeObject*)type)->tp_basicsize;
}

/* fast_layout(offsets or None, MemoryPointer type, _ndarray_init capsule or None); offsets:
 * (size, shape, c_contiguous, dtype, data) in the ndarray, (ptr, device_id) in the MemoryPointer,
 * (strides) in the ndarray */
static PyObject* fast_layout(PyObject* self, PyObject* args) {
  PyObject *offs, *mptype, *cap;
  Py_ssize_t o[8];
  void* fn = NULL;
  if (!PyArg_ParseTuple(args, "OOO", &offs, &mptype, &cap)) return NULL;
  ck_layout = 0;
  ck_ndinit = NULL;
  if (offs == Py_None) Py_RETURN_NONE;
  if (ck_nd == NULL || !PyType_Check(ck_nd) || !PyType_Check(mptype)) {
    PyErr_SetString(PyExc_TypeError, "fast_layout: call fast_setup first; the MemoryPointer must be a type");
    return NULL;
  }
  if (!PyTuple_Check(offs)) {
    PyErr_SetString(PyExc_TypeError, "fast_layout: the offsets must be a tuple or None");
    return NULL;
  }
  if (!PyArg_ParseTuple(offs, "nnnnnnnn", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7])) return NULL;
  if (!ck_offset_ok(o[0], 8, ck_nd) || !ck_offset_ok(o[1], sizeof(ck_vec), ck_nd) || !ck_offset_ok(o[2], 4, ck_nd) ||
      !ck_offset_ok(o[3], 8, ck_nd) || !ck_offset_ok(o[4], 8, ck_nd) || !ck_offset_ok(o[5], 8, mptype) ||
      !ck_offset_ok(o[6], 4, mptype) || !ck_offset_ok(o[7], sizeof(ck_vec), ck_nd)) {
    PyErr_SetString(PyExc_ValueError, "fast_layout: an offset lies outside its object");
    return NULL;
  }
  if (cap != Py_None && ck_capsule_fn(cap, CK_SIG_NDINIT, &fn)) return NULL;
  L_size = o[0]; L_shape = o[1]; L_contig = o[2]; L_dtype = o[3]; L_data = o[4]; L_ptr = o[5]; L_dev = o[6]; L_strides = o[7];
  Py_XSETREF(ck_mp_type, Py_NewRef(mptype));
  ck_ndinit = (ck_ndinit_fn)fn;
  ck_layout = 1;
  Py_RETURN_NONE;
}

/* nd_empty(shape tuple, dtype) -> a new C-contiguous array of ck_nd (CuPy's ndarray): through CuPy's
 * _ndarray_init where fast_layout gave it (allocation and array in one C call, what cupy.empty does,
 * with CuPy's current allocator), else ck_nd(shape, dtype). The outputs of the plans written in
 * Python (kernels/path_plans.py: cuDNN's graphs) come from here. A negative or non-int dim takes
 * ck_nd's call, which raises CuPy's error. */
static PyObject* nd_empty(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "nd_empty(shape tuple, dtype)");
    return NULL;
  }
  if (ck_nd == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "nd_empty: call fast_setup first");
    return NULL;
  }
  PyObject* shape = args[0];
  const Py_ssize_t n = PyTuple_GET_SIZE(shape);
  const ck_ndinit_fn ndinit = ck_layout ? ck_ndinit : NULL;
  if (ndinit != NULL && n <= CK_MAX_NDIM) {
    Py_ssize_t dims[CK_MAX_NDIM];
    int ok = 1;
    for (Py_ssize_t i = 0; i < n && ok; ++i) {
      PyObject* d = PyTuple_GET_ITEM(shape, i);
      dims[i] = PyLong_CheckExact(d) ? PyLong_AsSsize_t(d) : -1;
      if (dims[i] < 0) {
        PyErr_Clear();
        ok = 0;
      }
    }
    if (ok) {
      ck_vec v = {dims, dims + n, dims + n};
      return ndinit(ck_nd, &v, args[1], Py_None);
    }
  }
  return PyObject_CallFunctionObjArgs(ck_nd, shape, args[1], NULL);
}

/* An operand of ew(): its shape as CuPy's tuple (read through attributes) or as dims (read from
 * the array's fields); dtype is owned. */
typedef struct {
  PyObject *dtype, *shape;
  long long ptr, dev, n;
  Py_ssize_t ndim, dims[CK_MAX_NDIM];
} ck_operand;

static void ck_operand_clear(ck_operand* o) {
  Py_CLEAR(o->dtype);
  Py_CLEAR(o->shape);
}

/* The data pointer and device of a MemoryPointer read from its fields: 1, or 0 (nothing read)
 * when `data` is not one (NULL, None, another type). */
static int ck_memptr_fields(PyObject* data, long long* ptr, long long* dev) {
  if (data == NULL || !PyObject_TypeCheck(data, (PyTypeObject*)ck_mp_type)) return 0;
  *ptr = (long long)CK_FIELD(data, L_ptr, intptr_t);
  *dev = CK_FIELD(data, L_dev, int);
  return 1;
}

/* ck_read from the array's fields: x is exactly CuPy's ndarray (ew() checked its type) */
static int ck_read_fields(PyObject* x, ck_operand* o) {
  if (!CK_FIELD(x, L_contig, int)) return 0;
  if (!ck_memptr_fields(CK_FIELD(x, L_data, PyObject*), &o->ptr, &o->dev)) return 0;
  const ck_vec* v = (const ck_vec*)((char*)x + L_shape);
  o->ndim = v->end - v->begin;
  PyObject* dtype = CK_FIELD(x, L_dtype, PyObject*);
  if (o->ndim < 0 || o->ndim > CK_MAX_NDIM || dtype == NULL) return 0;
  if (o->ndim > 0) memcpy(o->dims, v->begin, o->ndim * sizeof(Py_ssize_t));
  o->n = CK_FIELD(x, L_size, Py_ssize_t);
  o->dtype = Py_NewRef(dtype);
  return 1;
}

/* 1: qualifies, 0: does not (not contiguous), -1: error. fields: read the array's fields (ew()
 * takes ck_layout once per call, so both operands and the output agree even if another thread
 * runs fast_setup/fast_layout while this one is in Python code) */
static int ck_read(PyObject* x, ck_operand* o, int fields) {
  o->dtype = o->shape = NULL;
  o->ndim = -1;
  if (fields) return ck_read_fields(x, o);
  PyObject* v = PyObject_GetAttr(x, s_c_contig);
  if (v == NULL) return -1;
  int contig = PyObject_IsTrue(v);
  Py_DECREF(v);
  if (contig <= 0) return contig;
  PyObject* data = PyObject_GetAttr(x, s_data);
  if (data == NULL) return -1;
  int bad = ck_getll(data, s_ptr, &o->ptr) || ck_getll(data, s_device_id, &o->dev);
  Py_DECREF(data);
  if (bad) return -1;
  o->dtype = PyObject_GetAttr(x, s_dtype);
  if (o->dtype == NULL) return -1;
  o->shape = PyObject_GetAttr(x, s_shape);
  if (o->shape == NULL) return -1;
  /* the element count from the shape (one attribute read less than x.size) */
  if (PyTuple_CheckExact(o->shape)) {
    long long n = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o->shape); ++i) {
      PyObject* d = PyTuple_GET_ITEM(o->shape, i);
      int of = 0;
      long long v = PyLong_CheckExact(d) ? PyLong_AsLongLongAndOverflow(d, &of) : -1;
      if (of || v < 0 || (v > 0 && n > (1LL << 62) / v)) { PyErr_Clear(); return ck_getll(x, s_size, &o->n) ? -1 : 1; }
      n *= v;
    }
    o->n = n;
    return 1;
  }
  return ck_getll(x, s_size, &o->n) ? -1 : 1;
}

/* 1: a and b have one shape, 0: not, -1: error */
static int ck_same_shape(const ck_operand* a, const ck_operand* b) {
  if (a->shape != NULL) return PyObject_RichCompareBool(b->shape, a->shape, Py_EQ);
  return a->ndim == b->ndim && (a->ndim == 0 || memcmp(a->dims, b->dims, a->ndim * sizeof(Py_ssize_t)) == 0);
}

/* The operand's shape as a tuple (new reference) */
static PyObject* ck_shape_tuple(const ck_operand* o) {
  if (o->shape != NULL) return Py_NewRef(o->shape);
  PyObject* t = PyTuple_New(o->ndim);
  for (Py_ssize_t i = 0; t != NULL && i < o->ndim; ++i) {
    PyObject* d = PyLong_FromSsize_t(o->dims[i]);
    if (d == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, d);
  }
  return t;
}

/* dtype.num and dtype.itemsize, remembered for the last dtype seen (NumPy's builtin dtypes are
 * singletons: a run of tiny ops meets one or two) */
static PyObject* ck_last_dtype;
static long long ck_last_num, ck_last_itemsize;

static int ck_dtype_info(PyObject* dtype, long long* num, long long* itemsize) {
  if (dtype != ck_last_dtype) {
    long long n, i;
    if (ck_getll(dtype, s_num, &n) || ck_getll(dtype, s_itemsize, &i)) return -1;
    Py_XSETREF(ck_last_dtype, Py_NewRef(dtype));
    ck_last_num = n;
    ck_last_itemsize = i;
  }
  *num = ck_last_num;
  *itemsize = ck_last_itemsize;
  return 0;
}

/* get_device and get_stream are callables (get_stream() returns an object with .ptr) or CuPy's own
 * C functions, handed over as the capsules Cython exports for cimport (a module's __pyx_capi__):
 * runtime.getDevice "int (int __pyx_skip_dispatch)" and stream.get_current_stream_ptr
 * "intptr_t (void)". The capsule's name is the C signature, checked as Cython's cimport does, so
 * a CuPy whose functions changed shape is refused instead of called wrongly. The C functions
 * save a Python call and a Stream object per launch. */
#define CK_SIG_GETDEV "int (int __pyx_skip_dispatch)"
#define CK_SIG_STREAM "intptr_t (void)"

static int ck_capsule_fn(PyObject* o, const char* sig, void** fn) {
  *fn = NULL;
  if (!PyCapsule_CheckExact(o)) return 0;
  if (!PyCapsule_IsValid(o, sig)) {
    PyErr_Format(PyExc_TypeError, "a capsule named '%s' is needed (got '%s')", sig,
                 PyCapsule_GetName(o) ? PyCapsule_GetName(o) : "(no name)");
    return -1;
  }
  *fn = PyCapsule_GetPointer(o, sig);
  return *fn == NULL ? -1 : 0;
}

/* The current device (0: ok, -1: an exception is set). */
static int ck_current_device(long long* out) {
  if (ck_getdev_c != NULL) {
    int d = ck_getdev_c(0);
    if (d == -1 && PyErr_Occurred()) return -1;
    *out = d;
    return 0;
  }
  PyObject* cur = PyObject_CallNoArgs(ck_get_device);
  if (cur == NULL) return -1;
  *out = PyLong_AsLongLong(cur);
  Py_DECREF(cur);
  return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The current stream's handle (0: ok, -1: an exception is set). */
static int ck_current_stream(long long* out) {
  if (ck_stream_c != NULL) {
    *out = (long long)ck_stream_c();
    return PyErr_Occurred() ? -1 : 0;
  }
  PyObject* st = PyObject_CallNoArgs(ck_get_stream);
  int bad = st == NULL || ck_getll(st, s_ptr, out);
  Py_XDECREF(st);
  return bad ? -1 : 0;
}

static PyObject* fast_setup(PyObject* self, PyObject* args) {
  PyObject** dst[5] = {&ck_nd, &ck_get_device, &ck_get_stream, &ck_recent, &ck_on_error};
  void *dev_fn = NULL, *stream_fn = NULL;
  if (PyTuple_GET_SIZE(args) == 5 && (ck_capsule_fn(PyTuple_GET_ITEM(args, 1), CK_SIG_GETDEV, &dev_fn) ||
                                      ck_capsule_fn(PyTuple_GET_ITEM(args, 2), CK_SIG_STREAM, &stream_fn)))
    return NULL;  /* a wrong argument count is ck_setup5's error */
  PyObject* r = ck_setup5(args, dst);
  if (r != NULL) {
    ck_getdev_c = (ck_getdev_fn)dev_fn;
    ck_stream_c = (ck_stream_fn)stream_fn;
    ck_layout = 0;  /* the offsets belonged to the previous array type: fast_layout() again */
    ck_ndinit = NULL;
  }
  return r;
}

/* fast_alloc(capsule or None): CuPy's memory.get_allocator as the capsule its Cython module exports
 * ("PyObject *(int __pyx_skip_dispatch)"). With it, ew() allocates its output through mem_malloc
 * directly -- and hands the pointer to the ndarray -- whenever mem_malloc is CuPy's allocator for
 * this thread at that moment; under any other allocator (set_allocator, using_allocator) the
 * output is allocated by CuPy as before. */
typedef PyObject* (*ck_getalloc_fn)(int);
static ck_getalloc_fn ck_getalloc_c;
#define CK_SIG_GETALLOC "PyObject *(int __pyx_skip_dispatch)"

static PyObject* fast_alloc(PyObject* self, PyObject* cap) {
  void* fn = NULL;
  if (cap != Py_None) {
    if (ck_capsule_fn(cap, CK_SIG_GETALLOC, &fn)) return NULL;
    if (fn == NULL) {
      PyErr_SetString(PyExc_TypeError, "fast_alloc: a capsule or None is needed");
      return NULL;
    }
  }
  ck_getalloc_c = (ck_getalloc_fn)fn;
  Py_RETURN_NONE;
}

/* The output's memory from mem_malloc when it is CuPy's current allocator: a new MemoryPointer
 * and *ptr, or NULL with no exception (CuPy allocates) or with one. */
static PyObject* ck_direct_alloc(long long nbytes, long long* ptr) {
  if (ck_getalloc_c == NULL || nbytes <= 0) return NULL;
  PyObject* al = ck_getalloc_c(0);
  if (al == NULL) return NULL;
  int ours = PyCFunction_Check(al) && PyCFunction_GET_FUNCTION(al) == (PyCFunction)(void (*)(void))mem_malloc;
  Py_DECREF(al);
  if (!ours) return NULL;
  PyObject* size = PyLong_FromLongLong(nbytes);
  if (size == NULL) return NULL;
  PyObject* mp = ck_alloc(size, ptr);
  Py_DECREF(size);
  return mp;
}

static PyObject* fast_gate(PyObject* self, PyObject* open) {
  int v = PyObject_IsTrue(open);
  if (v < 0) return NULL;
  ck_gate = v && ck_nd != NULL;
  Py_RETURN_NONE;
}

static PyObject* fast_hold(PyObject* self, PyObject* delta) {
  long d = PyLong_AsLong(delta);
  if (d == -1 && PyErr_Occurred()) return NULL;
  ck_hold += d;
  if (ck_hold < 0) ck_hold = 0;
  Py_RETURN_NONE;
}

#define CK_MAX_GRID_X 2147483647LL

/* After a fast-path launch with driver status r: record (name, grid, block) in the launch history
 * (cudakit.check() names the last kernels); r != 0 goes to on_error, which raises LaunchError.
 * 0: launched, -1: an exception is set. */
static int ck_launched_rec(int r, PyObject* rec);

static int ck_launched(int r, PyObject* name, const long long g[3], PyObject* block) {
  PyObject* rec = Py_BuildValue("(O(LLL)O)", name, g[0], g[1], g[2], block);
  if (rec == NULL) return -1;
  int bad = ck_launched_rec(r, rec);
  Py_DECREF(rec);
  return bad;
}

/* The same with the record built by the caller (borrowed). */
static int ck_launched_rec(int r, PyObject* rec) {
  PyObject* res = PyObject_CallOneArg(ck_recent, rec);
  if (res != NULL && r) {
    Py_DECREF(res);
    res = PyObject_CallFunction(ck_on_error, "iO", r, rec);
    if (res != NULL) {
      Py_DECREF(res);
      res = NULL;
      PyErr_SetString(PyExc_RuntimeError, "on_error returned instead of raising");
    }
  }
  if (res == NULL) return -1;
  Py_DECREF(res);
  return 0;
}

/* The launch record (name, (gx, 1, 1), block) of table entry e, kept for the last (entry, gx):
 * back-to-back tiny ops append the same record instead of building one each. New reference. */
static PyObject *ck_rec_entry, *ck_rec;
static long long ck_rec_gx;

static PyObject* ck_ew_record(PyObject* e, long long gx) {
  if (e != ck_rec_entry || gx != ck_rec_gx || ck_rec == NULL) {
    PyObject* rec = Py_BuildValue("(O(LLL)O)", PyTuple_GET_ITEM(e, 3), gx, 1LL, 1LL, PyTuple_GET_ITEM(e, 4));
    if (rec == NULL) return NULL;
    Py_XSETREF(ck_rec, rec);
    Py_XSETREF(ck_rec_entry, Py_NewRef(e));  /* held: its address cannot be reused meanwhile */
    ck_rec_gx = gx;
  }
  return Py_NewRef(ck_rec);
}

/* ew()'s output, shaped as operand a: through CuPy's _ndarray_init where fast_layout gave it (CuPy
 * allocates with its current allocator); else from mem_malloc directly while that is CuPy's
 * allocator (*optr set), else cupy.ndarray(shape, dtype). *optr stays 0 where CuPy allocated. */
static PyObject* ck_new_output(const ck_operand* a, long long itemsize, long long* optr, ck_ndinit_fn ndinit) {
  if (ndinit != NULL && a->shape == NULL && a->ndim >= 0) {  /* a was read from its fields */
    ck_vec v = {(Py_ssize_t*)a->dims, (Py_ssize_t*)a->dims + a->ndim, (Py_ssize_t*)a->dims + a->ndim};
    return ndinit(ck_nd, &v, a->dtype, Py_None);
  }
  PyObject* shape = ck_shape_tuple(a);
  if (shape == NULL) return NULL;
  PyObject* mp = ck_direct_alloc(a->n * itemsize, optr);
  PyObject* out = NULL;
  if (mp != NULL) out = PyObject_CallFunctionObjArgs(ck_nd, shape, a->dtype, mp, NULL);
  else if (!PyErr_Occurred()) out = PyObject_CallFunctionObjArgs(ck_nd, shape, a->dtype, NULL);
  Py_XDECREF(mp);
  Py_DECREF(shape);
  return out;
}

/* 1: x is on a's device with a's dtype and shape, 0: not, -1: error */
static int ck_matches(const ck_operand* a, const ck_operand* x) {
  int ok = x->dev == a->dev ? PyObject_RichCompareBool(x->dtype, a->dtype, Py_EQ) : 0;
  return ok == 1 ? ck_same_shape(a, x) : ok;
}

/* [p, p + nbytes) and [q, q + nbytes) share a byte but do not start together */
static int ck_partial_overlap(long long p, long long q, long long nbytes) {
  return p != q && p < q + nbytes && q < p + nbytes;
}

static PyObject* ew(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 && nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "ew(table, x0, x1 or None, p[, out or None])");
    return NULL;
  }
  PyObject *table = args[0], *x0 = args[1], *x1 = args[2], *dst = nargs == 5 ? args[4] : Py_None;
  if (!PyDict_Check(table)) {
    PyErr_SetString(PyExc_TypeError, "ew: table must be a dict");
    return NULL;
  }
  PyTypeObject* nd = (PyTypeObject*)ck_nd;
  if (!CK_OPEN || ck_launch == NULL || Py_TYPE(x0) != nd || (x1 != Py_None && Py_TYPE(x1) != nd) ||
      (dst != Py_None && Py_TYPE(dst) != nd))
    Py_RETURN_NONE;
  double p = PyFloat_AsDouble(args[3]);
  if (p == -1.0 && PyErr_Occurred()) return NULL;
  const int fields = ck_layout;
  const ck_ndinit_fn ndinit = fields ? ck_ndinit : NULL;
  ck_operand a, b, d;
  b.dtype = b.shape = d.dtype = d.shape = NULL;
  PyObject *out = NULL, *result = NULL;
  int ok = ck_read(x0, &a, fields);
  if (ok <= 0) goto done;
  long long al = a.ptr;
  if (x1 != Py_None) {
    ok = ck_read(x1, &b, fields);
    if (ok <= 0 || (ok = ck_matches(&a, &b)) <= 0) goto done;
    al |= b.ptr;
  }
  if (dst != Py_None) { /* out=: a C-contiguous array like the inputs */
    ok = ck_read(dst, &d, fields);
    if (ok <= 0 || (ok = ck_matches(&a, &d)) <= 0) goto done;
    al |= d.ptr;
  }
  long long curdev;
  if (ck_current_device(&curdev)) { ok = -1; goto done; }
  if (curdev != a.dev || a.dev < 0 || a.dev >= 128) { ok = 0; goto done; } /* the key holds 7 bits of device */
  long long num, itemsize;
  if (ck_dtype_info(a.dtype, &num, &itemsize)) { ok = -1; goto done; }
  /* out= may be an input (in place, element by element) but not a shifted view of one: the
   * Python path computes that into a temporary first (backends/cuda.py _elementwise) */
  if (dst != Py_None && (ck_partial_overlap(d.ptr, a.ptr, a.n * itemsize) ||
                         (x1 != Py_None && ck_partial_overlap(d.ptr, b.ptr, a.n * itemsize)))) { ok = 0; goto done; }
  /* the output comes from CuPy's pool, 512-byte aligned: the inputs decide the vector width */
  long long vec = (al & 15) || itemsize <= 0 || itemsize > 16 ? 1 : 16 / itemsize;
  PyObject* key = PyLong_FromLongLong(num * 4096 + a.dev * 32 + vec);
  if (key == NULL) { ok = -1; goto done; }
  PyObject* e = PyDict_GetItemWithError(table, key);
  Py_DECREF(key);
  if (e == NULL) { ok = PyErr_Occurred() ? -1 : 0; goto done; }
  Py_INCREF(e); /* owned from here: what follows may run Python code */
  void* func = NULL;
  long long tile = 0;
  long threads = 0, smem = 0;
  if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 6) {
    PyErr_SetString(PyExc_TypeError, "an ew table entry is (CUfunction, elements per block, threads, name, block, shared bytes)");
  } else if ((func = PyLong_AsVoidPtr(PyTuple_GET_ITEM(e, 0))) == NULL && PyErr_Occurred()) {
  } else if ((tile = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1))) == -1 && PyErr_Occurred()) {
  } else if ((threads = PyLong_AsLong(PyTuple_GET_ITEM(e, 2))) == -1 && PyErr_Occurred()) {
  } else if ((smem = PyLong_AsLong(PyTuple_GET_ITEM(e, 5))) == -1 && PyErr_Occurred()) {
  } else if (tile <= 0 || threads <= 0 || threads > 1024 || smem < 0) {
    PyErr_SetString(PyExc_ValueError, "an ew table entry needs elements per block > 0, 1..1024 threads and shared bytes >= 0");
  }
  if (PyErr_Occurred()) { Py_DECREF(e); ok = -1; goto done; }
  long long optr = 0, odev;
  if (dst != Py_None) optr = d.ptr;
  out = dst != Py_None ? Py_NewRef(dst) : ck_new_output(&a, itemsize, &optr, ndinit);
  if (out == NULL) { Py_DECREF(e); ok = -1; goto done; }
  if (a.n == 0) { Py_DECREF(e); result = out; out = NULL; goto done; }
  int bad = 0;
  if (optr == 0) {  /* allocated by CuPy: ask the array where */
    if (fields && Py_TYPE(out) == (PyTypeObject*)ck_nd) {
      bad = !ck_memptr_fields(CK_FIELD(out, L_data, PyObject*), &optr, &odev);
      if (bad) PyErr_SetString(PyExc_TypeError, "ew: the output array holds no MemoryPointer");
    } else {
      PyObject* odata = PyObject_GetAttr(out, s_data);
      bad = odata == NULL || ck_getll(odata, s_ptr, &optr);
      Py_XDECREF(odata);
    }
  }
  if (bad || (optr & 15 && vec > 1)) { /* an unaligned new output (out= is in `al` already) */
    Py_DECREF(e);
    ok = bad ? -1 : 0;
    goto done;
  }
  long long sptr;
  if (ck_current_stream(&sptr)) { Py_DECREF(e); ok = -1; goto done; }
  long long gx = (a.n + tile - 1) / tile;
  if (gx > CK_MAX_GRID_X) gx = CK_MAX_GRID_X;
  uint64_t slots[5];
  void* params[5];
  int k = 0;
  slots[k++] = (uint64_t)a.ptr;
  if (x1 != Py_None) slots[k++] = (uint64_t)b.ptr;
  slots[k++] = (uint64_t)optr;
  slots[k++] = (uint64_t)a.n;
  memcpy(&slots[k++], &p, 8);
  for (int i = 0; i < k; ++i) params[i] = &slots[i];
  if (!CK_OPEN) { Py_DECREF(e); ok = 0; goto done; } /* a profile started while Python code ran above */
  ck_launch_fn fn = ck_launch;
  int r;
  Py_BEGIN_ALLOW_THREADS
  r = fn(func, (unsigned)gx, 1, 1, (unsigned)threads, 1, 1, (unsigned)smem, (void*)(intptr_t)sptr, params, NULL);
  Py_END_ALLOW_THREADS
  PyObject* rec = ck_ew_record(e, gx);
  bad = rec == NULL || ck_launched_rec(r, rec);
  Py_XDECREF(rec);
  Py_DECREF(e);
  if (bad) { ok = -1; goto done; }
  result = out;
  out = NULL;
done:
  ck_operand_clear(&a);
  ck_operand_clear(&b);
  ck_operand_clear(&d);
  Py_XDECREF(out);
  if (result != NULL) return result;
  if (ok < 0) return NULL;
  Py_RETURN_NONE;
}

/* ---- Triton kernels -------------------------------------------------------------------------
 * tk_bind(plans, grid, fallback) -> a callable (what TritonKernel[grid] returns). Called with the
 * kernel's runtime arguments, it launches straight from `plans` when the gate is open, no keyword
 * is given, every argument is a CuPy array, an int in int32 range or a float, and the grid is a
 * tuple of 1-3 ints within the launch limits; otherwise it calls fallback(grid, args, kwargs)
 * (TritonKernel.run, which fills `plans`). Key: bytes([device]) + per argument a little-endian
 * uint16: an array 1024 + 2 * dtype.num + (ptr % 16 == 0), an int 1 (int32) or 2 (int32, a
 * multiple of 16), a float 3 -- the specialisation Triton keys its compiles on. Plan: (CUfunction,
 * block_x, shared bytes, parameter codes (bytes), name, block tuple); parameters past the
 * arguments are zero (Triton's scratch pointers). */
typedef struct {
  PyObject_HEAD
  PyObject *plans, *grid, *fallback;
} ck_tk;

/* GC-tracked: `fallback` is the kernel's bound run(), so kernel.attr = kernel[grid] is a cycle */
static int ck_tk_traverse(PyObject* o, visitproc visit, void* arg) {
  ck_tk* t = (ck_tk*)o;
  Py_VISIT(t->plans);
  Py_VISIT(t->grid);
  Py_VISIT(t->fallback);
  return 0;
}

static int ck_tk_clear(PyObject* o) {
  ck_tk* t = (ck_tk*)o;
  Py_CLEAR(t->plans);
  Py_CLEAR(t->grid);
  Py_CLEAR(t->fallback);
  return 0;
}

static void ck_tk_dealloc(PyObject* o) {
  PyObject_GC_UnTrack(o);
  ck_tk_clear(o);
  Py_TYPE(o)->tp_free(o);
}

/* 1: launched, 0: declined (the fallback takes it), -1: error */
static int ck_tk_launch(ck_tk* t, PyObject* args) {
  if (!CK_OPEN || ck_launch == NULL || !PyTuple_Check(t->grid)) return 0;
  const Py_ssize_t n = PyTuple_GET_SIZE(args), gn = PyTuple_GET_SIZE(t->grid);
  if (n > CK_MAX_PARAMS || gn < 1 || gn > 3) return 0;
  long long g[3] = {1, 1, 1};
  for (Py_ssize_t i = 0; i < gn; ++i) {
    PyObject* v = PyTuple_GET_ITEM(t->grid, i);
    int of = 0;
    if (!PyLong_CheckExact(v)) return 0;
    g[i] = PyLong_AsLongLongAndOverflow(v, &of);
    if (of || (g[i] == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
  }
  if (g[0] < 1 || g[0] > CK_MAX_GRID_X || g[1] < 1 || g[1] > 65535 || g[2] < 1 || g[2] > 65535) return 0;
  long long dev;
  if (ck_current_device(&dev)) return -1;
  if (dev < 0 || dev > 255) return 0;
  unsigned char key[1 + 2 * CK_MAX_PARAMS];
  uint64_t slots[CK_MAX_PARAMS];
  char kind[CK_MAX_PARAMS]; /* 'p' array pointer, 'i' int, 'f' float */
  key[0] = (unsigned char)dev;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    unsigned code;
    if (Py_TYPE(a) == (PyTypeObject*)ck_nd) {
      long long ptr, num, itemsize;
      PyObject* data = PyObject_GetAttr(a, s_data);
      if (data == NULL) return -1;
      int bad = ck_getll(data, s_ptr, &ptr);
      Py_DECREF(data);
      PyObject* dt = bad ? NULL : PyObject_GetAttr(a, s_dtype);
      if (dt == NULL) return -1;
      bad = ck_dtype_info(dt, &num, &itemsize);
      Py_DECREF(dt);
      if (bad) return -1;
      if (num < 0 || num > 20000) return 0;
      code = 1024 + 2 * (unsigned)num + ((ptr & 15) == 0);
      slots[i] = (uint64_t)ptr;
      kind[i] = 'p';
    } else if (PyLong_CheckExact(a)) {
      int of = 0;
      long long v = PyLong_AsLongLongAndOverflow(a, &of);
      if (of || v < -2147483648LL || v > 2147483647LL) { PyErr_Clear(); return 0; }
      code = (v & 15) == 0 ? 2 : 1;
      kind[i] = 'i';
    } else if (PyFloat_CheckExact(a)) {
      code = 3;
      kind[i] = 'f';
    } else {
      return 0;
    }
    key[1 + 2 * i] = (unsigned char)(code & 255);
    key[2 + 2 * i] = (unsigned char)(code >> 8);
  }
  PyObject* k = PyBytes_FromStringAndSize((const char*)key, 1 + 2 * n);
  if (k == NULL) return -1;
  PyObject* plan = PyDict_GetItemWithError(t->plans, k); /* borrowed */
  Py_DECREF(k);
  if (plan == NULL) return PyErr_Occurred() ? -1 : 0;
  if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 6 || !PyBytes_Check(PyTuple_GET_ITEM(plan, 3))) {
    PyErr_SetString(PyExc_TypeError, "a Triton plan is (CUfunction, block_x, shared, codes, name, block)");
    return -1;
  }
  Py_INCREF(plan); /* get_stream and the launch record may run Python code */
  int ret = -1;
  void* func = NULL;
  long block = 0, shared = 0;
  const char* codes = PyBytes_AS_STRING(PyTuple_GET_ITEM(plan, 3));
  const Py_ssize_t nc = PyBytes_GET_SIZE(PyTuple_GET_ITEM(plan, 3));
  void* params[CK_MAX_PARAMS];
  if ((func = PyLong_AsVoidPtr(PyTuple_GET_ITEM(plan, 0))) == NULL && PyErr_Occurred()) goto out;
  if ((block = PyLong_AsLong(PyTuple_GET_ITEM(plan, 1))) == -1 && PyErr_Occurred()) goto out;
  if ((shared = PyLong_AsLong(PyTuple_GET_ITEM(plan, 2))) == -1 && PyErr_Occurred()) goto out;
  if (block < 1 || block > 1024 || shared < 0) {
    PyErr_Format(PyExc_ValueError, "a Triton plan needs 1..1024 threads and shared >= 0 (got %ld, %ld)", block, shared);
    goto out;
  }
  if (nc < n || nc > CK_MAX_PARAMS) {
    PyErr_Format(PyExc_ValueError, "a Triton plan has %zd parameter codes for %zd arguments", nc, n);
    goto out;
  }
  for (Py_ssize_t i = 0; i < nc; ++i) {
    if (i >= n) {
      slots[i] = 0;
    } else if (kind[i] == 'p') {
      if (codes[i] != 'Q') {
        PyErr_Format(PyExc_ValueError, "argument %zd is an array but its parameter code is %c", i,
                     (int)(unsigned char)codes[i] < 128 ? codes[i] : '?');
        goto out;
      }
    } else if (ck_pack(codes[i], PyTuple_GET_ITEM(args, i), &slots[i]) < 0) {
      goto out;
    }
    params[i] = &slots[i];
  }
  long long sptr;
  if (ck_current_stream(&sptr)) goto out;
  if (!CK_OPEN) { ret = 0; goto out; } /* a profile started while Python code ran above */
  ck_launch_fn fn = ck_launch;
  int r;
  Py_BEGIN_ALLOW_THREADS
  r = fn(func, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2], (unsigned)block, 1, 1, (unsigned)shared,
         (void*)(intptr_t)sptr, params, NULL);
  Py_END_ALLOW_THREADS
  if (ck_launched(r, PyTuple_GET_ITEM(plan, 4), g, PyTuple_GET_ITEM(plan, 5)) == 0) ret = 1;
out:
  Py_DECREF(plan);
  return ret;
}

static PyObject* ck_tk_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  ck_tk* t = (ck_tk*)self;
  if (t->fallback == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "this kernel launch was cleared");
    return NULL;
  }
  if (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) {
    int r = ck_tk_launch(t, args);
    if (r < 0) return NULL;
    if (r > 0) Py_RETURN_NONE;
  }
  PyObject* kw = kwargs != NULL ? Py_NewRef(kwargs) : PyDict_New();
  if (kw == NULL) return NULL;
  PyObject* res = PyObject_CallFunctionObjArgs(t->fallback, t->grid, args, kw, NULL);
  Py_DECREF(kw);
  return res;
}

static PyTypeObject ck_tk_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_cudakit_native.TritonLaunch",
    .tp_basicsize = sizeof(ck_tk),
    .tp_dealloc = ck_tk_dealloc,
    .tp_call = ck_tk_call,
    .tp_traverse = ck_tk_traverse,
    .tp_clear = ck_tk_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "kernel[grid]: launches from the kernel's plans, or calls its run()",
};

static PyObject* tk_bind(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyDict_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "tk_bind(plans: dict, grid, fallback)");
    return NULL;
  }
  ck_tk* t = PyObject_GC_New(ck_tk, &ck_tk_type);
  if (t == NULL) return NULL;
  t->plans = Py_NewRef(args[0]);
  t->grid = Py_NewRef(args[1]);
  t->fallback = Py_NewRef(args[2]);
  PyObject_GC_Track((PyObject*)t);
  return (PyObject*)t;
}

/* ---- replayed plans ----------------------------------------------------------------------------
 * A dispatch plan (cudakit/dispatch.py) whose work is a fixed sequence of kernel launches and
 * cuBLASLt calls on addresses that change per call, replayed here instead of in Python: the
 * Python replay spent more host time in frames, tuples and attribute reads than in its launches.
 *
 * replay_new(allocs, steps, outs, single, on_status) -> Replay; replay(*args) -> the outputs.
 *   allocs: tuple of byte counts (> 0), allocated in order from CuPy's current allocator.
 *   steps: tuple of (kind, target, dims, params, subs, record):
 *     kind 0: cuLaunchKernel(target, dims = (gx, gy, gz, bx, by, bz, shared bytes)) with the
 *       parameters `params` (tuple of bytes: each parameter's value as the kernel reads it, a
 *       scalar in 8 bytes, a struct in its own size);
 *     kind 1: lt_matmul with the 20 addresses `params` (8 bytes each; see lt_matmul above);
 *     subs: tuple of (param, source, index, offset): the first 8 bytes of parameter `param` =
 *       offset + the data pointer of
 *       args[index] (source 0; None gives 0), of allocation index (source 1), or the current
 *       stream (source 2); or all 8 bytes = the integer args[index] shifted right by offset bits
 *       (source 3: a per-call seed);
 *     record: (name, grid, block), appended to the launch history; a failed launch raises through
 *       on_error (fast_setup), a nonzero cuBLASLt status calls on_status(status, step index),
 *       which raises.
 *   outs: tuple of (allocation, byte offset, shape, dtype, strides) or None (a None result);
 *     single: return the one output instead of a tuple.
 * The caller (dispatch.call) checked that a planned call may run now (no profile, asynchronous
 * launches); the plan was verified bitwise against the checked call when it was made. */
#define CK_MAX_ALLOCS 16
#define CK_MAX_STEPS 32
#define CK_MAX_SUBS 32   /* (the materialised attention backward's score kernel: 18 pointers, 2 seed words) */
#define CK_MAX_PARAM_BYTES 4096
typedef struct {
  int kind, nparams, nsubs, nbytes;
  void* target;
  unsigned dims[7];
  unsigned char* buf;            /* the parameters' bytes, each from an 8-byte aligned offset */
  int poff[CK_MAX_PARAMS];       /* parameter i starts at buf + poff[i] */
  int plen[CK_MAX_PARAMS];       /* and has plen[i] bytes */
  int sub_param[CK_MAX_SUBS], sub_src[CK_MAX_SUBS], sub_idx[CK_MAX_SUBS];
  long long sub_off[CK_MAX_SUBS];
  PyObject* record;
} ck_step;

typedef struct {
  PyObject_HEAD
  int nallocs, nsteps, nouts, single, max_arg;
  long long sizes[CK_MAX_ALLOCS];
  int direct[CK_MAX_ALLOCS]; /* the output made with CuPy's _ndarray_init for this allocation, or -1 */
  ck_step* steps;            /* nsteps of them (PyMem) */
  PyObject* outs;            /* the outs tuple */
  PyObject* on_status;
} ck_replay;

static PyObject* ck_py_alloc; /* cupy.cuda.memory.alloc (replay_setup) */

static int ck_replay_traverse(PyObject* o, visitproc visit, void* arg) {
  ck_replay* p = (ck_replay*)o;
  Py_VISIT(p->outs);
  Py_VISIT(p->on_status);
  for (int i = 0; i < p->nsteps; ++i) Py_VISIT(p->steps[i].record);
  return 0;
}
static int ck_replay_clear(PyObject* o) {
  ck_replay* p = (ck_replay*)o;
  Py_CLEAR(p->outs);
  Py_CLEAR(p->on_status);
  for (int i = 0; i < p->nsteps; ++i) Py_CLEAR(p->steps[i].record);
  return 0;
}
static void ck_replay_dealloc(PyObject* o) {
  ck_replay* p = (ck_replay*)o;
  PyObject_GC_UnTrack(o);
  ck_replay_clear(o);
  if (p->steps != NULL) {
    for (int i = 0; i < p->nsteps; ++i) PyMem_Free(p->steps[i].buf);
    PyMem_Free(p->steps);
  }
  Py_TYPE(o)->tp_free(o);
}

/* The data pointer of a CuPy array (fields where the layout is known), 0 for None. */
static int ck_array_ptr(PyObject* a, long long* ptr) {
  long long dev;
  *ptr = 0;
  if (a == Py_None) return 0;
  if (ck_layout && Py_TYPE(a) == (PyTypeObject*)ck_nd && ck_memptr_fields(CK_FIELD(a, L_data, PyObject*), ptr, &dev))
    return 0;
  PyObject* data = PyObject_GetAttr(a, s_data);
  if (data == NULL) return -1;
  int bad = ck_getll(data, s_ptr, ptr);
  Py_DECREF(data);
  return bad ? -1 : 0;
}

/* A MemoryPointer of `size` bytes from CuPy's current allocator (mem_malloc directly while it is
 * that allocator) and its address. New reference or NULL. */
static PyObject* ck_replay_alloc(long long size, long long* ptr) {
  PyObject* mp = ck_direct_alloc(size, ptr);
  if (mp != NULL || PyErr_Occurred()) return mp;
  if (ck_py_alloc == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "replay_setup() was not called");
    return NULL;
  }
  PyObject* n = PyLong_FromLongLong(size);
  if (n == NULL) return NULL;
  mp = PyObject_CallOneArg(ck_py_alloc, n);
  Py_DECREF(n);
  if (mp == NULL) return NULL;
  long long dev;
  if (!(ck_layout && ck_memptr_fields(mp, ptr, &dev)) && ck_getll(mp, s_ptr, ptr)) {
    Py_DECREF(mp);
    return NULL;
  }
  return mp;
}

static PyObject* ck_replay_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  ck_replay* p = (ck_replay*)self;
  if (p->outs == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "this plan was cleared");
    return NULL;
  }
  if ((kwargs != NULL && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) <= p->max_arg) {
    PyErr_Format(PyExc_TypeError, "a replayed plan takes at least %d positional arguments", p->max_arg + 1);
    return NULL;
  }
  PyObject* mem[CK_MAX_ALLOCS] = {NULL};
  PyObject* res[CK_MAX_ALLOCS] = {NULL};
  long long ptr[CK_MAX_ALLOCS];
  PyObject* result = NULL;
  int nouts = p->nouts;
  /* the outputs CuPy's _ndarray_init can make whole (allocation and array in one C call) first */
  for (int j = 0; j < p->nallocs; ++j) {
    int o = p->direct[j];
    if (o >= 0 && ck_ndinit != NULL && ck_layout) {
      PyObject* spec = PyTuple_GET_ITEM(p->outs, o);
      PyObject* shape = PyTuple_GET_ITEM(spec, 2);
      Py_ssize_t nd = PyTuple_GET_SIZE(shape), dims[CK_MAX_NDIM];
      for (Py_ssize_t i = 0; i < nd; ++i)
        if ((dims[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i))) == -1 && PyErr_Occurred()) goto fail;
      ck_vec v = {dims, dims + nd, dims + nd};
      PyObject* arr = ck_ndinit(ck_nd, &v, PyTuple_GET_ITEM(spec, 3), Py_None);
      if (arr == NULL) goto fail;
      long long dev;
      res[o] = arr;
      if (!ck_memptr_fields(CK_FIELD(arr, L_data, PyObject*), &ptr[j], &dev)) {
        PyErr_SetString(PyExc_TypeError, "replay: a new array holds no MemoryPointer");
        goto fail;
      }
    } else {
      mem[j] = ck_replay_alloc(p->sizes[j], &ptr[j]);
      if (mem[j] == NULL) goto fail;
    }
  }
  long long sptr;
  if (ck_current_stream(&sptr)) goto fail;
  for (int i = 0; i < p->nsteps; ++i) {
    const ck_step* st = &p->steps[i];
    uint64_t buf[CK_MAX_PARAM_BYTES / 8];
    unsigned char* b = (unsigned char*)buf;
    memcpy(b, st->buf, st->nbytes);
    for (int k = 0; k < st->nsubs; ++k) {
      long long v;
      if (st->sub_src[k] == 0) {
        if (ck_array_ptr(PyTuple_GET_ITEM(args, st->sub_idx[k]), &v)) goto fail;
        if (v == 0) { memset(b + st->poff[st->sub_param[k]], 0, 8); continue; }
      } else if (st->sub_src[k] == 1) {
        v = ptr[st->sub_idx[k]];
      } else if (st->sub_src[k] == 3) {  /* an integer argument (a seed), shifted right by `offset` bits */
        unsigned long long u = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(args, st->sub_idx[k]));
        if (u == (unsigned long long)-1 && PyErr_Occurred()) goto fail;
        u >>= st->sub_off[k];
        memcpy(b + st->poff[st->sub_param[k]], &u, 8);
        continue;
      } else {
        v = sptr;
      }
      uint64_t u = (uint64_t)(v + st->sub_off[k]);
      memcpy(b + st->poff[st->sub_param[k]], &u, 8);
    }
    int r;
    if (st->kind == 0) {
      if (ck_launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_launch() was not called");
        goto fail;
      }
      void* params[CK_MAX_PARAMS];
      for (int k = 0; k < st->nparams; ++k) params[k] = b + st->poff[k];
      ck_launch_fn fn = ck_launch;
      Py_BEGIN_ALLOW_THREADS
      r = fn(st->target, st->dims[0], st->dims[1], st->dims[2], st->dims[3], st->dims[4], st->dims[5],
             st->dims[6], (void*)(intptr_t)sptr, params, NULL);
      Py_END_ALLOW_THREADS
      if (ck_launched_rec(r, st->record)) goto fail;
    } else {
      void* v[20];
      memcpy(v, b, sizeof(v));
      r = ck_lt_call(v);
      if (r) {
        PyObject* e = PyObject_CallFunction(p->on_status, "ii", r, i);
        if (e != NULL) {
          Py_DECREF(e);
          PyErr_SetString(PyExc_RuntimeError, "on_status returned instead of raising");
        }
        goto fail;
      }
    }
  }
  for (int o = 0; o < nouts; ++o) {
    PyObject* spec = PyTuple_GET_ITEM(p->outs, o);
    if (spec == Py_None || res[o] != NULL) continue;
    int j = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    long long off = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
    PyObject* mp = off ? PyNumber_Add(mem[j], PyTuple_GET_ITEM(spec, 1)) : Py_NewRef(mem[j]);
    if (mp == NULL) goto fail;
    PyObject* strides = PyTuple_GET_ITEM(spec, 4); /* () marks a whole C-contiguous allocation */
    PyObject* cargs[4] = {PyTuple_GET_ITEM(spec, 2), PyTuple_GET_ITEM(spec, 3), mp,
                          PyTuple_GET_SIZE(strides) ? strides : Py_None};
    res[o] = PyObject_Vectorcall(ck_nd, cargs, 4, NULL);
    Py_DECREF(mp);
    if (res[o] == NULL) goto fail;
  }
  if (p->single) {
    result = res[0] != NULL ? res[0] : Py_NewRef(Py_None);
    res[0] = NULL;
  } else {
    result = PyTuple_New(nouts);
    if (result == NULL) goto fail;
    for (int o = 0; o < nouts; ++o) {
      PyTuple_SET_ITEM(result, o, res[o] != NULL ? res[o] : Py_NewRef(Py_None));
      res[o] = NULL;
    }
  }
fail:
  for (int j = 0; j < CK_MAX_ALLOCS; ++j) {
    Py_XDECREF(mem[j]);
    Py_XDECREF(res[j]);
  }
  return result;
}

static PyTypeObject ck_replay_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_cudakit_native.Replay",
    .tp_basicsize = sizeof(ck_replay),
    .tp_dealloc = ck_replay_dealloc,
    .tp_call = ck_replay_call,
    .tp_traverse = ck_replay_traverse,
    .tp_clear = ck_replay_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "a dispatch plan replayed in C: replay(*args) -> its outputs (see replay_new)",
};

static int ck_fail(const char* msg, long long a, long long b) {
  PyErr_Format(PyExc_ValueError, msg, a, b);
  return -1;
}

/* Parse one step of replay_new into st (0, or -1 with an exception; st->buf is set or NULL). */
static int ck_parse_step(PyObject* s, ck_step* st, int nallocs, int* max_arg) {
  PyObject *dims, *params, *subs;
  st->buf = NULL;
  st->record = NULL;
  if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != 6) {
    PyErr_SetString(PyExc_TypeError, "a step is (kind, target, dims, params, subs, record)");
    return -1;
  }
  st->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(s, 0));
  if (st->kind == -1 && PyErr_Occurred()) return -1;
  if (st->kind != 0 && st->kind != 1) return ck_fail("step kind must be 0 or 1 (got %lld)%lld", st->kind, 0);
  if (ck_ptr(PyTuple_GET_ITEM(s, 1), &st->target) < 0) return -1;
  if (st->kind == 0 && st->target == NULL) return ck_fail("a launch step needs a CUfunction (got %lld)%lld", 0, 0);
  dims = PyTuple_GET_ITEM(s, 2);
  params = PyTuple_GET_ITEM(s, 3);
  subs = PyTuple_GET_ITEM(s, 4);
  if (!PyTuple_Check(dims) || PyTuple_GET_SIZE(dims) != 7 || !PyTuple_Check(params) || !PyTuple_Check(subs)) {
    PyErr_SetString(PyExc_TypeError, "a step's dims (7 ints), params (bytes each) and subs are tuples");
    return -1;
  }
  for (int i = 0; i < 7; ++i)
    if (ck_uint(PyTuple_GET_ITEM(dims, i), &st->dims[i]) < 0) return -1;
  if (st->kind == 0) {
    const unsigned long long threads = (unsigned long long)st->dims[3] * st->dims[4] * st->dims[5];
    for (int i = 0; i < 6; ++i)
      if (st->dims[i] == 0) return ck_fail("a launch needs every grid and block dimension >= 1 (dimension %lld is %lld)", i, 0);
    if (threads > 1024) return ck_fail("a launch has 1..1024 threads a block (got %lld)%lld", (long long)threads, 0);
  }
  st->nparams = (int)PyTuple_GET_SIZE(params);
  if (st->nparams > CK_MAX_PARAMS || (st->kind == 1 && st->nparams != 20))
    return ck_fail("a step has at most %lld parameters, a cuBLASLt step 20 (got %lld)", CK_MAX_PARAMS, st->nparams);
  long long total = 0;
  for (int i = 0; i < st->nparams; ++i) {
    PyObject* b = PyTuple_GET_ITEM(params, i);
    if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) == 0 || (st->kind == 1 && PyBytes_GET_SIZE(b) != 8)) {
      PyErr_SetString(PyExc_TypeError, "each parameter is a non-empty bytes object (8 bytes in a cuBLASLt step)");
      return -1;
    }
    st->poff[i] = (int)total;
    st->plen[i] = (int)PyBytes_GET_SIZE(b);
    total += (PyBytes_GET_SIZE(b) + 7) / 8 * 8;
    if (total > CK_MAX_PARAM_BYTES) return ck_fail("a step's parameters take at most %lld bytes (got %lld)", CK_MAX_PARAM_BYTES, total);
  }
  st->nbytes = (int)total;
  st->buf = PyMem_Calloc(total ? total : 1, 1);
  if (st->buf == NULL) { PyErr_NoMemory(); return -1; }
  for (int i = 0; i < st->nparams; ++i) {
    PyObject* b = PyTuple_GET_ITEM(params, i);
    memcpy(st->buf + st->poff[i], PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
  }
  st->nsubs = (int)PyTuple_GET_SIZE(subs);
  if (st->nsubs > CK_MAX_SUBS) return ck_fail("a step has at most %lld substitutions (got %lld)", CK_MAX_SUBS, st->nsubs);
  for (int k = 0; k < st->nsubs; ++k) {
    PyObject* t = PyTuple_GET_ITEM(subs, k);
    int param, src, idx;
    long long off;
    if (!PyArg_ParseTuple(t, "iiiL", &param, &src, &idx, &off)) return -1;
    if (param < 0 || param >= st->nparams) return ck_fail("substituted parameter %lld outside the %lld parameters", param, st->nparams);
    if (st->plen[param] != 8) return ck_fail("substituted parameter %lld has %lld bytes (must be 8)", param, st->plen[param]);
    if (src < 0 || src > 3) return ck_fail("substitution source must be 0, 1, 2 or 3 (got %lld)%lld", src, 0);
    if (src == 1 && (idx < 0 || idx >= nallocs)) return ck_fail("allocation %lld of %lld", idx, nallocs);
    if ((src == 0 || src == 3) && (idx < 0 || idx > 255)) return ck_fail("argument %lld outside 0..%lld", idx, 255);
    if (src == 3 && (off < 0 || off > 63)) return ck_fail("an integer argument shifts by 0..63 bits (got %lld)%lld", off, 0);
    if ((src == 0 || src == 3) && idx > *max_arg) *max_arg = idx;
    st->sub_param[k] = param; st->sub_src[k] = src; st->sub_idx[k] = idx; st->sub_off[k] = off;
  }
  st->record = Py_NewRef(PyTuple_GET_ITEM(s, 5));
  return 0;
}

static PyObject* replay_new(PyObject* self, PyObject* args) {
  PyObject *allocs, *steps, *outs, *on_status;
  int single;
  if (!PyArg_ParseTuple(args, "O!O!O!pO", &PyTuple_Type, &allocs, &PyTuple_Type, &steps, &PyTuple_Type, &outs,
                        &single, &on_status))
    return NULL;
  Py_ssize_t na = PyTuple_GET_SIZE(allocs), ns = PyTuple_GET_SIZE(steps), no = PyTuple_GET_SIZE(outs);
  if (na > CK_MAX_ALLOCS || ns > CK_MAX_STEPS || ns == 0 || no > CK_MAX_ALLOCS || (single && no != 1))
    return PyErr_Format(PyExc_ValueError, "a replayed plan has 1..%d steps, at most %d allocations and outputs, "
                        "one output when single (got %zd, %zd, %zd)", CK_MAX_STEPS, CK_MAX_ALLOCS, ns, na, no);
  ck_replay* p = PyObject_GC_New(ck_replay, &ck_replay_type);
  if (p == NULL) return NULL;
  p->steps = NULL;
  p->outs = p->on_status = NULL;
  p->nallocs = (int)na; p->nsteps = 0; p->nouts = (int)no; p->single = single; p->max_arg = -1;
  p->outs = Py_NewRef(outs);
  p->on_status = Py_NewRef(on_status);
  p->steps = PyMem_Calloc(ns ? ns : 1, sizeof(ck_step));
  if (p->steps == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  for (Py_ssize_t j = 0; j < na; ++j) {
    p->sizes[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(allocs, j));
    p->direct[j] = -1;
    if (p->sizes[j] <= 0) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "allocation %zd has %lld bytes (must be > 0)", j, p->sizes[j]);
      goto fail;
    }
  }
  for (Py_ssize_t i = 0; i < ns; ++i) {
    int bad = ck_parse_step(PyTuple_GET_ITEM(steps, i), &p->steps[i], p->nallocs, &p->max_arg);
    p->nsteps = (int)i + 1;   /* its buffer and record are released with the plan */
    if (bad) goto fail;
  }
  for (Py_ssize_t o = 0; o < no; ++o) {
    PyObject* spec = PyTuple_GET_ITEM(outs, o);
    if (spec == Py_None) continue;
    int j, direct;
    long long off;
    PyObject *shape, *dtype, *strides;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "iLO!OO!", &j, &off, &PyTuple_Type, &shape, &dtype,
                                                  &PyTuple_Type, &strides)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "an output is (allocation, offset, shape, dtype, strides) or None");
      goto fail;
    }
    if (j < 0 || j >= na || off < 0 || off >= p->sizes[j] || PyTuple_GET_SIZE(shape) > CK_MAX_NDIM) {
      PyErr_Format(PyExc_ValueError, "output %zd: allocation %d at offset %lld is outside the plan", o, j, off);
      goto fail;
    }
    /* direct: the output is its whole allocation, C-contiguous from offset 0 (CuPy's _ndarray_init
     * then allocates and builds it in one call); the caller says so by strides == () */
    direct = off == 0 && PyTuple_GET_SIZE(strides) == 0;
    if (direct) {
      if (p->direct[j] >= 0) {
        PyErr_Format(PyExc_ValueError, "two outputs claim allocation %d whole", j);
        goto fail;
      }
      p->direct[j] = (int)o;
    }
  }
  /* an allocation another output also lives in (a view of a result) is allocated, not made by
   * _ndarray_init with its direct output: the other output needs its memory object */
  for (Py_ssize_t o = 0; o < no; ++o) {
    PyObject* spec = PyTuple_GET_ITEM(outs, o);
    if (spec == Py_None) continue;
    const int j = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (p->direct[j] >= 0 && p->direct[j] != (int)o) p->direct[j] = -1;
  }
  PyObject_GC_Track((PyObject*)p);
  return (PyObject*)p;
fail:
  PyObject_GC_Track((PyObject*)p);
  Py_DECREF(p);
  return NULL;
}

static PyObject* replay_setup(PyObject* self, PyObject* alloc) {
  Py_XSETREF(ck_py_alloc, Py_NewRef(alloc));
  Py_RETURN_NONE;
}

/* ---- the signature of a dispatched call (cudakit/dispatch.py signature(), in C) ----------------
 * call_signature(args) -> (device, entries) or None: per argument, a CuPy array as (shape,
 * strides, dtype.num, address % 256); None, bool, int, float and str as (type, value); a tuple
 * of those as itself; anything else, a 0-d array, arrays on two devices or on another device
 * than the current one give None. Same keys as the Python function. */
/* None aside, the scalar types a signature keys by type and value */
static int ck_scalar_type(PyTypeObject* t) {
  return t == &PyBool_Type || t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type;
}

static PyObject* call_signature(PyObject* self, PyObject* args) {
  if (!PyTuple_Check(args)) {
    PyErr_SetString(PyExc_TypeError, "call_signature(args: tuple)");
    return NULL;
  }
  if (ck_nd == NULL) Py_RETURN_NONE;
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject* sig = PyTuple_New(n);
  if (sig == NULL) return NULL;
  long long dev = -1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyTypeObject* t = Py_TYPE(a);
    PyObject* e = NULL;
    if (t == (PyTypeObject*)ck_nd) {
      long long ptr, d, num, itemsize;
      PyObject *data = NULL, *dtype = NULL, *shape, *strides;
      if (ck_layout && ck_memptr_fields(CK_FIELD(a, L_data, PyObject*), &ptr, &d)) {
        dtype = Py_XNewRef(CK_FIELD(a, L_dtype, PyObject*));
        if (dtype == NULL) goto none;   /* a half-made array: no signature */
      } else {
        data = PyObject_GetAttr(a, s_data);
        if (data == NULL || ck_getll(data, s_ptr, &ptr) || ck_getll(data, s_device_id, &d)) { Py_XDECREF(data); goto fail; }
        Py_DECREF(data);
        dtype = PyObject_GetAttr(a, s_dtype);
      }
      if (dtype == NULL) goto fail;
      int bad = ck_dtype_info(dtype, &num, &itemsize);
      Py_DECREF(dtype);
      if (bad) goto fail;
      if (dev < 0) dev = d;
      else if (d != dev) goto none;
      shape = PyObject_GetAttr(a, s_shape);
      if (shape == NULL) goto fail;
      if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) == 0) { Py_DECREF(shape); goto none; }
      strides = PyObject_GetAttr(a, s_strides);
      if (strides == NULL) { Py_DECREF(shape); goto fail; }
      e = Py_BuildValue("(NNLL)", shape, strides, num, ptr & 255);
    } else if (a == Py_None || ck_scalar_type(t)) {
      e = PyTuple_Pack(2, (PyObject*)t, a);
    } else if (t == &PyTuple_Type) {  /* (tuple, element types, the tuple): (1, 0) is not (1.0, 0) */
      PyObject* types = PyTuple_New(PyTuple_GET_SIZE(a));
      if (types == NULL) goto fail;
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(a); ++k) {
        PyObject* v = PyTuple_GET_ITEM(a, k);
        PyTypeObject* vt = Py_TYPE(v);
        if (!(v == Py_None || ck_scalar_type(vt))) {
          Py_DECREF(types);
          goto none;
        }
        PyTuple_SET_ITEM(types, k, Py_NewRef((PyObject*)vt));
      }
      e = PyTuple_Pack(3, (PyObject*)&PyTuple_Type, types, a);
      Py_DECREF(types);
    } else {
      goto none;
    }
    if (e == NULL) goto fail;
    PyTuple_SET_ITEM(sig, i, e);
  }
  long long cur;
  if (dev < 0) goto none;
  if (ck_current_device(&cur)) goto fail;
  if (cur != dev) goto none;
  return Py_BuildValue("(LN)", dev, sig);
none:
  Py_DECREF(sig);
  Py_RETURN_NONE;
fail:
  Py_DECREF(sig);
  return NULL;
}

/* ---- the planned call, whole (cudakit/dispatch.py call(), for a signature already seen) --------
 * plan_call(plans, op, args, key_args, checked) -> plans[(op, call_signature(key_args))](*args), or
 * checked(*args) where that entry is None (the signature keeps its checked path), or `miss`
 * (dispatch_setup) where no plan may run: the fast paths are closed (a profile records, launches
 * are synchronous), the arguments have no signature, or the signature has no entry yet. The
 * Python dispatch.call then decides, plans and opens the gate. */
static PyObject* ck_miss;

static PyObject* dispatch_setup(PyObject* self, PyObject* miss) {
  Py_XSETREF(ck_miss, Py_NewRef(miss));
  Py_RETURN_NONE;
}

/* ---- plan_call's inline cache ---------------------------------------------------------------
 * Building a call's signature (tuples of shapes and strides) and hashing it into the plan table
 * costs about a microsecond on a small op, a fifth of the launch it leads to. A call whose
 * arguments equal a recent call's of the same op field for field -- each CuPy array's dtype
 * object, shape, strides, address % 256 and device, each scalar's type and value (compared as
 * the table's keys compare them) -- has that call's signature, so its plan: the cache keeps
 * (op, the arguments' fields) -> plan for recent calls, found by a hash of the fields and checked
 * without building an object. The table only gains entries or is emptied whole (dispatch.clear()
 * and a full table call plans_changed()), so an entry is valid while its generation is current.
 * Arrays are read from their fields only (fast_layout known); other calls take the signature. */
#define CK_IC_SLOTS 256
#define CK_IC_ARGS 12
#define CK_IC_NDIM 8
typedef struct {
  PyObject* obj;   /* array: its dtype; scalar: the value (owned in a cache entry, borrowed in a probe) */
  int array;       /* 1: a CuPy array, 0: a scalar or a tuple of scalars */
  int ndim;
  long long align, dev;
  Py_ssize_t dims[CK_IC_NDIM], strides[CK_IC_NDIM];
} ck_ic_arg;
typedef struct {
  PyObject *op, *plans, *plan;  /* owned; op NULL: an empty slot; plan None: the checked path */
  long long gen;
  int nargs;
  ck_ic_arg a[CK_IC_ARGS];
} ck_ic;
static ck_ic ck_ics[CK_IC_SLOTS];
static long long ck_plan_gen = 1;

/* The fields of args into rec (nothing owned): 1 and *h (a hash of op and the arrays' fields)
 * where every argument can be compared so, 0 where the signature must decide. */
static int ck_ic_read(PyObject* op, PyObject* args, ck_ic_arg* rec, size_t* h) {
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (!ck_layout || n > CK_IC_ARGS) return 0;
  size_t hh = (size_t)op >> 4;
  long long dev = -1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyTypeObject* t = Py_TYPE(a);
    ck_ic_arg* r = &rec[i];
    r->obj = a;
    r->array = 0;
    if (t == (PyTypeObject*)ck_nd) {
      long long ptr, d;
      const ck_vec* sv = (const ck_vec*)((char*)a + L_shape);
      const ck_vec* tv = (const ck_vec*)((char*)a + L_strides);
      const Py_ssize_t nd = sv->end - sv->begin;
      PyObject* dtype = CK_FIELD(a, L_dtype, PyObject*);
      /* 0-d arrays have no signature (their value would be frozen into the plan) */
      if (nd < 1 || nd > CK_IC_NDIM || tv->end - tv->begin != nd || dtype == NULL ||
          !ck_memptr_fields(CK_FIELD(a, L_data, PyObject*), &ptr, &d))
        return 0;
      if (dev < 0) dev = d;
      else if (d != dev) return 0;
      r->array = 1;
      r->obj = dtype;
      r->ndim = (int)nd;
      r->align = ptr & 255;
      r->dev = d;
      memcpy(r->dims, sv->begin, nd * sizeof(Py_ssize_t));
      memcpy(r->strides, tv->begin, nd * sizeof(Py_ssize_t));
      hh = (hh * 1000003u) ^ ((size_t)dtype >> 4);
      for (Py_ssize_t k = 0; k < nd; ++k) hh = (hh * 1000003u) ^ (size_t)r->dims[k];
    } else if (t == &PyTuple_Type) {
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(a); ++k) {
        PyObject* v = PyTuple_GET_ITEM(a, k);
        if (!(v == Py_None || ck_scalar_type(Py_TYPE(v)))) return 0;
      }
    } else if (!(a == Py_None || ck_scalar_type(t))) {
      return 0;
    }
  }
  long long cur;
  if (dev < 0) return 0;
  if (ck_current_device(&cur)) { PyErr_Clear(); return 0; }
  if (cur != dev) return 0;
  *h = hh;
  return 1;
}

/* 1: entry e holds op's plan for arguments with the fields rec (n of them) */
static int ck_ic_match(const ck_ic* e, PyObject* op, PyObject* plans, const ck_ic_arg* rec, int n) {
  if (e->op != op || e->plans != plans || e->gen != ck_plan_gen || e->nargs != n) return 0;
  for (int i = 0; i < n; ++i) {
    const ck_ic_arg *c = &e->a[i], *r = &rec[i];
    if (c->array != r->array) return 0;
    if (c->array) {
      if (c->obj != r->obj || c->ndim != r->ndim || c->align != r->align || c->dev != r->dev ||
          memcmp(c->dims, r->dims, r->ndim * sizeof(Py_ssize_t)) ||
          memcmp(c->strides, r->strides, r->ndim * sizeof(Py_ssize_t)))
        return 0;
    } else if (c->obj != r->obj) {
      if (Py_TYPE(c->obj) != Py_TYPE(r->obj)) return 0;
      if (PyTuple_Check(c->obj)) {  /* element types as the signature keys them */
        if (PyTuple_GET_SIZE(c->obj) != PyTuple_GET_SIZE(r->obj)) return 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(c->obj); ++k)
          if (Py_TYPE(PyTuple_GET_ITEM(c->obj, k)) != Py_TYPE(PyTuple_GET_ITEM(r->obj, k))) return 0;
      }
      int eq = PyObject_RichCompareBool(r->obj, c->obj, Py_EQ);
      if (eq < 0) PyErr_Clear();
      if (eq != 1) return 0;
    }
  }
  return 1;
}

static void ck_ic_clear(ck_ic* e) {
  for (int i = 0; i < e->nargs; ++i) Py_CLEAR(e->a[i].obj);
  e->nargs = 0;
  Py_CLEAR(e->op);
  Py_CLEAR(e->plans);
  Py_CLEAR(e->plan);
}

static void ck_ic_store(ck_ic* e, PyObject* op, PyObject* plans, PyObject* plan, const ck_ic_arg* rec, int n) {
  ck_ic old = *e;   /* released after the new entry is in place (a dealloc may run Python code) */
  for (int i = 0; i < n; ++i) {
    e->a[i] = rec[i];
    Py_INCREF(e->a[i].obj);
  }
  e->nargs = n;
  e->op = Py_NewRef(op);
  e->plans = Py_NewRef(plans);
  e->plan = Py_NewRef(plan);
  e->gen = ck_plan_gen;
  ck_ic_clear(&old);
}

/* plans_changed(): the plan table was emptied; every cached entry is stale */
static PyObject* plans_changed(PyObject* self, PyObject* unused) {
  ++ck_plan_gen;
  for (int i = 0; i < CK_IC_SLOTS; ++i) {
    if (ck_ics[i].op == NULL) continue;
    ck_ic old = ck_ics[i];
    memset(&ck_ics[i], 0, sizeof(ck_ic));
    ck_ic_clear(&old);
  }
  Py_RETURN_NONE;
}

static PyObject* ck_run_plan(PyObject* p, PyObject* args, PyObject* checked) {
  if (p == Py_None) return PyObject_Call(checked, args, NULL);
  Py_INCREF(p); /* the plan may clear the cache while it runs */
  PyObject* r = PyObject_Call(p, args, NULL);
  Py_DECREF(p);
  return r;
}

static PyObject* plan_call(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (n != 5 || !PyDict_Check(a[0]) || !PyTuple_Check(a[2]) || !PyTuple_Check(a[3]) || ck_miss == NULL) {
    PyErr_SetString(PyExc_TypeError,
                    "plan_call(plans: dict, op, args: tuple, key_args: tuple, checked) after dispatch_setup");
    return NULL;
  }
  if (!CK_OPEN) return Py_NewRef(ck_miss);
  ck_ic_arg rec[CK_IC_ARGS];
  size_t h = 0;
  ck_ic* e = NULL;
  if (ck_ic_read(a[1], a[3], rec, &h)) {
    e = &ck_ics[h % CK_IC_SLOTS];
    if (ck_ic_match(e, a[1], a[0], rec, (int)PyTuple_GET_SIZE(a[3]))) return ck_run_plan(e->plan, a[2], a[4]);
  }
  PyObject* sig = call_signature(NULL, a[3]);
  if (sig == NULL) return NULL;
  if (sig == Py_None) {
    Py_DECREF(sig);
    return Py_NewRef(ck_miss);
  }
  PyObject* key = PyTuple_Pack(2, a[1], sig);
  Py_DECREF(sig);
  if (key == NULL) return NULL;
  PyObject* p = PyDict_GetItemWithError(a[0], key); /* borrowed */
  Py_DECREF(key);
  if (p == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(ck_miss);
  if (e != NULL) ck_ic_store(e, a[1], a[0], p, rec, (int)PyTuple_GET_SIZE(a[3]));
  return ck_run_plan(p, a[2], a[4]);
}

static PyMethodDef methods[] = {
    {"set_launch", (PyCFunction)set_launch, METH_O, "set_launch(address of cuLaunchKernel)"},
    {"set_launch_ex", (PyCFunction)set_launch_ex, METH_O, "set_launch_ex(address of cuLaunchKernelEx)"},
    {"pdl_register", (PyCFunction)pdl_register, METH_O,
     "pdl_register(CUfunction) -> whether its launches carry the programmatic-serialization attribute"},
    {"pdl_has", (PyCFunction)pdl_has, METH_O, "pdl_has(CUfunction) -> whether pdl_register took it"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(func, gx, gy, gz, bx, by, bz, smem, stream, codes, *values) -> CUresult"},
    {"lt_matmul", (PyCFunction)(void (*)(void))lt_matmul, METH_FASTCALL,
     "lt_matmul(matmul_fn, setattr_fn, handle, desc, bias, aux, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, ws, wsize, stream) -> status"},
    {"mem_setup", mem_setup, METH_VARARGS, "mem_setup(pool_malloc, UnownedMemory, MemoryPointer, pool_oom, after_oom)"},
    {"mem_malloc", mem_malloc, METH_O, "mem_malloc(nbytes) -> MemoryPointer, counted"},
    {"mem_counts", mem_counts, METH_O, "mem_counts(device) -> (allocations, frees, allocated, peak)"},
    {"mem_reset_peak", mem_reset_peak, METH_O, "mem_reset_peak(device)"},
    {"mem_set_callback", mem_set_callback, METH_O, "mem_set_callback(fn or None)"},
    {"mem_set_cache_cap", mem_set_cache_cap, METH_VARARGS,
     "mem_set_cache_cap(device, cap or None, reserved_fn, trim_fn): trim_fn(device) after an allocation leaves reserved_fn() - allocated > cap"},
    {"fast_setup", fast_setup, METH_VARARGS, "fast_setup(ndarray, get_device, get_stream, recent_append, on_error)"},
    {"fast_hold", fast_hold, METH_O, "fast_hold(+1 or -1): while held, the fast paths decline"},
    {"fast_alloc", fast_alloc, METH_O, "fast_alloc(CuPy's get_allocator capsule or None): ew() allocates through mem_malloc directly while it is CuPy's allocator"},
    {"fast_layout", fast_layout, METH_VARARGS, "fast_layout(offsets or None, MemoryPointer, _ndarray_init capsule or None)"},
    {"nd_empty", (PyCFunction)(void (*)(void))nd_empty, METH_FASTCALL,
     "nd_empty(shape tuple, dtype) -> a new C-contiguous CuPy array (CuPy's _ndarray_init where known)"},
    {"fast_gate", fast_gate, METH_O, "fast_gate(open): ew() and Triton launches decline while closed"},
    {"ew", (PyCFunction)(void (*)(void))ew, METH_FASTCALL, "ew(table, x0, x1 or None, p[, out]) -> the result (a new array, or out) or None"},
    {"tk_bind", (PyCFunction)(void (*)(void))tk_bind, METH_FASTCALL, "tk_bind(plans, grid, fallback) -> callable"},
    {"replay_new", replay_new, METH_VARARGS, "replay_new(allocs, steps, outs, single, on_status) -> Replay"},
    {"replay_setup", replay_setup, METH_O, "replay_setup(cupy.cuda.memory.alloc)"},
    {"call_signature", call_signature, METH_O, "call_signature(args) -> (device, entries) or None"},
    {"plans_changed", plans_changed, METH_NOARGS, "plans_changed(): the plan table was emptied (plan_call's cache forgets it)"},
    {"dispatch_setup", dispatch_setup, METH_O, "dispatch_setup(miss): the object plan_call returns when no plan runs"},
    {"plan_call", (PyCFunction)(void (*)(void))plan_call, METH_FASTCALL,
     "plan_call(plans, op, args, key_args, checked) -> the plan's (or checked's) result, or the miss object"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cudakit_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cudakit_native(void) {
  if (PyType_Ready(&ck_block_type) < 0 || PyType_Ready(&ck_tk_type) < 0 || PyType_Ready(&ck_replay_type) < 0) return NULL;
#define CK_INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
  CK_INTERN(s_ptr, "ptr"); CK_INTERN(s_mem, "mem"); CK_INTERN(s_size, "size");
  CK_INTERN(s_device_id, "device_id"); CK_INTERN(s_block_attr, "_cudakit_block"); CK_INTERN(s_alloc, "alloc"); CK_INTERN(s_free, "free");
  CK_INTERN(s_c_contig, "_c_contiguous"); CK_INTERN(s_dtype, "dtype"); CK_INTERN(s_shape, "shape");
  CK_INTERN(s_data, "data"); CK_INTERN(s_num, "num"); CK_INTERN(s_itemsize, "itemsize");
  CK_INTERN(s_strides, "strides");
#undef CK_INTERN
  return PyModule_Create(&module);
}
