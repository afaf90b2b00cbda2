#include "device.hpp"

#include "kda/platform.hpp"

namespace kda::bench {

DeviceInfo query_device() {
  DeviceInfo info;
  int count = 0;
  const hipError_t e = hipGetDeviceCount(&count);
  if (e != hipSuccess) {
    info.error = hipGetErrorString(e);
    (void)hipGetLastError();  // clear it, so that later runtime calls start clean
    return info;
  }
  if (count <= 0) {
    info.error = "the runtime reports 0 devices";
    return info;
  }
  info.count = count;
  hipDeviceProp_t prop{};
  if (hipGetDeviceProperties(&prop, 0) == hipSuccess) {
    info.name = prop.name;
    info.multiprocessors = prop.multiProcessorCount;
    info.major = prop.major;
    info.minor = prop.minor;
    info.memory_gib = double(prop.totalGlobalMem) / double(1ull << 30);
  }
#if defined(KDA_PLATFORM_CUDA)
  int version = 0;
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) {
    info.runtime = "CUDA runtime " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  }
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) {
    info.runtime += ", driver API " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  }
#else
  int version = 0;
  if (hipRuntimeGetVersion(&version) == hipSuccess) info.runtime = "HIP runtime " + std::to_string(version);
#endif
  return info;
}

}  // namespace kda::bench
