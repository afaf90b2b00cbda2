// RAII device and pinned host buffers for the benchmarks (the tests' helpers pull in gtest, so not those).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kda/platform.hpp"

namespace kda::bench {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least one byte is allocated, so even an empty tensor has a non-null, distinct address.
  hipError_t allocate(size_t bytes) {
    release();
    const hipError_t e = hipMalloc(&ptr_, bytes > 0 ? bytes : 1);
    if (e != hipSuccess) {
      ptr_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    return hipSuccess;
  }
  void release() {
    if (ptr_ != nullptr) (void)hipFree(ptr_);
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

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  hipError_t allocate(size_t bytes) {
    release();
    const hipError_t e = hipHostMalloc(&ptr_, bytes > 0 ? bytes : 1, 0);
    if (e != hipSuccess) {
      ptr_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    return hipSuccess;
  }
  void release() {
    if (ptr_ != nullptr) (void)hipHostFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kda::bench
