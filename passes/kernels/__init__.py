"""The CPU kernels O2 packages call: bf16 micro-kernels for Inductor's C++ GEMM template (avx2_bf16_gemm,
avx512_bf16_gemm, their shared code in micro_gemm) and the C++ op library built from yggc/artifacts/kernels/
and installed beside the packages (kernel_library)."""
