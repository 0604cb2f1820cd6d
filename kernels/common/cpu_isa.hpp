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

}  // namespace kl
