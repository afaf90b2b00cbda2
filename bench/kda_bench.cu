// The benchmarks (docs/benchmarks.md):
//   e2e/<batch>/<mode>[/gate_lb]        chunk_kda_fwd, softplus gate (or the lower-bound gate)
//   stage/<stage>/<batch>/<mode>        one stage's public launcher on the intermediates of a chunk_kda_fwd call
//   metadata/upload/<batch>             the host builder's per-step work: build the tables + one async upload
//   shape/<batch>/<dtype>_k<K>_v<V>     chunk_kda_fwd (builder, softplus) at other I/O types and head dims, so that
//                                       the kernels the figures above do not run are timed too (a regression guard)
// <mode> is `builder` (tables built on the host and uploaded once at setup, host NT) or `derived` (no tables: the
// call derives them on the device). Google Benchmark appends /manual_time to every name.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "accuracy_check.hpp"
#include "batches.hpp"
#include "bench_problem.hpp"
#include "entry_points.hpp"
#include "gpu_timer.hpp"
#include "stage_runner.hpp"
#include "work_model.hpp"

namespace kda::bench {
namespace {

// The stream every benchmark runs on; created on first use, so registering and listing touch no GPU.
hipStream_t& stream_slot() {
  static hipStream_t stream = nullptr;
  return stream;
}
Status bench_stream(hipStream_t* out) {
  if (stream_slot() == nullptr) KDA_RETURN_IF_RUNTIME_ERROR(hipStreamCreate(&stream_slot()));
  *out = stream_slot();
  return Status();
}

// The last problem set up, kept while consecutive benchmarks (and Google Benchmark's repeated calls of one
// benchmark while it sizes the iteration count) use the same one; at most one problem is alive at a time.
struct CachedProblem {
  std::string key;
  std::unique_ptr<BenchProblem> problem;
  std::unique_ptr<StageRunner> stages;
};
CachedProblem& cache() {
  static CachedProblem c;
  return c;
}

// The I/O type and head dims of a problem: the batches' own (bf16, K = V = 128) unless a shape/ benchmark asks.
struct HeadShape {
  DType dtype = DType::kBF16;
  int K = kHeadDimK, V = kHeadDimV;
};
std::string shape_name(const HeadShape& s) {
  return std::string(s.dtype == DType::kFP16 ? "fp16" : "bf16") + "_k" + std::to_string(s.K) + "_v" +
         std::to_string(s.V);
}

// Sets up (or reuses) the problem of a batch; runs chunk_kda_fwd once so that the workspace holds real
// intermediates for the stage benchmarks.
Status get_problem(const BatchSpec& batch, MetadataMode mode, GateVariant gate, hipStream_t stream,
                   CachedProblem** out, const HeadShape& shape = HeadShape()) {
  CachedProblem& c = cache();
  const std::string key = batch.name + "/" + mode_name(mode) + "/" + gate_name(gate) + "/" + shape_name(shape);
  if (c.key != key || !c.problem) {
    c.stages.reset();
    c.problem.reset();  // free the previous problem's memory before allocating the next
    c.key.clear();
    auto p = std::make_unique<BenchProblem>();
    ProblemConfig config;
    config.cu_seqlens = batch.cu_seqlens;
    config.gate = gate;
    config.mode = mode;
    config.H = bench_options().heads;
    config.dtype = shape.dtype;
    config.K = shape.K;
    config.V = shape.V;
    KDA_RETURN_IF_ERROR(p->init(config, stream));
    KDA_RETURN_IF_ERROR(p->run(stream));
    KDA_RETURN_IF_RUNTIME_ERROR(hipStreamSynchronize(stream));
    c.stages = std::make_unique<StageRunner>(*p);
    c.problem = std::move(p);
    c.key = key;
  }
  *out = &c;
  return Status();
}

WorkShape shape_of(const BatchSpec& b, const HeadShape& head = HeadShape()) {
  WorkShape s;
  s.cu_seqlens = b.cu_seqlens;
  s.H = bench_options().heads;
  s.K = head.K;
  s.V = head.V;
  s.BT = kChunkSize;
  s.io_bytes = 2;
  return s;
}

std::string label_of(const BatchSpec& b) {
  std::string label = "N=" + std::to_string(b.num_sequences()) + " T=" + std::to_string(b.total_tokens()) +
                      " NT=" + std::to_string(batch_num_chunks(b));
  if (bench_options().heads != kHeads) label += " H=" + std::to_string(bench_options().heads);
  return label;
}

// The counters every benchmark reports (docs/benchmarks.md): per-call GPU ms and host µs, TFLOP/s and GB/s over the
// GPU time, and the batch's token count.
void set_counters(benchmark::State& state, const Measurement& m, double flops, double bytes, const BatchSpec& b) {
  using benchmark::Counter;
  const double seconds = m.gpu_ms() * 1e-3;
  state.counters["gpu_ms"] = Counter(m.gpu_ms_per_call_sum, Counter::kAvgIterations);
  state.counters["host_us"] = Counter(m.host_us_per_call_sum, Counter::kAvgIterations);
  state.counters["TFLOPs"] = Counter(seconds > 0 ? flops / seconds * 1e-12 : 0.0);
  state.counters["GBps"] = Counter(seconds > 0 ? bytes / seconds * 1e-9 : 0.0);
  state.counters["tokens"] = Counter(double(b.total_tokens()));
  state.SetLabel(label_of(b));
}

bool setup_failed(benchmark::State& state, const Status& s) {
  if (s.is_ok()) return false;
  state.SkipWithError((std::string("setup failed: ") + s.message()).c_str());
  return true;
}

// chunk_kda_fwd end to end: e2e/ at the batches' own shape, shape/ (builder tables, softplus gate) at another I/O
// type or head dims.
void bm_e2e(benchmark::State& state, const BatchSpec* batch, MetadataMode mode, GateVariant gate, HeadShape head) {
  hipStream_t stream = nullptr;
  CachedProblem* c = nullptr;
  if (setup_failed(state, bench_stream(&stream))) return;
  if (setup_failed(state, get_problem(*batch, mode, gate, stream, &c, head))) return;
  const BenchProblem& p = *c->problem;
  Measurement m;
  if (!time_calls(state, stream, [&](hipStream_t s) { return p.run(s); }, &m)) return;
  const WorkShape shape = shape_of(*batch, head);
  set_counters(state, m, count_flops(shape).total(), e2e_bytes(shape), *batch);
  // The workspace chunk_kda_fwd asks for, and its ratio to issue 5's target: 1.5x the bytes of q, k, v (I/O dtype)
  // and an fp32 g.
  const double workspace = double(p.run_workspace_bytes());
  const double T = double(batch->total_tokens()), qkvg = T * shape.H * ((2.0 * shape.K + shape.V) * shape.io_bytes +
                                                                       4.0 * shape.K);
  state.counters["workspace_MB"] = benchmark::Counter(workspace * 1e-6);
  state.counters["workspace_vs_target"] = benchmark::Counter(qkvg > 0 ? workspace / (1.5 * qkvg) : 0.0);
}

void bm_stage(benchmark::State& state, const BatchSpec* batch, StageKind stage, MetadataMode mode) {
  hipStream_t stream = nullptr;
  CachedProblem* c = nullptr;
  if (setup_failed(state, bench_stream(&stream))) return;
  if (setup_failed(state, get_problem(*batch, mode, GateVariant::kSoftplus, stream, &c))) return;
  const StageRunner& runner = *c->stages;
  Measurement m;
  if (!time_calls(state, stream, [&](hipStream_t s) { return runner.run(stage, s); }, &m)) return;
  const WorkShape shape = shape_of(*batch);
  set_counters(state, m, stage_flops(shape, stage), stage_bytes(shape, stage), *batch);
}

// The builder's per-step cost in an engine: build both tables from host cu_seqlens into pinned memory and enqueue
// their one upload. Bytes: the packed tables. Back-to-back calls rewrite the staging buffer with identical bytes.
void bm_metadata_upload(benchmark::State& state, const BatchSpec* batch) {
  hipStream_t stream = nullptr;
  if (setup_failed(state, bench_stream(&stream))) return;
  const int64_t N = batch->num_sequences(), T = batch->total_tokens();
  const std::vector<int32_t> cu(batch->cu_seqlens.begin(), batch->cu_seqlens.end());
  const size_t bytes = chunk_metadata_bytes(max_num_chunks(T, N, kChunkSize), N, IndexType::kInt32);
  PinnedBuffer staging;
  DeviceBuffer device;
  if (setup_failed(state, runtime_status(staging.allocate(bytes)))) return;
  if (setup_failed(state, runtime_status(device.allocate(bytes)))) return;
  auto call = [&](hipStream_t s) {
    DeviceChunkMetadata meta;
    return upload_chunk_metadata(cu.data(), IndexType::kInt32, N, kChunkSize, T, IndexType::kInt32, staging.get(),
                                 staging.bytes(), device.get(), device.bytes(), s, &meta);
  };
  Measurement m;
  if (!time_calls(state, stream, call, &m)) return;
  const double moved = double(chunk_metadata_bytes(batch_num_chunks(*batch), N, IndexType::kInt32));
  set_counters(state, m, 0.0, moved, *batch);
}

void finish(benchmark::internal::Benchmark* b) { b->UseManualTime()->Unit(benchmark::kMicrosecond); }

}  // namespace

void register_kda_benchmarks() {
  const MetadataMode modes[] = {MetadataMode::kBuilder, MetadataMode::kDerived};
  for (const BatchSpec& batch : bench_batches()) {
    for (MetadataMode mode : modes) {
      for (GateVariant gate : {GateVariant::kSoftplus, GateVariant::kLowerBound}) {
        std::string name = "e2e/" + batch.name + "/" + mode_name(mode);
        if (gate == GateVariant::kLowerBound) name += "/gate_lb";
        finish(benchmark::RegisterBenchmark(name.c_str(), bm_e2e, &batch, mode, gate, HeadShape()));
      }
    }
  }
  for (const BatchSpec& batch : bench_batches()) {
    for (MetadataMode mode : modes) {
      for (StageKind stage : kAllStages) {
        const std::string name = std::string("stage/") + stage_name(stage) + "/" + batch.name + "/" + mode_name(mode);
        finish(benchmark::RegisterBenchmark(name.c_str(), bm_stage, &batch, stage, mode));
      }
    }
  }
  for (const BatchSpec& batch : bench_batches()) {
    finish(benchmark::RegisterBenchmark(("metadata/upload/" + batch.name).c_str(), bm_metadata_upload, &batch));
  }
  // Each fused prepare kernel (long, with the short path, short only) and state kernel form at the other shapes:
  // one long sequence, decodes beside prefills, speculative decodes. The batch's own shape (bf16_k128_v128) is
  // registered too, so that every shape has its baseline in the same run.
  const HeadShape shapes[] = {{DType::kBF16, 128, 128}, {DType::kFP16, 128, 128}, {DType::kBF16, 128, 64},
                              {DType::kBF16, 64, 128},  {DType::kFP16, 64, 128},  {DType::kBF16, 64, 64},
                              {DType::kFP16, 64, 64}};
  for (const BatchSpec& batch : bench_batches()) {
    if (batch.name != "single8k" && batch.name != "mixed64" && batch.name != "spec256x8") continue;
    for (const HeadShape& head : shapes) {
      const std::string name = "shape/" + batch.name + "/" + shape_name(head);
      finish(benchmark::RegisterBenchmark(name.c_str(), bm_e2e, &batch, MetadataMode::kBuilder,
                                          GateVariant::kSoftplus, head));
    }
  }
}

int run_kda_check() {
  hipStream_t stream = nullptr;
  const Status s = bench_stream(&stream);
  if (!s.is_ok()) {
    std::printf("kda check: FAIL: no stream: %s\n", s.message());
    return 1;
  }
  return run_accuracy_check(stream);
}

void release_kda_bench_resources() {
  cache().stages.reset();
  cache().problem.reset();
  cache().key.clear();
  if (stream_slot() != nullptr) {
    (void)hipStreamDestroy(stream_slot());
    stream_slot() = nullptr;
  }
}

}  // namespace kda::bench
