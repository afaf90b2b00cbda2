// Which GPU the benchmarks run on. Host-only declarations, so main.cpp needs no GPU headers.
#pragma once

#include <string>

namespace kda::bench {

struct DeviceInfo {
  int count = 0;           // devices the runtime sees; 0 when none (or no driver)
  std::string name;        // device 0
  int multiprocessors = 0;
  int major = 0, minor = 0;
  double memory_gib = 0.0;
  std::string runtime;     // "CUDA <version>" or "HIP <version>"
  std::string error;       // why count is 0, from the runtime
};

// Never throws and never aborts; a machine without a GPU gets count == 0 and the runtime's reason.
DeviceInfo query_device();

}  // namespace kda::bench
