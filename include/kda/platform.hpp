// Platform layer: one set of hip* names on both vendors.
//
// AMD (hipcc / clang -x hip): this is <hip/hip_runtime.h>. NVIDIA (nvcc): HIP's own NVIDIA headers do not build
// against CUDA 13, so we include <cuda_runtime.h> and map the small set of hip* names the library and its tests
// use. Device code also gets the warp width as a constant (32 on NVIDIA, 64 on CDNA) and lane-shuffle wrappers.
#pragma once

#include "kda/numeric.hpp"
#include "kda/status.hpp"

#if defined(__CUDACC__) && !defined(__HIP__)
#define KDA_PLATFORM_CUDA 1
#include <cuda_runtime.h>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipGraph_t = cudaGraph_t;
using hipGraphExec_t = cudaGraphExec_t;
using hipMemcpyKind = cudaMemcpyKind;
using hipStreamCaptureMode = cudaStreamCaptureMode;
using hipDeviceProp_t = cudaDeviceProp;

constexpr hipError_t hipSuccess = cudaSuccess;
constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
constexpr hipStreamCaptureMode hipStreamCaptureModeGlobal = cudaStreamCaptureModeGlobal;

inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipPeekAtLastError() { return cudaPeekAtLastError(); }
inline hipError_t hipMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
template <typename T>
inline hipError_t hipMalloc(T** p, size_t n) { return cudaMalloc(reinterpret_cast<void**>(p), n); }
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipHostMalloc(void** p, size_t n, unsigned = 0) { return cudaMallocHost(p, n); }
inline hipError_t hipHostFree(void* p) { return cudaFreeHost(p); }
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, hipMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
inline hipError_t hipMemcpyAsync(void* d, const void* s, size_t n, hipMemcpyKind k, hipStream_t st) {
  return cudaMemcpyAsync(d, s, n, k, st);
}
inline hipError_t hipMemsetAsync(void* d, int v, size_t n, hipStream_t st) { return cudaMemsetAsync(d, v, n, st); }
inline hipError_t hipDeviceSynchronize() { return cudaDeviceSynchronize(); }
inline hipError_t hipGetDevice(int* d) { return cudaGetDevice(d); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) { return cudaGetDeviceProperties(p, d); }
inline hipError_t hipStreamCreate(hipStream_t* s) { return cudaStreamCreate(s); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s = nullptr) { return cudaEventRecord(e, s); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) { return cudaEventElapsedTime(ms, a, b); }
inline hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode m) { return cudaStreamBeginCapture(s, m); }
inline hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t* g) { return cudaStreamEndCapture(s, g); }
inline hipError_t hipGraphInstantiate(hipGraphExec_t* e, hipGraph_t g, void*, char*, size_t) {
  return cudaGraphInstantiate(e, g, 0);
}
inline hipError_t hipGraphLaunch(hipGraphExec_t e, hipStream_t s) { return cudaGraphLaunch(e, s); }
inline hipError_t hipGraphExecDestroy(hipGraphExec_t e) { return cudaGraphExecDestroy(e); }
inline hipError_t hipGraphDestroy(hipGraph_t g) { return cudaGraphDestroy(g); }
using hipFuncAttribute = cudaFuncAttribute;
constexpr hipFuncAttribute hipFuncAttributeMaxDynamicSharedMemorySize = cudaFuncAttributeMaxDynamicSharedMemorySize;
inline hipError_t hipFuncSetAttribute(const void* f, hipFuncAttribute a, int v) { return cudaFuncSetAttribute(f, a, v); }
using hipDeviceAttribute_t = cudaDeviceAttr;
constexpr hipDeviceAttribute_t hipDeviceAttributeMultiprocessorCount = cudaDevAttrMultiProcessorCount;
inline hipError_t hipDeviceGetAttribute(int* v, hipDeviceAttribute_t a, int d) { return cudaDeviceGetAttribute(v, a, d); }
inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* f, int threads, size_t shared) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, shared);
}

#else
#define KDA_PLATFORM_HIP 1
#include <hip/hip_runtime.h>
#endif

namespace kda {

#if defined(KDA_PLATFORM_CUDA)
constexpr int kWarpSize = 32;
constexpr bool kPlatformNvidia = true;  // for host rules on kernels that exist on NVIDIA only
#else
constexpr int kWarpSize = 64;  // CDNA wavefront; never assume 32 in shared code
constexpr bool kPlatformNvidia = false;
#endif

// A kernel parameter whose address device code may take (passed to a function that is not inlined) without a copy
// on the stack: __grid_constant__ on NVIDIA; nothing on AMD.
#if defined(KDA_PLATFORM_CUDA)
#define KDA_GRID_CONSTANT __grid_constant__
#else
#define KDA_GRID_CONSTANT
#endif

// Converts a runtime error into a Status (the runtime's message is a static string).
inline Status runtime_status(hipError_t e) {
  return e == hipSuccess ? Status() : Status(StatusCode::kRuntimeError, hipGetErrorString(e));
}

#if defined(__CUDACC__) || defined(__HIP__) || defined(__HIPCC__)
// Orders the memory accesses of a warp's lanes: NVIDIA may schedule them independently; AMD wavefronts run in
// lockstep.
__device__ inline void sync_warp() {
#if defined(KDA_PLATFORM_CUDA)
  __syncwarp();
#endif
}

// Butterfly shuffle across the whole warp/wavefront.
__device__ inline float shfl_xor(float x, int lane_mask) {
#if defined(KDA_PLATFORM_CUDA)
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
#else
  return __shfl_xor(x, lane_mask);
#endif
}
#endif

}  // namespace kda

// Evaluates a runtime call; on failure returns its error as a Status from the enclosing function. Never aborts.
#define KDA_RETURN_IF_RUNTIME_ERROR(expr)                        \
  do {                                                           \
    const hipError_t kda_err_ = (expr);                          \
    if (kda_err_ != hipSuccess) return ::kda::runtime_status(kda_err_); \
  } while (0)

// Checks the last launch on this thread; returns its error as a Status.
#define KDA_RETURN_IF_LAUNCH_ERROR() KDA_RETURN_IF_RUNTIME_ERROR(hipGetLastError())
