// Helpers shared by the GPU tests: RAII device buffers, host<->device copies with dtype conversion, and a runner
// that puts a reference KdaProblem on the device and calls chunk_kda_fwd in either metadata mode.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kda/chunk_kda.hpp"
#include "kda/chunk_metadata.hpp"
#include "kda/numeric.hpp"
#include "kda/platform.hpp"
#include "reference/kda_problem.hpp"

namespace kda::test {

#define KDA_ASSERT_RT(expr) ASSERT_EQ((expr), hipSuccess) << #expr
#define KDA_ASSERT_OK(expr)                                         \
  do {                                                              \
    const ::kda::Status s_ = (expr);                                \
    ASSERT_TRUE(s_.is_ok()) << #expr << ": " << s_.message();       \
  } while (0)

// Owns `bytes` of device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { allocate(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { release(); ptr_ = o.ptr_; bytes_ = o.bytes_; o.ptr_ = nullptr; o.bytes_ = 0; }
    return *this;
  }

  // Every new buffer starts as 0xff bytes (NaN in bf16, fp16 and fp32), never as whatever the allocator hands back:
  // a kernel that skips a write must not inherit correct bytes from a buffer of the same size freed just before.
  void allocate(size_t bytes) {
    release();
    bytes_ = bytes;
    if (bytes > 0 && hipMalloc(&ptr_, bytes) != hipSuccess) ptr_ = nullptr;
    poison();
  }
  void poison() {
    // On the null stream, so ordered before any upload into the buffer.
    if (ptr_ != nullptr) (void)hipMemsetAsync(ptr_, kPoisonByte, bytes_, nullptr);
  }
  static constexpr int kPoisonByte = 0xff;
  void release() {
    if (ptr_ != nullptr) (void)hipFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t bytes) { (void)hipMemcpy(ptr_, host, bytes, hipMemcpyHostToDevice); }
  std::vector<uint8_t> download_bytes() const {
    std::vector<uint8_t> out(bytes_);
    if (bytes_ > 0) (void)hipMemcpy(out.data(), ptr_, bytes_, hipMemcpyDeviceToHost);
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// fp32 host values -> 16-bit elements of the given dtype.
inline std::vector<uint16_t> to_dtype_bits(const std::vector<float>& x, DType dtype) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = dtype == DType::kBF16 ? numeric::float_to_bf16(x[i]) : numeric::float_to_fp16(x[i]);
  }
  return out;
}
inline std::vector<float> from_dtype_bits(const std::vector<uint16_t>& x, DType dtype) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = dtype == DType::kBF16 ? numeric::bf16_to_float(x[i]) : numeric::fp16_to_float(x[i]);
  }
  return out;
}

inline DeviceBuffer upload_floats(const std::vector<float>& x) {
  DeviceBuffer b(x.size() * sizeof(float));
  b.upload(x.data(), x.size() * sizeof(float));
  return b;
}
inline DeviceBuffer upload_dtype(const std::vector<float>& x, DType dtype) {
  const std::vector<uint16_t> bits = to_dtype_bits(x, dtype);
  DeviceBuffer b(bits.size() * sizeof(uint16_t));
  b.upload(bits.data(), bits.size() * sizeof(uint16_t));
  return b;
}
inline std::vector<float> download_floats(const void* dev, size_t count) {
  std::vector<float> out(count);
  if (count > 0) (void)hipMemcpy(out.data(), dev, count * sizeof(float), hipMemcpyDeviceToHost);
  return out;
}
inline std::vector<float> download_dtype(const void* dev, size_t count, DType dtype) {
  std::vector<uint16_t> bits(count);
  if (count > 0) (void)hipMemcpy(bits.data(), dev, count * sizeof(uint16_t), hipMemcpyDeviceToHost);
  return from_dtype_bits(bits, dtype);
}
inline std::vector<uint8_t> download_raw(const void* dev, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  if (bytes > 0) (void)hipMemcpy(out.data(), dev, bytes, hipMemcpyDeviceToHost);
  return out;
}

// Whether sequence n's bytes agree between two runs: its o rows (tokens cu[n] .. cu[n + 1], row_bytes each) and its
// final-state slot n (slot_bytes), for tests that compare outputs sequence by sequence.
struct SequenceBytesEqual {
  bool o, state;
};
inline SequenceBytesEqual sequence_bytes_equal(const std::vector<int64_t>& cu, size_t n,
                                               const std::vector<uint8_t>& o_a, const std::vector<uint8_t>& o_b,
                                               size_t row_bytes, const std::vector<uint8_t>& state_a,
                                               const std::vector<uint8_t>& state_b, size_t slot_bytes) {
  const size_t o_begin = size_t(cu[n]) * row_bytes, o_end = size_t(cu[n + 1]) * row_bytes;
  const size_t st_begin = n * slot_bytes, st_end = st_begin + slot_bytes;
  if (o_end > o_a.size() || o_end > o_b.size() || st_end > state_a.size() || st_end > state_b.size()) {
    return {false, false};  // a sequence outside the buffers never compares equal
  }
  return {std::equal(o_a.begin() + o_begin, o_a.begin() + o_end, o_b.begin() + o_begin),
          std::equal(state_a.begin() + st_begin, state_a.begin() + st_end, state_b.begin() + st_begin)};
}

// Whether a GPU is present; GPU tests fail (not skip) without one: they carry the `gpu` label and run only on GPU
// machines, so a missing device there is a real failure.
inline bool have_gpu() {
  int n = 0;
  return hipGetDeviceCount(&n) == hipSuccess && n > 0;
}

}  // namespace kda::test
