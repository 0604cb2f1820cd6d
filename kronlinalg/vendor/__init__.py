"""Thin bindings of vendor libraries: cuBLAS (cublas), cuBLASLt with algorithm tuning
(cublaslt) and its on-disk cache (gemm_cache).  Imports no operation and not the planner."""
