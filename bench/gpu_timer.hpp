// How every benchmark is timed (docs/benchmarks.md, "Timing"):
//   - `warmup` untimed calls, then a stream synchronise;
//   - each Google Benchmark iteration: a GPU event, `calls` back-to-back calls on one stream, a GPU event; the
//     iteration's manual time is (elapsed between the events) / calls, so Google Benchmark's own time column is
//     GPU time per call;
//   - host time: std::chrono::steady_clock around each call only (the enqueue, no synchronise), averaged.
// With --kda_graph the `calls` calls are captured once into a graph and each iteration launches that graph
// between the events (no launch gaps on the GPU); host time then comes from `calls` direct calls made before.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include "kda/platform.hpp"
#include "kda/status.hpp"
#include "options.hpp"

namespace kda::bench {

// Totals over the timed iterations; per-call means are totals / iterations.
struct Measurement {
  double gpu_ms_per_call_sum = 0.0;  // sum over iterations of (event time / calls)
  double host_us_per_call_sum = 0.0; // sum over iterations of (mean enqueue time of one call)
  int64_t iterations = 0;
  double gpu_ms() const { return iterations > 0 ? gpu_ms_per_call_sum / double(iterations) : 0.0; }
  double host_us() const { return iterations > 0 ? host_us_per_call_sum / double(iterations) : 0.0; }
};

class EventPair {
 public:
  EventPair() {
    ok_ = hipEventCreate(&start_) == hipSuccess;
    ok_ = ok_ && hipEventCreate(&stop_) == hipSuccess;
  }
  ~EventPair() {
    if (start_ != nullptr) (void)hipEventDestroy(start_);
    if (stop_ != nullptr) (void)hipEventDestroy(stop_);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  bool ok() const { return ok_; }
  hipError_t start(hipStream_t s) { return hipEventRecord(start_, s); }
  // Records the stop event, waits for it and returns the milliseconds since start.
  hipError_t stop(hipStream_t s, float* ms) {
    hipError_t e = hipEventRecord(stop_, s);
    if (e == hipSuccess) e = hipEventSynchronize(stop_);
    if (e == hipSuccess) e = hipEventElapsedTime(ms, start_, stop_);
    return e;
  }

 private:
  hipEvent_t start_ = nullptr, stop_ = nullptr;
  bool ok_ = false;
};

class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() {
    if (exec_ != nullptr) (void)hipGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)hipGraphDestroy(graph_);
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  // Captures `calls` calls of `call` on `stream` and instantiates them. Returns a message on failure, else null.
  template <typename Call>
  const char* capture(hipStream_t stream, int calls, Call& call) {
    if (hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal) != hipSuccess) return "graph: begin capture failed";
    Status status;
    for (int i = 0; i < calls && status.is_ok(); ++i) status = call(stream);
    const hipError_t end = hipStreamEndCapture(stream, &graph_);
    if (!status.is_ok()) return status.message();
    if (end != hipSuccess) return hipGetErrorString(end);
    const hipError_t inst = hipGraphInstantiate(&exec_, graph_, nullptr, nullptr, 0);
    return inst == hipSuccess ? nullptr : hipGetErrorString(inst);
  }
  hipError_t launch(hipStream_t stream) const { return hipGraphLaunch(exec_, stream); }

 private:
  hipGraph_t graph_ = nullptr;
  hipGraphExec_t exec_ = nullptr;
};

// Runs Google Benchmark's loop over `call` (a callable `kda::Status(hipStream_t)`). On any failure it calls
// state.SkipWithError and returns false.
template <typename Call>
bool time_calls(benchmark::State& state, hipStream_t stream, Call&& call, Measurement* m) {
  using clock = std::chrono::steady_clock;
  const BenchOptions& opt = bench_options();
  const int calls = opt.calls > 0 ? opt.calls : 1;
  auto fail = [&](const std::string& what) {
    state.SkipWithError(what.c_str());
    return false;
  };
  auto fail_rt = [&](const char* where, hipError_t e) { return fail(std::string(where) + ": " + hipGetErrorString(e)); };

  for (int i = 0; i < opt.warmup; ++i) {
    const Status s = call(stream);
    if (!s.is_ok()) return fail(std::string("call failed: ") + s.message());
  }
  if (const hipError_t e = hipStreamSynchronize(stream); e != hipSuccess) return fail_rt("warm-up", e);

  EventPair events;
  if (!events.ok()) return fail("could not create GPU events");

  // Host time of one direct call, to report alongside graph timing.
  auto direct_calls = [&](double* host_us) -> Status {
    double host_ns = 0.0;
    for (int i = 0; i < calls; ++i) {
      const auto t0 = clock::now();
      const Status s = call(stream);
      const auto t1 = clock::now();
      if (!s.is_ok()) return s;
      host_ns += double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    }
    *host_us = host_ns * 1e-3 / calls;
    return Status();
  };

  GraphExec graph;
  double graph_host_us = 0.0;
  if (opt.graph) {
    if (const Status s = direct_calls(&graph_host_us); !s.is_ok()) return fail(std::string("call failed: ") + s.message());
    if (const hipError_t e = hipStreamSynchronize(stream); e != hipSuccess) return fail_rt("host-time calls", e);
    if (const char* err = graph.capture(stream, calls, call)) return fail(std::string("graph capture: ") + err);
    if (const hipError_t e = graph.launch(stream); e != hipSuccess) return fail_rt("graph launch", e);
    if (const hipError_t e = hipStreamSynchronize(stream); e != hipSuccess) return fail_rt("graph warm-up", e);
  }

  for (auto _ : state) {
    double host_us = graph_host_us;
    if (const hipError_t e = events.start(stream); e != hipSuccess) return fail_rt("event record", e);
    if (opt.graph) {
      if (const hipError_t e = graph.launch(stream); e != hipSuccess) return fail_rt("graph launch", e);
    } else if (const Status s = direct_calls(&host_us); !s.is_ok()) {
      return fail(std::string("call failed: ") + s.message());
    }
    float ms = 0.0f;
    if (const hipError_t e = events.stop(stream, &ms); e != hipSuccess) return fail_rt("timed calls", e);
    const double per_call_ms = double(ms) / calls;
    state.SetIterationTime(per_call_ms * 1e-3);
    m->gpu_ms_per_call_sum += per_call_ms;
    m->host_us_per_call_sum += host_us;
    ++m->iterations;
  }
  return true;
}

}  // namespace kda::bench
