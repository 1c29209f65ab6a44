
// Programmatic dependent launch: every kernel of a source that starts with this file calls
// CK_PDL_WAIT() first thing, which waits for the kernel before it in the stream to finish and its
// writes to be visible. Such a kernel is launched with programmatic stream serialization from
// compute capability 9.0 (runtime/pdl.py) and may start as the previous kernel's programs exit;
// launched without it, the wait returns at once.
#ifndef CK_PDL_WAIT  // (once where two families' sources are compiled together)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CK_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define CK_PDL_WAIT() ((void)0)
#endif
#endif
