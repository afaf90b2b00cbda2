// Link-time stand-ins for the two CUDA runtime entry points that the host side of the kernel headers references.
//
// fuzz_validation.cpp is compiled by clang in CUDA host-only mode. Non-template __global__ functions defined in the
// headers (kernels/kda/chunk_metadata_device.hpp) get host launch stubs, which call these two functions. The fuzz
// target calls only pure host functions (validate_chunk_kda, chunk_kda_workspace_size), so neither may ever run:
// each traps, which also proves that validation never touches the GPU. Plain C++ on purpose (no CUDA headers), so
// the exact prototypes do not matter to the linker; they are C symbols.
#include <cstdio>

extern "C" int __cudaPopCallConfiguration(void*, void*, void*, void*) {
  std::fprintf(stderr, "kda fuzz: __cudaPopCallConfiguration called from a host-only check\n");
  __builtin_trap();
}

extern "C" int cudaLaunchKernel(const void*, ...) {
  std::fprintf(stderr, "kda fuzz: cudaLaunchKernel called from a host-only check\n");
  __builtin_trap();
}
