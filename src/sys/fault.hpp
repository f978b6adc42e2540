// Fault injection for the syscall wrappers of src/sys: make a named wrapper fail with a chosen errno.
//
// Tests need the error paths of mbind, fallocate, move_pages... on machines where those calls succeed
// (and CI machines where they cannot be made to fail for real). Each wrapper in src/sys calls
// `fault_errno("<name>")` before the real syscall; a non-zero return is treated exactly as if the
// kernel had returned that errno. Faults come from two places:
//  - the environment variable ENGRAM_FAULT="name=ERRNO[,name=ERRNO...]", read once at first use;
//    ERRNO is a symbolic name (EPERM, ENOSPC, ...) or a number; e.g. ENGRAM_FAULT=mbind=EPERM;
//  - the test API below (set_fault / clear_faults), which overrides the environment.
// Wrapper names are the syscall names, one registry of them below (kFaultPoints): every wrapper asks
// fault_errno with one of its constants, and ENGRAM_FAULT / set_faults_from_spec accept only those names (and
// "*"), so a misspelt name is refused instead of running a fault test that injects nothing. Code outside
// src/sys that makes a registration-like call (the CUDA backend's cudaHostRegister, kFaultHostRegister)
// asks the same table by name.
//
// Systematic injection (hardening tests, docs/hardening.md): besides "always fail wrapper X", a test
// can fail exactly the n-th hooked call from now on, whatever its wrapper (`set_fault_at_call`), and
// can record the sequence of hooked calls an operation makes (`start_call_trace`). A test then runs
// the operation once to learn its calls, and again once per call index with that call failing, and
// checks each time for a clean Status and nothing leaked (descriptors, mappings, named files).
// The wildcard wrapper name "*" in set_fault / ENGRAM_FAULT fails every hooked call.
// Thread-safe (a mutex guards the table); the fast path with no fault set is one relaxed atomic load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engram/status.hpp"

namespace engram::sys {

// The fault points: the names the hooked calls ask fault_errno with.
inline constexpr const char* kFaultMemfdCreate = "memfd_create";
inline constexpr const char* kFaultOpenShm = "open_shm";
inline constexpr const char* kFaultFtruncate = "ftruncate";
inline constexpr const char* kFaultFallocate = "fallocate";
inline constexpr const char* kFaultFstat = "fstat";
inline constexpr const char* kFaultFstatvfs = "fstatvfs";
inline constexpr const char* kFaultMmap = "mmap";
inline constexpr const char* kFaultMadvise = "madvise";
inline constexpr const char* kFaultMbind = "mbind";
inline constexpr const char* kFaultSetMempolicy = "set_mempolicy";
inline constexpr const char* kFaultGetMempolicy = "get_mempolicy";
inline constexpr const char* kFaultMovePages = "move_pages";
inline constexpr const char* kFaultSchedSetaffinity = "sched_setaffinity";
inline constexpr const char* kFaultMincore = "mincore";
inline constexpr const char* kFaultMprotect = "mprotect";
inline constexpr const char* kFaultPread = "pread";
// Name under which registration of host memory with a device asks for a fault: the CUDA backend calls
// `fault_errno(kFaultHostRegister)` before cudaHostRegister and, on a non-zero errno, fails that chunk
// exactly as it would on cudaErrorMemoryAllocation (ENOMEM) / cudaErrorNotPermitted (EPERM) --
// rolling back the chunks already registered.
inline constexpr const char* kFaultHostRegister = "host_register";

// The registry: every fault point above, once.
inline constexpr const char* kFaultPoints[] = {
    kFaultMemfdCreate, kFaultOpenShm,      kFaultFtruncate,     kFaultFallocate,        kFaultFstat,
    kFaultFstatvfs,    kFaultMmap,         kFaultMadvise,       kFaultMbind,            kFaultSetMempolicy,
    kFaultGetMempolicy, kFaultMovePages,   kFaultSchedSetaffinity, kFaultMincore,       kFaultMprotect,
    kFaultPread,       kFaultHostRegister,
};
// Whether `name` is a fault point of the registry ("*", the wildcard, is not one).
bool is_fault_point(const std::string& name);

// The errno to fail `wrapper` with, or 0 to run the real call.
int fault_errno(const char* wrapper) noexcept;

// Makes `wrapper` fail with `err` (err = 0 removes that fault). Applies to every thread.
void set_fault(const std::string& wrapper, int err);
// Removes every fault, including those read from ENGRAM_FAULT.
void clear_faults();
// Parses "name=ERRNO,name=ERRNO" and installs the faults; kInvalidArgument for a name that is not a fault point
// (nor "*") or an unknown errno name, and then installs none.
Status set_faults_from_spec(const std::string& spec);
// kInvalidArgument naming ENGRAM_FAULT when it is set and malformed or names a call no fault point knows (a
// program refuses it before any work rather than run a fault test that injects nothing); ok when unset, empty or
// well formed.
Status check_fault_env();
// errno value for a symbolic name ("EPERM") or a decimal number; -1 if unknown.
int errno_from_name(const std::string& name);

// Fails the n-th (1-based) hooked call made from now on (any wrapper, any thread) with `err`, once.
// n = 0 disarms. Independent of the per-wrapper faults.
void set_fault_at_call(uint64_t n, int err);
// True while an armed set_fault_at_call has not fired yet.
bool fault_at_call_pending();
// Starts recording the wrapper name of every hooked call (clears an earlier record).
void start_call_trace();
// Stops recording and returns the names in call order.
std::vector<std::string> stop_call_trace();

// Installs a fault for the lifetime of the object (tests).
class ScopedFault {
 public:
  ScopedFault(std::string wrapper, int err) : wrapper_(std::move(wrapper)) { set_fault(wrapper_, err); }
  ~ScopedFault() { set_fault(wrapper_, 0); }
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;

 private:
  std::string wrapper_;
};

}  // namespace engram::sys
