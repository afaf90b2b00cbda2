// Pre-included when compiling HIP 5.2's headers with clang 22 for gfx950: HIP 5.2's fp16 header calls these two
// device builtins, which clang 22 no longer declares. Declarations only; the compile check never links.
#pragma once
extern "C" __device__ _Float16 __llvm_amdgcn_rcp_f16(_Float16);
extern "C" __device__ __attribute__((__vector_size__(2 * sizeof(_Float16)))) _Float16
__llvm_amdgcn_rcp_2f16(__attribute__((__vector_size__(2 * sizeof(_Float16)))) _Float16);
