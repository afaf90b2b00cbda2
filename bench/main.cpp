// kda_bench's entry point: our own --kda_* flags, then Google Benchmark's. Listing benchmarks needs no GPU; running
// them (or --kda_check) without one prints why and exits 1.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device.hpp"
#include "entry_points.hpp"
#include "options.hpp"

namespace {

using kda::bench::bench_options;

// Google Benchmark's default 0.5 s of (manual, per-call) time would run each benchmark for calls x 0.5 s; 0.025 s
// keeps a full run to a few minutes. An explicit --benchmark_min_time wins (it comes later on the command line).
constexpr const char* kDefaultMinTime = "--benchmark_min_time=0.025";

void print_help() {
  std::printf(
      "kda_bench: Google Benchmark microbenchmarks of the kda library (docs/benchmarks.md).\n"
      "kda_bench's own flags:\n"
      "  --kda_check          accuracy of chunk_kda_fwd vs the float64 reference, then exit (0 = pass)\n"
      "  --kda_device_info    print the GPU the benchmarks would use, then exit (1 = none)\n"
      "  --kda_calls=N        back-to-back calls per timed iteration (default %d)\n"
      "  --kda_warmup=N       untimed calls before timing (default %d)\n"
      "  --kda_graph          time the N calls as one captured graph instead of direct launches\n"
      "  --kda_heads=N        heads of every benchmark's problem (default %d; for scaling studies, names unchanged)\n"
      "  --kda_output_separate  e2e benchmarks keep the output a launch of its own (the per-chunk h in memory)\n"
      "  --kda_staged         e2e benchmarks run chunk_kda_fwd's staged form (l2norm, gate, prepare apart)\n"
      "  --kda_derived_bound  derived-table benchmarks also pass the longest sequence (max_sequence_tokens)\n"
      "  --kda_state_v_tile=N state_with_h stage benchmarks (and state_recurrence where the output is not folded)\n"
      "                       force V-tile width N (16, 32, 64; 0 = launcher's)\n"
      "  --kda_state_warps=N  the same benchmarks force N warps per block (4, 8; 0 = launcher's)\n"
      "  --kda_state_output_warps=N  state_recurrence stage benchmarks with the output folded in force N output\n"
      "                       warps (0, 8; default: the launcher's)\n"
      "  --kda_state_short_sequences=N  the same benchmarks force the short-sequence kernel on (1) or off (0)\n"
      "  --kda_state_fixed_share  the same benchmarks give that kernel no item counter (its plain form)\n"
      "  --kda_state_regs_warps=N  the folded state launch (stage and e2e benchmarks, --kda_check) forces the\n"
      "                       register-state kernel with N warps (2, 4, 8) or not (0)\n"
      "  --kda_warp_short=N   the fused prepare (stage and e2e benchmarks) forces the warp-per-item kernel for\n"
      "                       sequences of <= 8 tokens at 128 (1) or 168 (2) registers, or not (0)\n"
      "Default here: %s (pass --benchmark_min_time to change it).\n\n",
      bench_options().calls, bench_options().warmup, kda::bench::kHeads, kDefaultMinTime);
  benchmark::PrintDefaultHelp();
}

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

// --flag or --flag=true/1/yes.
bool bool_flag(const char* arg, const char* name) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0) return false;
  if (arg[n] == '\0') return true;
  if (arg[n] != '=') return false;
  const char* v = arg + n + 1;
  return std::strcmp(v, "true") == 0 || std::strcmp(v, "1") == 0 || std::strcmp(v, "yes") == 0;
}

bool int_flag(const char* arg, const char* name, int* out) {
  const std::string prefix = std::string(name) + "=";
  if (!starts_with(arg, prefix.c_str())) return false;
  char* end = nullptr;
  const long v = std::strtol(arg + prefix.size(), &end, 10);
  if (end == arg + prefix.size() || *end != '\0' || v < 0 || v > 100000) {
    std::fprintf(stderr, "kda_bench: bad value in %s\n", arg);
    std::exit(2);
  }
  *out = int(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool check = false, device_info = false, list_only = false, have_min_time = false;
  std::vector<char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (bool_flag(a, "--kda_check")) {
      check = true;
    } else if (bool_flag(a, "--kda_device_info")) {
      device_info = true;
    } else if (bool_flag(a, "--kda_output_separate")) {
      bench_options().output_separate = true;
    } else if (bool_flag(a, "--kda_staged")) {
      bench_options().staged = true;
    } else if (bool_flag(a, "--kda_derived_bound")) {
      bench_options().derived_bound = true;
    } else if (bool_flag(a, "--kda_state_fixed_share")) {
      bench_options().state_fixed_share = true;
    } else if (bool_flag(a, "--kda_graph")) {
      bench_options().graph = true;
    } else if (int_flag(a, "--kda_calls", &bench_options().calls) || int_flag(a, "--kda_warmup", &bench_options().warmup) ||
               int_flag(a, "--kda_heads", &bench_options().heads) ||
               int_flag(a, "--kda_state_regs_warps", &bench_options().state_regs_warps) ||
               int_flag(a, "--kda_warp_short", &bench_options().warp_short) ||
               int_flag(a, "--kda_state_v_tile", &bench_options().state_v_tile) ||
               int_flag(a, "--kda_state_warps", &bench_options().state_warps) ||
               int_flag(a, "--kda_state_output_warps", &bench_options().state_output_warps) ||
               int_flag(a, "--kda_state_short_sequences", &bench_options().state_short_sequences)) {
    } else {
      if (bool_flag(a, "--benchmark_list_tests")) list_only = true;
      if (starts_with(a, "--benchmark_list_tests=")) list_only = bool_flag(a, "--benchmark_list_tests");
      if (starts_with(a, "--benchmark_min_time")) have_min_time = true;
      args.push_back(argv[i]);
    }
  }
  if (bench_options().calls < 1) bench_options().calls = 1;
  if (bench_options().heads < 1) {
    std::fprintf(stderr, "kda_bench: --kda_heads must be at least 1\n");
    return 2;
  }
  std::string min_time = kDefaultMinTime;
  if (!have_min_time) args.insert(args.begin() + 1, &min_time[0]);
  args.push_back(nullptr);
  int bench_argc = int(args.size()) - 1;

  kda::bench::register_kda_benchmarks();
  benchmark::Initialize(&bench_argc, args.data(), print_help);
  if (benchmark::ReportUnrecognizedArguments(bench_argc, args.data())) return 2;
  if (list_only && !check && !device_info) {
    benchmark::RunSpecifiedBenchmarks();  // only lists: no benchmark runs, no GPU is touched
    benchmark::Shutdown();
    return 0;
  }

  const kda::bench::DeviceInfo dev = kda::bench::query_device();
  if (dev.count == 0) {
    std::fprintf(stderr,
                 "kda_bench: no GPU found (%s). The benchmarks and --kda_check need a CUDA or HIP device; "
                 "--benchmark_list_tests works without one.\n",
                 dev.error.c_str());
    return 1;
  }
  if (device_info) {
    std::printf("kda_bench: %d device(s); device 0: %s, %d multiprocessors, compute %d.%d, %.1f GiB; %s\n", dev.count,
                dev.name.c_str(), dev.multiprocessors, dev.major, dev.minor, dev.memory_gib, dev.runtime.c_str());
    return 0;
  }
  if (check) {
    const int rc = kda::bench::run_kda_check();
    kda::bench::release_kda_bench_resources();
    return rc;
  }

  benchmark::AddCustomContext("kda_gpu", dev.name);
  benchmark::AddCustomContext("kda_gpu_multiprocessors", std::to_string(dev.multiprocessors));
  benchmark::AddCustomContext("kda_gpu_compute_capability", std::to_string(dev.major) + "." + std::to_string(dev.minor));
  benchmark::AddCustomContext("kda_runtime", dev.runtime);
  benchmark::AddCustomContext("kda_calls_per_iteration", std::to_string(bench_options().calls));
  benchmark::AddCustomContext("kda_warmup_calls", std::to_string(bench_options().warmup));
  benchmark::AddCustomContext("kda_timing", bench_options().graph ? "graph" : "direct");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  kda::bench::release_kda_bench_resources();
  return 0;
}
