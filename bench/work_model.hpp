// What one call computes and moves, for the TFLOPs and GBps counters (formulas in docs/benchmarks.md).
//
// FLOPs count the matrix products of the chunked algorithm only (elementwise work such as gates, exp2 and l2norm is
// not counted), and only their useful part: for a chunk of L valid rows (L <= 64; the last chunk of a sequence may
// be shorter), the triangular products count the triangle, not the padded 64x64 tiles a kernel may compute.
// Bytes are the minimal traffic: every tensor the call (or the stage) must read, read once, and every tensor it
// must write, written once, in the dtypes the library uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kda::bench {

// Host-side shape of one call: cu_seqlens plus head counts, head dims, chunk size and I/O element size.
struct WorkShape {
  std::vector<int64_t> cu_seqlens;
  int H = 32, K = 128, V = 128, BT = 64;
  int io_bytes = 2;  // bf16
};

// FLOPs of each matrix product, summed over chunks and heads.
struct FlopBreakdown {
  double akk = 0, aqk = 0, solve = 0, w = 0, u = 0, v_new = 0, state_update = 0, out_inter = 0, out_intra = 0;
  double total() const { return akk + aqk + solve + w + u + v_new + state_update + out_inter + out_intra; }
};

FlopBreakdown count_flops(const WorkShape& s);

// kPrepareInputs is the first launch of chunk_kda_fwd's fused form: l2norm, gate + cumsum, intra_chunk,
// solve_tril and recompute_w_u in one kernel from the raw inputs (Aqk, w, u, kg, qg, G_last out). kPrepare is the
// staged form's launch between the gate and the state recurrence: intra_chunk, solve_tril and recompute_w_u in one
// kernel (Aqk, w, u, kg out; Akk and Tinv kept on chip). kIntraSolve is intra_chunk with solve_tril fused in (Aqk
// and Tinv out). kStateRecurrence is chunk_kda_fwd's state launch, with the output folded in where it folds
// (output_folded); kStateWithH is the state launch of the form with a separate output (h and v_new out), which
// kChunkOutput follows.
enum class StageKind {
  kL2Norm,
  kGateCumsum,
  kIntraChunk,
  kSolveTril,
  kIntraSolve,
  kRecomputeWu,
  kPrepare,
  kPrepareInputs,
  kStateRecurrence,
  kStateWithH,
  kChunkOutput
};

// Whether chunk_kda_fwd folds the output into its state launch for this shape (kda_bench runs qk_l2norm, so: K and
// V in {64, 128}; chunk_kda_output_folded).
bool output_folded(const WorkShape& s);

// The stage's own FLOPs (0 for l2norm and gate_cumsum, which do no matrix products).
double stage_flops(const WorkShape& s, StageKind stage);

// Minimal bytes of chunk_kda_fwd: read q, k, v (io dtype), raw g (fp32), raw beta (fp32), the initial state (fp32)
// once; write o (io dtype) and the final state (fp32) once. A_log, dt_bias, cu_seqlens and chunk tables (< 0.1%)
// are not counted.
double e2e_bytes(const WorkShape& s);

// Bytes a stage reads and writes, each tensor once, in the dtypes the stage uses (intermediates: G, Akk, Aqk, Tinv
// fp32; w, u, kg, v_new, h in the io dtype). Chunk tables are not counted.
double stage_bytes(const WorkShape& s, StageKind stage);

}  // namespace kda::bench
