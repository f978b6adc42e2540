// Symbol visibility of the installed library: libengram_offload.so is compiled with -fvisibility=hidden and
// -fvisibility-inlines-hidden, so only what a public header marks is exported. A public header marks its
// declarations in one of two ways:
//   ENGRAM_API               on one class or function: `class ENGRAM_API Engine`, `ENGRAM_API Status f();`
//   ENGRAM_API_BEGIN / _END  around a header's namespace body: every class and function declared between them is
//                            exported (GCC/Clang `#pragma GCC visibility push(default)`); inline functions stay
//                            hidden with -fvisibility-inlines-hidden, as they are compiled into each consumer anyway
// Consumers need no define: default visibility is what they compile with.
// CUDA translation units (nvcc) see the regions as empty: nvcc's front end (CUDA 13.0) loses a visibility push over
// a header with many Result<T> declarations ("no matching visibility push"). That is harmless: the library's .cu
// files define no public symbol, and references to undefined symbols keep default visibility under
// -fvisibility=hidden; only their own definitions (kernels, internal classes) are hidden. The polymorphic public
// classes (PrefetchQueue, GroupChannel, GroupListener) carry ENGRAM_API as well, so that their vtables and typeinfo,
// which .cu files emit too, stay exported for a consumer's dynamic_cast or subclass.
#pragma once

#if defined(__CUDACC__)
#define ENGRAM_API __attribute__((visibility("default")))
#define ENGRAM_API_BEGIN
#define ENGRAM_API_END
#elif defined(__GNUC__) || defined(__clang__)
#define ENGRAM_API __attribute__((visibility("default")))
#define ENGRAM_API_BEGIN _Pragma("GCC visibility push(default)")
#define ENGRAM_API_END _Pragma("GCC visibility pop")
#else
#define ENGRAM_API
#define ENGRAM_API_BEGIN
#define ENGRAM_API_END
#endif
