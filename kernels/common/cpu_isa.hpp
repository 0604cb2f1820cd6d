// Run-time choice of the x86 instruction set the CPU kernels were compiled for (each kernel is
// built once per ISA; its dispatcher asks this once), so one build is fast on any x86-64.
#pragma once

namespace kl {

enum class CpuIsa { generic, avx2, avx512 };

inline CpuIsa best_cpu_isa() {
#ifdef KL_X86_ISAS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
    return CpuIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::avx2;
#endif
  return CpuIsa::generic;
}

// The ISA of this process, asked once.
inline CpuIsa cpu_isa() {
  static const CpuIsa isa = best_cpu_isa();
  return isa;
}

}  // namespace kl

// A kernel compiled once per ISA (a namespace each) declares its entry points once with
// KL_PER_ISA(...) inside namespace kl, and its dispatcher calls them with KL_ISA_CALL(fn, args):
// the best ISA's fn (a code path shared by every kernel family instead of one per .cpp).
#ifdef KL_X86_ISAS
#define KL_PER_ISA(...)                         \
  namespace avx512 { __VA_ARGS__ }              \
  namespace avx2 { __VA_ARGS__ }                \
  namespace generic { __VA_ARGS__ }
#define KL_ISA_CALL(fn, ...)                                                     \
  (::kl::cpu_isa() == ::kl::CpuIsa::avx512 ? avx512::fn(__VA_ARGS__)             \
   : ::kl::cpu_isa() == ::kl::CpuIsa::avx2 ? avx2::fn(__VA_ARGS__)               \
                                           : generic::fn(__VA_ARGS__))
#else
#define KL_PER_ISA(...) namespace generic { __VA_ARGS__ }
#define KL_ISA_CALL(fn, ...) (generic::fn(__VA_ARGS__))
#endif
