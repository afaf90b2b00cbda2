// Device-side building blocks shared by every stage: index-table loads, element loads/stores, gate math.
#pragma once

#include <cstdint>

#include "kda/numeric.hpp"
#include "kda/platform.hpp"
#include "kda/types.hpp"

namespace kda::detail {

// Reads entry i of an int32 or int64 table.
__device__ inline int64_t load_index(IndexSpan table, int64_t i) {
  return table.type == IndexType::kInt64 ? static_cast<const int64_t*>(table.data)[i]
                                         : static_cast<const int32_t*>(table.data)[i];
}

// index * stride for an index in [0, 2^31) (a token, head, row or chunk index: the launchers check T <= kMaxTokens and
// H <= kMaxHeads): the index enters as a 32-bit factor, so its own arithmetic (chunk.start + i) stays in 32 bits and
// the product needs no high-word terms for it. The same value as the plain int64 product, and shorter code. Keep it a
// plain product: with the high word added by hand NVVM split 16-byte stores into 4-byte ones (see
// docs/performance.md, "Index arithmetic").
__device__ inline int64_t index_times(int64_t index, int64_t stride) {
  return int64_t(uint64_t(uint32_t(index)) * uint64_t(stride));
}

// Offset, in elements, of element (t, h, d) of a [T,H,D] view: the one place the strides are applied.
template <typename View>
__device__ inline int64_t element_offset(const View& view, int64_t t, int h, int d) {
  return index_times(t, view.token_stride) + index_times(h, view.head_stride) + d;
}

// Loads element (t, h, d) of a view of 16-bit elements of type E as fp32.
template <typename E>
__device__ inline float load_elem(TensorView view, int64_t t, int h, int d) {
  const E* p = static_cast<const E*>(view.data);
  return numeric::to_float(p[element_offset(view, t, h, d)]);
}

// The 8 consecutive 16-bit elements (t, h, d .. d+7) of a view as raw bits, one 16-byte load. The caller guarantees
// the alignment (vector_aligned on the host, d a multiple of 8).
__device__ inline uint4 load16(TensorView view, int64_t t, int h, int d) {
  const uint16_t* base = static_cast<const uint16_t*>(view.data) + element_offset(view, t, h, d);
  return *reinterpret_cast<const uint4*>(base);
}

// Two floats to 8-byte aligned global memory as one 8-byte store. A float2 stored through a cast pointer reached PTX
// as two 4-byte stores wherever the compiler could not prove the alignment from the offset arithmetic (the state
// kernels' final-state rows, offsets d * V + col with V known only at run time); that doubles the store requests.
__device__ inline void store_float2(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && !defined(__HIP__)
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
#else
  *reinterpret_cast<float2*>(dst) = make_float2(x, y);
#endif
}

// Four floats as their hi + lo split in T (numeric::split_hi_lo's bits): one 8-byte store of the four his at hi[0..3]
// and one of the four los at lo[0..3] (shared or global memory, 8-byte aligned). The Tinv splits and Aqk's stores.
template <typename T>
__device__ inline void store_hi_lo4(uint16_t* hi, uint16_t* lo, float4 x) {
  const numeric::HiLoWords x01 = numeric::split_hi_lo2<T>(x.x, x.y), x23 = numeric::split_hi_lo2<T>(x.z, x.w);
  *reinterpret_cast<uint2*>(hi) = make_uint2(x01.hi, x23.hi);
  *reinterpret_cast<uint2*>(lo) = make_uint2(x01.lo, x23.lo);
}

// 16 bytes from global to shared memory without passing through registers, so that the copy flies while the thread
// goes on (NVIDIA sm_80+: cp.async.cg; elsewhere a plain load and store). copy16_async_wait() waits for all of this
// thread's copies; a barrier after it makes them visible to the block. Both addresses 16-byte aligned.
__device__ inline void copy16_async(void* shared_dst, const void* global_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src) : "memory");
#else
  *static_cast<uint4*>(shared_dst) = *static_cast<const uint4*>(global_src);
#endif
}
// The same, or 16 zero bytes when !valid (src is then not read, but must still be a valid address).
__device__ inline void copy16_async_zfill(void* shared_dst, const void* global_src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src), "r"(valid ? 16 : 0)
               : "memory");
#else
  *static_cast<uint4*>(shared_dst) = valid ? *static_cast<const uint4*>(global_src) : make_uint4(0, 0, 0, 0);
#endif
}
__device__ inline void copy16_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}
// Groups, for copies that run ahead: copy16_async_commit() closes this thread's copies issued since the last commit
// into a group; copy16_async_wait_prior() waits for every group but the newest.
__device__ inline void copy16_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ inline void copy16_async_wait_prior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
#endif
}

// Programmatic dependent launch (NVIDIA sm_90+; no-ops elsewhere and in kernels launched without it):
// allow_dependent_launch() lets the next kernel in the stream, when launched with programmatic stream serialization,
// start once every block of this one has called it or exited; wait_for_prior_grid() waits until the kernel before
// this one has completed and its writes are visible.
__device__ inline void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP__)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ inline void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP__)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Named barriers (NVIDIA: bar.sync / bar.arrive on barrier ids 1-15; id 0 is __syncthreads), for blocks whose warps
// play different roles: named_barrier_sync waits until `threads` threads (a multiple of the warp size) have reached
// barrier `id`, by either call; named_barrier_arrive counts the calling warp's threads and goes on without waiting.
// Either orders the caller's earlier memory accesses before the barrier completes, so a producer's arrive and a
// consumer's sync hand data over. AMD has no equivalent (kNamedBarriers is false): code that needs them is not
// instantiated there, and these trap if it ever is.
#if defined(KDA_PLATFORM_CUDA)
constexpr bool kNamedBarriers = true;
#else
constexpr bool kNamedBarriers = false;
#endif
__device__ inline void named_barrier_sync(int id, int threads) {
#if defined(__CUDA_ARCH__) && !defined(__HIP__)
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  (void)id;
  (void)threads;
  __builtin_trap();
#endif
}
__device__ inline void named_barrier_arrive(int id, int threads) {
#if defined(__CUDA_ARCH__) && !defined(__HIP__)
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  (void)id;
  (void)threads;
  __builtin_trap();
#endif
}

// The 8 16-bit E values packed in raw, as floats.
template <typename E>
__device__ inline void unpack8(const uint4& raw, float out[8]) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = numeric::to_float(E{bits[k]});
}

// load16 + unpack8.
template <typename E>
__device__ inline void load8(TensorView view, int64_t t, int h, int d, float out[8]) {
  unpack8<E>(load16(view, t, h, d), out);
}

// Loads 8 floats as two 16-byte loads: 4 at lo, then 4 at hi (each 16-byte aligned; apart where a layout permutes
// its quarters, e.g. the intra-chunk stage's swizzled staging rows).
__device__ inline void load8(const float* lo, const float* hi, float out[8]) {
  const float4 a = *reinterpret_cast<const float4*>(lo), b = *reinterpret_cast<const float4*>(hi);
  out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
  out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}
// Loads 8 consecutive floats at p (16-byte aligned) with two 16-byte loads.
__device__ inline void load8(const float* p, float out[8]) { load8(p, p + 4, out); }

// Loads element (t, h, d) of a view whose element type is only known at run time (raw gate, raw beta).
__device__ inline float load_scalar(TensorView view, ScalarType type, int64_t t, int h, int d) {
  const int64_t off = element_offset(view, t, h, d);
  switch (type) {
    case ScalarType::kFloat32: return static_cast<const float*>(view.data)[off];
    case ScalarType::kBFloat16: return numeric::bf16_to_float(static_cast<const uint16_t*>(view.data)[off]);
    default: return numeric::fp16_to_float(static_cast<const uint16_t*>(view.data)[off]);
  }
}

// The per-element forms of the two loads below: out of line, so that the cold path for unaligned views does not
// grow the hot loops' code (instruction-cache misses were ~10 % of a fused kernel's stalls).
__device__ __noinline__ inline uint4 load16_elementwise(TensorView view, int64_t t, int h, int d) {
  const uint16_t* base = static_cast<const uint16_t*>(view.data) + element_offset(view, t, h, d);
  return make_uint4(uint32_t(base[0]) | uint32_t(base[1]) << 16, uint32_t(base[2]) | uint32_t(base[3]) << 16,
                    uint32_t(base[4]) | uint32_t(base[5]) << 16, uint32_t(base[6]) | uint32_t(base[7]) << 16);
}
struct Floats8 {
  float4 lo, hi;
};
__device__ __noinline__ inline Floats8 load_scalar8_elementwise(TensorView view, ScalarType type, int64_t t, int h,
                                                                int d) {
  auto at = [&](int c) { return load_scalar(view, type, t, h, d + c); };
  return Floats8{make_float4(at(0), at(1), at(2), at(3)), make_float4(at(4), at(5), at(6), at(7))};
}

// The 8 consecutive 16-bit elements (t, h, d .. d+7) as raw bits: one 16-byte load when `vector` (the view is
// vector_aligned), else 8 element loads.
__device__ inline uint4 load16_any(TensorView view, bool vector, int64_t t, int h, int d) {
  return vector ? load16(view, t, h, d) : load16_elementwise(view, t, h, d);
}

// A 16-bit value (bf16 when type is kBFloat16, else fp16) as a float.
__device__ inline float widen16(uint16_t bits, ScalarType type) {
  return type == ScalarType::kBFloat16 ? numeric::bf16_to_float(bits) : numeric::fp16_to_float(bits);
}
// The eight 16-bit values of `raw` as floats (widen16 each).
__device__ inline void widen16x8(uint4 raw, ScalarType type, float out[8]) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int c = 0; c < 8; ++c) out[c] = widen16(bits[c], type);
}

// Elements (t, h, d .. d+7) of a view whose element type is known only at run time, as floats: 16-byte loads when
// `vector` (scalar_vector_aligned on the host, d a multiple of 8), else per element.
__device__ inline void load_scalar8(TensorView view, ScalarType type, bool vector, int64_t t, int h, int d,
                                    float out[8]) {
  const int64_t off = element_offset(view, t, h, d);
  if (vector && type == ScalarType::kFloat32) {
    load8(static_cast<const float*>(view.data) + off, out);
  } else if (vector) {
    widen16x8(*reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(view.data) + off), type, out);
  } else {  // returned by value: an array passed out of line would have to live in local memory
    const Floats8 x = load_scalar8_elementwise(view, type, t, h, d);
    out[0] = x.lo.x, out[1] = x.lo.y, out[2] = x.lo.z, out[3] = x.lo.w;
    out[4] = x.hi.x, out[5] = x.hi.y, out[6] = x.hi.z, out[7] = x.hi.w;
  }
}

// Rounds v to E and stores it at (t, h, d) of a mutable view.
template <typename E>
__device__ inline void store_elem(MutableTensorView view, int64_t t, int h, int d, float v) {
  E* p = static_cast<E*>(view.data);
  p[element_offset(view, t, h, d)] = numeric::from_float<E>(v);
}

// Stores 16 bytes (8 consecutive 16-bit elements) at (t, h, d .. d+7) of a mutable view; alignment as for load8.
__device__ inline void store16(MutableTensorView view, int64_t t, int h, int d, uint4 raw) {
  uint16_t* base = static_cast<uint16_t*>(view.data) + element_offset(view, t, h, d);
  *reinterpret_cast<uint4*>(base) = raw;
}

// Rounds 8 floats to E and packs them for store16: four numeric::pack2, each one paired conversion on NVIDIA
// instead of a conversion plus packing instructions per element.
template <typename E>
__device__ inline uint4 pack8(const float v[8]) {
  return make_uint4(numeric::pack2<E>(v[0], v[1]), numeric::pack2<E>(v[2], v[3]), numeric::pack2<E>(v[4], v[5]),
                    numeric::pack2<E>(v[6], v[7]));
}

// exp2(x) for the decay factors of the chunk stages (x <= 0 there, though any x works). On NVIDIA it is the bare
// ex2.approx.ftz instruction: exp2f is the same instruction plus a rescaling path for results below 2^-126, which
// the decays do not need (flushing a factor below 1e-38 to zero changes no output) and which cost the hot loops
// three extra instructions per exponential.
__device__ inline float decay_exp2(float x) {
#if defined(__CUDA_ARCH__) && !defined(__HIP__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// softplus with FLA's threshold: x for x > 20, else log(1 + e^x), computed as max(x, 0) + log(1 + e^-|x|) so that
// the fast hardware exponential and logarithm (__expf, __logf: one ex2 / lg2 each) only see arguments where they are
// accurate: e^-|x| in (0, 1], a log of (1, 2]. Absolute error below ~2e-7 (lg2.approx is within 2^-22.6 on [1, 2];
// where e^-|x| < 2^-24 the log term rounds to 0 against a true value below 6e-8), which is what the decays care
// about: G is a sum of gates. NaN stays NaN, -inf gives 0, and nothing overflows. Both sides are formed and one is
// selected (no branch per element: the fused prepare evaluates this for every gate it stages). expf + log1pf made
// the gate stage compute-bound (see docs/performance.md, "Gate activation").
__device__ inline float softplus(float x) {
  const float smooth = fmaxf(x, 0.0f) + __logf(1.0f + __expf(-fabsf(x)));
  return x > 20.0f ? x : smooth;
}

// The activated beta used by Akk and w/u: raw, sigmoid(raw) or 2*sigmoid(raw).
__device__ inline float activate_beta(float raw, BetaActivation act) {
  switch (act) {
    case BetaActivation::kSigmoid: return sigmoid(raw);
    case BetaActivation::kSigmoidTimesTwo: return 2.0f * sigmoid(raw);
    default: return raw;
  }
}

// The chunk-local gate sum's order, which every kernel that forms G (the gate stage, the fused prepare) follows so
// that they give the same bits: the chunk's rows fall into segments of kGateSumSegment; within a segment a running
// sum from its first row (local_i), and G_i = RCP_LN2 * (base + local_i), where base is the running sum of the
// earlier segments' totals. A thread per (segment, channel) can form it, not only a thread walking all the rows.
// gate_cumsum_add is never fused with the gate's last multiply into an FMA, whatever the compiler contracts.
constexpr int kGateSumSegment = 8;
__device__ inline float gate_cumsum_add(float cumulative, float gate) { return __fadd_rn(cumulative, gate); }

// The l2norm pre-step's arithmetic, shared by qk_l2norm_vec_kernel and the fused prepare so that both give the same
// bits: a row's sum of squares is formed 8 channels at a time (explicit FMAs), then over lanes by a butterfly.
__device__ inline float sum_squares8(const float x[8]) {
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < 8; ++c) s = fmaf(x[c], x[c], s);
  return s;
}
__device__ inline float l2_inv_norm(float sum_sq) { return 1.0f / sqrtf(sum_sq + 1e-6f); }

// Per-element natural-log gate of KDA_SPEC §1.1 from x = raw + dt_bias.
//   a_log_exp = exp(A_log[h]) (1 when A_log is absent, lower-bound gate only).
__device__ inline float gate_value(float x, GateKind kind, float a_log_exp, float lower_bound) {
  switch (kind) {
    case GateKind::kSoftplus: return -a_log_exp * softplus(x);
    // lower_bound * sigmoid(a x) through the fast hardware exponential and division (2 ulp; __fdividef gives the
    // limit 0 when __expf overflows to inf): G only needs absolute accuracy, and expf + an IEEE division made this
    // the slower gate once softplus took the fast form (docs/performance.md, "Gate activation").
    case GateKind::kLowerBound: return __fdividef(lower_bound, 1.0f + __expf(-a_log_exp * x));
    default: return x;
  }
}

}  // namespace kda::detail
