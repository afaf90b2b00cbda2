// What main.cpp calls in kda_bench.cu, the one translation unit that includes the library's kernels (two would
// instantiate them twice and slow the build). Host-only declarations.
#pragma once

namespace kda::bench {

// Registers every benchmark with Google Benchmark. Touches no GPU, so --benchmark_list_tests works anywhere.
void register_kda_benchmarks();

// --kda_check: accuracy of chunk_kda_fwd against the float64 reference. Returns the exit code.
int run_kda_check();

// Frees the cached problem and the stream (call after the benchmarks, before the runtime shuts down).
void release_kda_bench_resources();

}  // namespace kda::bench
