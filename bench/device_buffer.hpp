// RAII device and pinned host buffers for the benchmarks (the tests' helpers pull in gtest, so not those).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kda/platform.hpp"

namespace kda::bench {

// Owns one allocation made by Memory::allocate and released by Memory::release. At least one byte is allocated,
// so even an empty tensor has a non-null, distinct address.
template <typename Memory>
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  hipError_t allocate(size_t bytes) {
    release();
    const hipError_t e = Memory::allocate(&ptr_, bytes > 0 ? bytes : 1);
    if (e != hipSuccess) {
      ptr_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    return hipSuccess;
  }
  void release() {
    if (ptr_ != nullptr) (void)Memory::release(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct DeviceMemory {
  static hipError_t allocate(void** p, size_t bytes) { return hipMalloc(p, bytes); }
  static hipError_t release(void* p) { return hipFree(p); }
};
struct PinnedHostMemory {
  static hipError_t allocate(void** p, size_t bytes) { return hipHostMalloc(p, bytes, 0); }
  static hipError_t release(void* p) { return hipHostFree(p); }
};

using DeviceBuffer = Buffer<DeviceMemory>;
using PinnedBuffer = Buffer<PinnedHostMemory>;

}  // namespace kda::bench
