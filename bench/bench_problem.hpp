// One chunk_kda_fwd problem on the device: random inputs generated there, the chunk tables either built on the host
// and uploaded once (builder) or left for the device to derive on every call (derived), and a workspace.
// Everything here happens at setup, which is not timed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batches.hpp"
#include "device_buffer.hpp"
#include "kda/chunk_kda.hpp"
#include "kda/metadata_upload.hpp"
#include "options.hpp"
#include "random_fill.hpp"

namespace kda::bench {

enum class MetadataMode { kBuilder, kDerived };
enum class GateVariant {
  kSoftplus,    // g = -exp(A_log[h]) softplus(raw + dt_bias): Kimi Linear's gate
  kLowerBound,  // g = -5 sigmoid(raw + dt_bias), no A_log: the "safe gate" (FlashKDA's)
};

inline const char* mode_name(MetadataMode m) { return m == MetadataMode::kBuilder ? "builder" : "derived"; }
inline const char* gate_name(GateVariant g) { return g == GateVariant::kSoftplus ? "softplus" : "gate_lb"; }

struct ProblemConfig {
  std::vector<int64_t> cu_seqlens;
  int H = kHeads, K = kHeadDimK, V = kHeadDimV;
  DType dtype = DType::kBF16;  // q, k, v and o (the gate, beta and states stay fp32)
  GateVariant gate = GateVariant::kSoftplus;
  MetadataMode mode = MetadataMode::kBuilder;
  uint64_t seed = 0;
};

class BenchProblem {
 public:
  // Allocates and fills everything on `stream`, then synchronises it. On error the problem is unusable.
  Status init(const ProblemConfig& c, hipStream_t stream) {
    config_ = c;
    const int64_t N = int64_t(c.cu_seqlens.size()) - 1, T = c.cu_seqlens.back();
    const size_t tk = size_t(T) * c.H * c.K, tv = size_t(T) * c.H * c.V, th = size_t(T) * c.H;
    const size_t state_elems = size_t(N) * c.H * c.K * c.V;

    KDA_RETURN_IF_RUNTIME_ERROR(q.allocate(tk * 2));
    KDA_RETURN_IF_RUNTIME_ERROR(k.allocate(tk * 2));
    KDA_RETURN_IF_RUNTIME_ERROR(v.allocate(tv * 2));
    KDA_RETURN_IF_RUNTIME_ERROR(g.allocate(tk * sizeof(float)));
    KDA_RETURN_IF_RUNTIME_ERROR(beta.allocate(th * sizeof(float)));
    KDA_RETURN_IF_RUNTIME_ERROR(A_log.allocate(size_t(c.H) * sizeof(float)));
    KDA_RETURN_IF_RUNTIME_ERROR(dt_bias.allocate(size_t(c.H) * c.K * sizeof(float)));
    KDA_RETURN_IF_RUNTIME_ERROR(state_in.allocate(state_elems * sizeof(float)));
    KDA_RETURN_IF_RUNTIME_ERROR(state_out.allocate(state_elems * sizeof(float)));
    KDA_RETURN_IF_RUNTIME_ERROR(o.allocate(tv * 2));
    KDA_RETURN_IF_RUNTIME_ERROR(cu.allocate(size_t(N + 1) * sizeof(int32_t)));

    // Inputs as in FLA's tests: q, k, v ~ U[0,1) (q, k unnormalised: l2norm runs in the kernel), raw g ~ N(0,1),
    // raw beta ~ N(0,1) (sigmoid in the kernel), A_log = log U[1,16), dt_bias ~ N(0,1), initial state ~ N(0,1).
    const uint64_t s = c.seed * 16;
    const FillType io = c.dtype == DType::kFP16 ? FillType::kFloat16 : FillType::kBFloat16;
    KDA_RETURN_IF_RUNTIME_ERROR(fill_random(q.get(), tk, io, Distribution::kUniform01, s + 1, stream));
    KDA_RETURN_IF_RUNTIME_ERROR(fill_random(k.get(), tk, io, Distribution::kUniform01, s + 2, stream));
    KDA_RETURN_IF_RUNTIME_ERROR(fill_random(v.get(), tv, io, Distribution::kUniform01, s + 3, stream));
    KDA_RETURN_IF_RUNTIME_ERROR(fill_random(g.get(), tk, FillType::kFloat32, Distribution::kNormal, s + 4, stream));
    KDA_RETURN_IF_RUNTIME_ERROR(fill_random(beta.get(), th, FillType::kFloat32, Distribution::kNormal, s + 5, stream));
    KDA_RETURN_IF_RUNTIME_ERROR(
        fill_random(A_log.get(), size_t(c.H), FillType::kFloat32, Distribution::kLogUniform1To16, s + 6, stream));
    KDA_RETURN_IF_RUNTIME_ERROR(
        fill_random(dt_bias.get(), size_t(c.H) * c.K, FillType::kFloat32, Distribution::kNormal, s + 7, stream));
    KDA_RETURN_IF_RUNTIME_ERROR(
        fill_random(state_in.get(), state_elems, FillType::kFloat32, Distribution::kNormal, s + 8, stream));

    cu_host_.assign(c.cu_seqlens.begin(), c.cu_seqlens.end());
    KDA_RETURN_IF_RUNTIME_ERROR(
        hipMemcpyAsync(cu.get(), cu_host_.data(), cu_host_.size() * sizeof(int32_t), hipMemcpyHostToDevice, stream));

    ChunkKdaArgs& a = args;
    a = ChunkKdaArgs();
    StageGeometry& geo = a.geometry;
    geo.metadata.cu_seqlens = IndexSpan{cu.get(), IndexType::kInt32};
    geo.metadata.num_sequences = N;
    geo.metadata.total_tokens = T;
    geo.num_heads = c.H;
    geo.head_dim_k = c.K;
    geo.head_dim_v = c.V;
    geo.chunk_size = kChunkSize;
    geo.dtype = c.dtype;

    KDA_RETURN_IF_ERROR(count_chunks(cu_host_.data(), IndexType::kInt32, N, kChunkSize, T, &num_chunks));
    if (c.mode == MetadataMode::kBuilder) {
      // The host builder's path, done once: build both tables into pinned memory and upload them with one copy.
      const size_t bytes = chunk_metadata_bytes(num_chunks, N, IndexType::kInt32);
      KDA_RETURN_IF_RUNTIME_ERROR(staging.allocate(bytes));
      KDA_RETURN_IF_RUNTIME_ERROR(tables.allocate(bytes));
      DeviceChunkMetadata meta;
      KDA_RETURN_IF_ERROR(upload_chunk_metadata(cu_host_.data(), IndexType::kInt32, N, kChunkSize, T,
                                                IndexType::kInt32, staging.get(), staging.bytes(), tables.get(),
                                                tables.bytes(), stream, &meta));
      geo.metadata.chunk_indices = meta.chunk_indices;
      geo.metadata.chunk_offsets = meta.chunk_offsets;
      geo.metadata.num_chunks = meta.num_chunks;
      geo.metadata.max_sequence_tokens = meta.max_sequence_tokens;  // what the builder knows on the host
    } else if (bench_options().derived_bound) {
      KDA_RETURN_IF_ERROR(longest_sequence(cu_host_.data(), IndexType::kInt32, N, T, &geo.metadata.max_sequence_tokens));
    }

    a.q = contiguous_view(static_cast<const void*>(q.get()), c.H, c.K);
    a.k = contiguous_view(static_cast<const void*>(k.get()), c.H, c.K);
    a.v = contiguous_view(static_cast<const void*>(v.get()), c.H, c.V);
    a.g = contiguous_view(static_cast<const void*>(g.get()), c.H, c.K);
    a.g_type = ScalarType::kFloat32;
    a.beta = TensorView{beta.get(), c.H, 1};
    a.beta_type = ScalarType::kFloat32;
    if (c.gate == GateVariant::kSoftplus) {
      a.gate = GateKind::kSoftplus;
      a.A_log = A_log.as<float>();
    } else {
      a.gate = GateKind::kLowerBound;
      a.A_log = nullptr;
      a.lower_bound = -5.0f;
    }
    a.dt_bias = dt_bias.as<float>();
    a.beta_activation = BetaActivation::kSigmoid;
    a.qk_l2norm = true;
    a.scale = 0.0f;
    a.state.initial_state = state_in.as<float>();
    a.state.final_state = state_out.as<float>();
    a.state.layout = StateLayout::kKFirst;
    a.o = contiguous_view(o.get(), c.H, c.V);

    KDA_RETURN_IF_RUNTIME_ERROR(workspace.allocate(chunk_kda_workspace_size(a)));
    if (forced()) {
      KDA_RETURN_IF_RUNTIME_ERROR(
          forced_workspace.allocate(detail::chunk_kda_workspace_layout(a, forced_path(), forced_output()).total));
    }
    KDA_RETURN_IF_RUNTIME_ERROR(hipStreamSynchronize(stream));
    return Status();
  }

  // The output form the end-to-end benchmarks force (--kda_output_separate), else kAuto.
  static detail::ChunkKdaOutput forced_output() {
    return bench_options().output_separate ? detail::ChunkKdaOutput::kSeparate : detail::ChunkKdaOutput::kAuto;
  }
  // The form they force (--kda_staged), else kAuto.
  static detail::ChunkKdaPath forced_path() {
    return bench_options().staged ? detail::ChunkKdaPath::kStaged : detail::ChunkKdaPath::kAuto;
  }
  static bool forced() {
    return forced_output() != detail::ChunkKdaOutput::kAuto || forced_path() != detail::ChunkKdaPath::kAuto;
  }
  // One chunk_kda_fwd call on `stream`: what the end-to-end benchmarks time (with a forced form, that form, in a
  // workspace of its own).
  Status run(hipStream_t stream) const {
    const int regs = bench_options().state_regs_warps;  // --kda_state_regs_warps: the state launch's form
    const int warp_short = bench_options().warp_short;   // --kda_warp_short: the prepare's form
    if (forced() || regs != -1 || warp_short != -1) {
      const DeviceBuffer& ws = forced() ? forced_workspace : workspace;
      return detail::chunk_kda_fwd_on_path(args, ws.get(), ws.bytes(), stream, forced_path(), forced_output(), regs,
                                           warp_short);
    }
    return chunk_kda_fwd(args, workspace.get(), workspace.bytes(), stream);
  }
  // The workspace run() uses.
  size_t run_workspace_bytes() const { return forced() ? forced_workspace.bytes() : workspace.bytes(); }

  const ProblemConfig& config() const { return config_; }

  ChunkKdaArgs args;
  DeviceBuffer q, k, v, g, beta, A_log, dt_bias, cu, tables, state_in, state_out, o, workspace, forced_workspace;
  PinnedBuffer staging;
  int64_t num_chunks = 0;  // host NT

 private:
  ProblemConfig config_;
  std::vector<int32_t> cu_host_;
};

}  // namespace kda::bench
