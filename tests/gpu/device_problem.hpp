// Puts a reference KdaProblem on the device and builds the ChunkKdaArgs that point into it, with the chunk tables
// either from the host builder or left for the device to derive.
#pragma once

#include <memory>

#include "gpu_test_utils.hpp"

namespace kda::test {

enum class MetadataMode { kHostBuilder, kDeviceDerived };

inline const char* mode_name(MetadataMode m) { return m == MetadataMode::kHostBuilder ? "builder" : "derived"; }

struct DeviceProblemOptions {
  MetadataMode mode = MetadataMode::kHostBuilder;
  IndexType index_type = IndexType::kInt32;       // of cu_seqlens and of the builder's tables
  StateLayout state_layout = StateLayout::kKFirst;
  ScalarType g_type = ScalarType::kFloat32;       // how g is stored on the device
  ScalarType beta_type = ScalarType::kFloat32;    // how beta is stored on the device
  bool o_aliases_v = false;                       // vLLM: o = v
  int chunk_size = 64;
  int64_t max_sequence_tokens = 0;                // ChunkMetadataArgs::max_sequence_tokens (0 = unknown)
};

// An fp32 state pool of `slots` (sequence, head) states, each [K,V] (K-first) turned into [V,K] (V-first), or back.
inline std::vector<float> transposed_state_pool(const std::vector<float>& x, int64_t slots, int K, int V,
                                                bool to_v_first) {
  std::vector<float> y(x.size());
  for (int64_t s = 0; s < slots; ++s)
    for (int d = 0; d < K; ++d)
      for (int e = 0; e < V; ++e) {
        const size_t k_first = (size_t(s) * K + d) * V + e, v_first = (size_t(s) * V + e) * K + d;
        if (to_v_first) y[v_first] = x[k_first]; else y[k_first] = x[v_first];
      }
  return y;
}

// cu_seqlens of sequences of every length 1-17 (each its only chunk: the staged prepare's short path takes 1-16, the
// long one 17), then two whose last chunks are 9 and 16 rows, then a decode.
inline std::vector<int64_t> every_short_length_cu() {
  std::vector<int64_t> lengths;
  for (int64_t l = 1; l <= 17; ++l) lengths.push_back(l);
  lengths.push_back(64 + 9);
  lengths.push_back(64 + 16);
  lengths.push_back(1);  // a decode after them; and T / N <= 16, so chunk_kda_fwd runs the short-sequence state kernel
  std::vector<int64_t> cu;
  EXPECT_TRUE(make_prefill_cu_seqlens(lengths, &cu).is_ok());
  return cu;
}

// Inputs and outputs of one chunk_kda_fwd call, on the device.
struct DeviceProblem {
  ref::KdaProblem problem;
  DeviceProblemOptions options;
  DeviceBuffer q, k, v, g, beta, A_log, dt_bias, cu, tables, state_in, state_out, o, workspace;
  ChunkKdaArgs args;
  int64_t num_chunks = 0;  // host NT (for reading h back)

  std::vector<float> read_o() const {
    const size_t n = size_t(problem.T) * problem.H * problem.V;
    return download_dtype(options.o_aliases_v ? v.get() : o.get(), n, problem.io_dtype);
  }
  // Final state converted back to K-first [N,H,K,V].
  std::vector<float> read_final_state() const {
    const int64_t N = problem.num_sequences();
    const size_t n = size_t(N) * problem.H * problem.K * problem.V;
    std::vector<float> raw = download_floats(state_out.get(), n);
    if (options.state_layout == StateLayout::kKFirst) return raw;
    return transposed_state_pool(raw, N * problem.H, problem.K, problem.V, /*to_v_first=*/false);
  }
};

// Stores `x` on the device as `type` (values are assumed representable when type is 16-bit).
inline DeviceBuffer upload_scalars(const std::vector<float>& x, ScalarType type) {
  if (type == ScalarType::kFloat32) return upload_floats(x);
  return upload_dtype(x, type == ScalarType::kBFloat16 ? DType::kBF16 : DType::kFP16);
}

inline DeviceBuffer upload_indices(const std::vector<int64_t>& x, IndexType type) {
  DeviceBuffer b(std::max<size_t>(1, x.size()) * index_type_size(type));
  if (type == IndexType::kInt64) {
    b.upload(x.data(), x.size() * sizeof(int64_t));
  } else {
    std::vector<int32_t> narrow(x.begin(), x.end());
    b.upload(narrow.data(), narrow.size() * sizeof(int32_t));
  }
  return b;
}

// Uploads every input, sizes the outputs and the workspace, and fills dp->args. Returns false on a setup failure.
inline std::unique_ptr<DeviceProblem> make_device_problem(const ref::KdaProblem& p, const DeviceProblemOptions& opt) {
  auto dp = std::make_unique<DeviceProblem>();
  dp->problem = p;
  dp->options = opt;
  const int64_t N = p.num_sequences();
  const DType dt = p.io_dtype;

  dp->q = upload_dtype(p.q, dt);
  dp->k = upload_dtype(p.k, dt);
  dp->v = upload_dtype(p.v, dt);
  dp->g = upload_scalars(p.g, opt.g_type);
  dp->beta = upload_scalars(p.beta, opt.beta_type);
  if (!p.A_log.empty()) dp->A_log = upload_floats(p.A_log);
  if (!p.dt_bias.empty()) dp->dt_bias = upload_floats(p.dt_bias);
  dp->cu = upload_indices(p.cu_seqlens, opt.index_type);

  const size_t state_elems = size_t(N) * p.H * p.K * p.V;
  if (!p.initial_state.empty()) {
    // K-first reference -> the device layout.
    dp->state_in = upload_floats(opt.state_layout == StateLayout::kVFirst
                                     ? transposed_state_pool(p.initial_state, N * p.H, p.K, p.V, /*to_v_first=*/true)
                                     : p.initial_state);
  }
  dp->state_out.allocate(std::max<size_t>(1, state_elems) * sizeof(float));
  dp->o.allocate(std::max<size_t>(1, size_t(p.T) * p.H * p.V) * dtype_size(dt));

  ChunkKdaArgs& a = dp->args;
  StageGeometry& g = a.geometry;
  g.metadata.cu_seqlens = IndexSpan{dp->cu.get(), opt.index_type};
  g.metadata.num_sequences = N;
  g.metadata.total_tokens = p.T;
  g.metadata.max_sequence_tokens = opt.max_sequence_tokens;
  g.num_heads = p.H;
  g.head_dim_k = p.K;
  g.head_dim_v = p.V;
  g.chunk_size = opt.chunk_size;
  g.dtype = dt;

  ChunkMetadata meta;
  if (!build_chunk_metadata(p.cu_seqlens, opt.chunk_size, &meta).is_ok()) return nullptr;
  dp->num_chunks = meta.num_chunks;
  if (opt.mode == MetadataMode::kHostBuilder) {
    std::vector<int64_t> packed = meta.chunk_indices;
    const size_t offsets_at = packed.size();
    packed.insert(packed.end(), meta.chunk_offsets.begin(), meta.chunk_offsets.end());
    dp->tables = upload_indices(packed, opt.index_type);
    g.metadata.chunk_indices = IndexSpan{dp->tables.get(), opt.index_type};
    g.metadata.chunk_offsets =
        IndexSpan{dp->tables.as<char>() + offsets_at * index_type_size(opt.index_type), opt.index_type};
    g.metadata.num_chunks = meta.num_chunks;
  }

  a.q = contiguous_view(static_cast<const void*>(dp->q.get()), p.H, p.K);
  a.k = contiguous_view(static_cast<const void*>(dp->k.get()), p.H, p.K);
  a.v = contiguous_view(static_cast<const void*>(dp->v.get()), p.H, p.V);
  a.g = contiguous_view(static_cast<const void*>(dp->g.get()), p.H, p.K);
  a.g_type = opt.g_type;
  a.beta = TensorView{dp->beta.get(), p.H, 1};
  a.beta_type = opt.beta_type;
  a.gate = p.gate;
  a.A_log = dp->A_log.as<float>();
  a.dt_bias = dp->dt_bias.as<float>();
  a.lower_bound = p.lower_bound;
  a.beta_activation = p.beta_activation;
  a.qk_l2norm = p.qk_l2norm;
  a.scale = p.scale;
  a.state.initial_state = dp->state_in.as<float>();
  a.state.final_state = p.want_final_state ? dp->state_out.as<float>() : nullptr;
  a.state.layout = opt.state_layout;
  a.o = opt.o_aliases_v ? contiguous_view(dp->v.get(), p.H, p.V) : contiguous_view(dp->o.get(), p.H, p.V);

  dp->workspace.allocate(chunk_kda_workspace_size(a));
  return dp;
}

// The register-state kernel's forms the GPU tests check, as StateRecurrenceArgs::regs_warps; a test skips those
// detail::state_regs_ok refuses for its sizes.
constexpr int kRegisterStateWarps[] = {2, 4, 8};

// Writes p's inputs (q, k, v, fp32 g and beta, A_log, dt_bias, the initial state, cu_seqlens) into dp's buffers, for
// a graph captured on dp to replay on them: p must have dp's sizes (the same T, N, H, K, V and gate options).
inline void upload_inputs(DeviceProblem& dp, const ref::KdaProblem& p) {
  dp.q.upload(to_dtype_bits(p.q, p.io_dtype).data(), dp.q.bytes());
  dp.k.upload(to_dtype_bits(p.k, p.io_dtype).data(), dp.k.bytes());
  dp.v.upload(to_dtype_bits(p.v, p.io_dtype).data(), dp.v.bytes());
  dp.g.upload(p.g.data(), dp.g.bytes());
  dp.beta.upload(p.beta.data(), dp.beta.bytes());
  dp.A_log.upload(p.A_log.data(), dp.A_log.bytes());
  dp.dt_bias.upload(p.dt_bias.data(), dp.dt_bias.bytes());
  dp.state_in.upload(p.initial_state.data(), dp.state_in.bytes());
  const DeviceBuffer cu = upload_indices(p.cu_seqlens, dp.options.index_type);
  (void)hipMemcpy(dp.cu.get(), cu.get(), dp.cu.bytes(), hipMemcpyDeviceToDevice);
}

// Fills every buffer a chunk_kda_fwd call writes with 0xff (NaN) on `stream`: o (unless it is v), the final state
// (unless the call updates the initial state in place) and the whole workspace. Every run starts from these, so a
// kernel that leaves a row, a state or an intermediate unwritten shows, whatever an earlier run left there.
inline void poison_outputs(DeviceProblem& dp, hipStream_t stream = nullptr) {
  const int fill = DeviceBuffer::kPoisonByte;
  if (!dp.options.o_aliases_v && dp.o.get() != nullptr) (void)hipMemsetAsync(dp.o.get(), fill, dp.o.bytes(), stream);
  float* final_state = dp.args.state.final_state;
  if (final_state == dp.state_out.as<float>() && final_state != dp.args.state.initial_state && final_state != nullptr)
    (void)hipMemsetAsync(final_state, fill, dp.state_out.bytes(), stream);
  if (dp.workspace.get() != nullptr) (void)hipMemsetAsync(dp.workspace.get(), fill, dp.workspace.bytes(), stream);
}

// Enqueues chunk_kda_fwd on `stream` for a prepared problem, after poison_outputs (also under graph capture: the
// fills are captured with it, so every replay starts from them too).
inline Status run_chunk_kda(DeviceProblem& dp, hipStream_t stream = nullptr) {
  poison_outputs(dp, stream);
  return chunk_kda_fwd(dp.args, dp.workspace.get(), dp.workspace.bytes(), stream);
}

}  // namespace kda::test
