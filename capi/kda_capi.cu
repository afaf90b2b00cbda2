// libkda_capi.so: the C ABI of include/kda/kda_c.h over the header-only C++ API.
//
// Every entry point (1) checks struct_size and every enum code before anything is converted (a bad code is an
// error, never a blind cast), (2) converts to the C++ argument types, (3) calls the C++ function, (4) records a
// non-ok Status's static message in a thread-local for kda_last_error_message(). No exception crosses the ABI: each
// entry point catches everything and reports KDA_STATUS_RUNTIME_ERROR with a static message.
//
// Compiled with the GPU language (nvcc or hipcc) because chunk_kda_fwd instantiates the kernels. Built with hidden
// visibility and a version script, so only the kda_* functions are exported.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kda/chunk_kda.hpp"
#include "kda/chunk_metadata.hpp"
#include "kda/kda_c.h"
#include "kda/metadata_upload.hpp"

// ---- The C codes are the C++ enum values ---------------------------------------------------------------------------
static_assert(KDA_STATUS_OK == int(kda::StatusCode::kOk) &&
                  KDA_STATUS_INVALID_ARGUMENT == int(kda::StatusCode::kInvalidArgument) &&
                  KDA_STATUS_UNSUPPORTED == int(kda::StatusCode::kUnsupported) &&
                  KDA_STATUS_WORKSPACE_TOO_SMALL == int(kda::StatusCode::kWorkspaceTooSmall) &&
                  KDA_STATUS_RUNTIME_ERROR == int(kda::StatusCode::kRuntimeError),
              "kda_status codes must equal kda::StatusCode");
static_assert(KDA_DTYPE_BF16 == int(kda::DType::kBF16) && KDA_DTYPE_FP16 == int(kda::DType::kFP16), "dtype codes");
static_assert(KDA_INDEX_INT32 == int(kda::IndexType::kInt32) && KDA_INDEX_INT64 == int(kda::IndexType::kInt64),
              "index type codes");
static_assert(KDA_SCALAR_FLOAT32 == int(kda::ScalarType::kFloat32) &&
                  KDA_SCALAR_BFLOAT16 == int(kda::ScalarType::kBFloat16) &&
                  KDA_SCALAR_FLOAT16 == int(kda::ScalarType::kFloat16),
              "scalar type codes");
static_assert(KDA_GATE_PRECOMPUTED == int(kda::GateKind::kPrecomputed) &&
                  KDA_GATE_SOFTPLUS == int(kda::GateKind::kSoftplus) &&
                  KDA_GATE_LOWER_BOUND == int(kda::GateKind::kLowerBound),
              "gate codes");
static_assert(KDA_BETA_NONE == int(kda::BetaActivation::kNone) && KDA_BETA_SIGMOID == int(kda::BetaActivation::kSigmoid) &&
                  KDA_BETA_SIGMOID_TIMES_TWO == int(kda::BetaActivation::kSigmoidTimesTwo),
              "beta activation codes");
static_assert(KDA_STATE_K_FIRST == int(kda::StateLayout::kKFirst) && KDA_STATE_V_FIRST == int(kda::StateLayout::kVFirst),
              "state layout codes");

static_assert(uint32_t(KDA_DEVICE_STATUS_BAD_CU_SEQLENS) == uint32_t(kda::detail::kDeviceStatusBadCuSeqlens) &&
                  uint32_t(KDA_DEVICE_STATUS_BAD_CHUNK_TABLE) == uint32_t(kda::detail::kDeviceStatusBadChunkTable) &&
                  uint32_t(KDA_DEVICE_STATUS_BAD_STATE_INDEX) == uint32_t(kda::detail::kDeviceStatusBadStateIndex) &&
                  uint32_t(KDA_DEVICE_STATUS_SEQUENCE_OVER_BOUND) ==
                      uint32_t(kda::detail::kDeviceStatusSequenceOverBound),
              "device status bits");

// ---- The layouts are frozen (64-bit targets; tests/capi/c_header_check.c asserts the same from C) ----------------
// Version 1 is the first 320 bytes; version 2 appends max_sequence_tokens.
static_assert(sizeof(void*) != 8 || (sizeof(kda_chunk_kda_args) == 328 &&
                                     offsetof(kda_chunk_kda_args, max_sequence_tokens) == 320),
              "kda_chunk_kda_args v2 is v1's 320 bytes and max_sequence_tokens");
static_assert(sizeof(void*) != 8 || (offsetof(kda_chunk_kda_args, cu_seqlens) == 48 &&
                                     offsetof(kda_chunk_kda_args, num_chunks) == 72 &&
                                     offsetof(kda_chunk_kda_args, scale) == 108 &&
                                     offsetof(kda_chunk_kda_args, q) == 112 &&
                                     offsetof(kda_chunk_kda_args, o) == 232 &&
                                     offsetof(kda_chunk_kda_args, pool_size) == 304 &&
                                     offsetof(kda_chunk_kda_args, state_indices_type) == 316),
              "kda_chunk_kda_args v1 field offsets");
static_assert(sizeof(void*) != 8 || sizeof(kda_device_chunk_metadata) == 40, "kda_device_chunk_metadata is 40 bytes");

namespace {

using kda::Status;
using kda::StatusCode;

// Struct sizes this library knows. Each version appends fields; an older caller's struct is read only up to its
// size, and the fields past it take their defaults.
constexpr size_t kArgsSizeV1 = offsetof(kda_chunk_kda_args, max_sequence_tokens);
constexpr size_t kArgsSizeV2 = sizeof(kda_chunk_kda_args);
constexpr bool known_args_size(size_t size) { return size == kArgsSizeV1 || size == kArgsSizeV2; }

thread_local const char* t_last_error = "ok";

// Records a failure for kda_last_error_message() and returns its code.
int finish(const Status& s) {
  if (!s.is_ok()) t_last_error = s.message();
  return int(s.code());
}

// Runs `f` (returning a Status) so that nothing escapes into C.
template <typename F>
int guarded(F&& f) noexcept {
  try {
    return finish(f());
  } catch (...) {
    return finish(Status(StatusCode::kRuntimeError, "internal error: C++ exception inside libkda_capi"));
  }
}

// Checked code -> enum conversion: codes are 0..max_code (static_asserts above tie them to the C++ values).
template <typename E>
bool to_enum(int32_t code, int32_t max_code, E* out) {
  if (code < 0 || code > max_code) return false;
  *out = static_cast<E>(code);
  return true;
}
bool to_index_type(int32_t code, kda::IndexType* out) { return to_enum(code, KDA_INDEX_INT64, out); }

Status check_args_struct(const kda_chunk_kda_args* c) {
  if (c == nullptr) return kda::invalid_argument("args: null");
  if (!known_args_size(c->struct_size)) {
    return kda::invalid_argument("args->struct_size: unknown size (set it with kda_chunk_kda_args_init)");
  }
  return Status();
}

kda::TensorView to_view(const kda_tensor_view& v) { return kda::TensorView{v.data, v.token_stride, v.head_stride}; }

// Checks struct_size and every code, then fills *out. Nothing else is validated here: the C++ API does the rest.
Status convert_args(const kda_chunk_kda_args* c, kda::ChunkKdaArgs* out) {
  KDA_RETURN_IF_ERROR(check_args_struct(c));
  kda::ChunkKdaArgs a;
  kda::StageGeometry& g = a.geometry;
  kda::ChunkMetadataArgs& m = g.metadata;
  if (!to_enum(c->dtype, KDA_DTYPE_FP16, &g.dtype)) return kda::invalid_argument("dtype: unknown KDA_DTYPE_* code");
  if (!to_index_type(c->cu_seqlens_type, &m.cu_seqlens.type)) {
    return kda::invalid_argument("cu_seqlens_type: unknown KDA_INDEX_* code");
  }
  kda::IndexType table_type;
  if (!to_index_type(c->chunk_table_type, &table_type)) {
    return kda::invalid_argument("chunk_table_type: unknown KDA_INDEX_* code");
  }
  if (!to_enum(c->g_type, KDA_SCALAR_FLOAT16, &a.g_type)) return kda::invalid_argument("g_type: unknown KDA_SCALAR_* code");
  if (!to_enum(c->beta_type, KDA_SCALAR_FLOAT16, &a.beta_type)) {
    return kda::invalid_argument("beta_type: unknown KDA_SCALAR_* code");
  }
  if (!to_enum(c->gate, KDA_GATE_LOWER_BOUND, &a.gate)) return kda::invalid_argument("gate: unknown KDA_GATE_* code");
  if (!to_enum(c->beta_activation, KDA_BETA_SIGMOID_TIMES_TWO, &a.beta_activation)) {
    return kda::invalid_argument("beta_activation: unknown KDA_BETA_* code");
  }
  if (c->qk_l2norm != 0 && c->qk_l2norm != 1) return kda::invalid_argument("qk_l2norm: must be 0 or 1");
  if (!to_enum(c->state_layout, KDA_STATE_V_FIRST, &a.state.layout)) {
    return kda::invalid_argument("state_layout: unknown KDA_STATE_* code");
  }
  if (!to_index_type(c->state_indices_type, &a.state.state_indices.type)) {
    return kda::invalid_argument("state_indices_type: unknown KDA_INDEX_* code");
  }

  m.cu_seqlens.data = c->cu_seqlens;
  m.num_sequences = c->num_sequences;
  m.total_tokens = c->total_tokens;
  m.chunk_indices = kda::IndexSpan{c->chunk_indices, table_type};
  m.chunk_offsets = kda::IndexSpan{c->chunk_offsets, table_type};
  m.num_chunks = c->num_chunks;
  m.max_sequence_tokens = c->struct_size >= kArgsSizeV2 ? c->max_sequence_tokens : 0;  // a v1 struct ends before it
  g.num_heads = c->num_heads;
  g.head_dim_k = c->head_dim_k;
  g.head_dim_v = c->head_dim_v;
  g.chunk_size = c->chunk_size;

  a.q = to_view(c->q);
  a.k = to_view(c->k);
  a.v = to_view(c->v);
  a.g = to_view(c->g);
  a.beta = to_view(c->beta);
  a.o = kda::MutableTensorView{c->o.data, c->o.token_stride, c->o.head_stride};
  a.A_log = c->A_log;
  a.dt_bias = c->dt_bias;
  a.lower_bound = c->lower_bound;
  a.qk_l2norm = c->qk_l2norm == 1;
  a.scale = c->scale;

  a.state.initial_state = c->initial_state;
  a.state.final_state = c->final_state;
  a.state.state_indices.data = c->state_indices;
  a.state.has_initial_state = c->has_initial_state;
  a.state.pool_size = c->pool_size;
  *out = a;
  return Status();
}

// The checks on what the workspace size depends on. cu_seqlens is only checked for null by validate_geometry (it is
// a device pointer, never read here), so a placeholder lets an engine size its workspace before it has the batch.
Status validate_sizing(const kda::ChunkKdaArgs& a) {
  kda::StageGeometry g = a.geometry;
  static const int32_t placeholder = 0;
  if (g.metadata.cu_seqlens.data == nullptr) g.metadata.cu_seqlens.data = &placeholder;
  KDA_RETURN_IF_ERROR(kda::detail::validate_geometry(g));
  if (g.chunk_size != 32 && g.chunk_size != 64) return kda::unsupported("chunk_size: chunk_kda_fwd supports 32 and 64");
  return Status();
}

void clear_position(int64_t* bad_position) {
  if (bad_position != nullptr) *bad_position = -1;
}

}  // namespace

extern "C" {

KDA_CAPI_EXPORT kda_status kda_chunk_kda_args_init(kda_chunk_kda_args* args, size_t struct_size) {
  return guarded([&]() -> Status {
    if (args == nullptr) return kda::invalid_argument("args: null");
    if (!known_args_size(struct_size)) return kda::invalid_argument("struct_size: unknown kda_chunk_kda_args size");
    kda_chunk_kda_args a;
    std::memset(&a, 0, sizeof(a));
    a.struct_size = struct_size;
    a.head_dim_k = 128;
    a.head_dim_v = 128;
    a.chunk_size = 64;
    a.dtype = KDA_DTYPE_BF16;
    a.cu_seqlens_type = KDA_INDEX_INT32;
    a.num_chunks = -1;
    a.chunk_table_type = KDA_INDEX_INT32;
    a.g_type = KDA_SCALAR_FLOAT32;
    a.beta_type = KDA_SCALAR_FLOAT32;
    a.gate = KDA_GATE_SOFTPLUS;
    a.beta_activation = KDA_BETA_SIGMOID;
    a.qk_l2norm = 1;
    a.lower_bound = -5.0f;
    a.scale = 0.0f;
    a.pool_size = -1;
    a.state_layout = KDA_STATE_K_FIRST;
    a.state_indices_type = KDA_INDEX_INT32;
    a.max_sequence_tokens = 0;
    std::memcpy(args, &a, struct_size);  // a version-1 caller's struct ends before the version-2 fields
    return Status();
  });
}

KDA_CAPI_EXPORT kda_status kda_chunk_kda_workspace_size(const kda_chunk_kda_args* args, size_t* bytes) {
  return guarded([&]() -> Status {
    if (bytes == nullptr) return kda::invalid_argument("bytes: null");
    kda::ChunkKdaArgs a;
    KDA_RETURN_IF_ERROR(convert_args(args, &a));
    KDA_RETURN_IF_ERROR(validate_sizing(a));
    *bytes = kda::chunk_kda_workspace_size(a);
    return Status();
  });
}

KDA_CAPI_EXPORT kda_status kda_chunk_kda_fwd(const kda_chunk_kda_args* args, void* workspace, size_t workspace_bytes,
                                             void* stream) {
  return guarded([&]() -> Status {
    kda::ChunkKdaArgs a;
    KDA_RETURN_IF_ERROR(convert_args(args, &a));
    return kda::chunk_kda_fwd(a, workspace, workspace_bytes, static_cast<hipStream_t>(stream));
  });
}

KDA_CAPI_EXPORT kda_status kda_count_chunks(const void* cu_seqlens, int cu_type, int64_t num_sequences, int chunk_size,
                                            int64_t total_tokens, int64_t* num_chunks, int64_t* bad_position) {
  return guarded([&]() -> Status {
    clear_position(bad_position);
    kda::IndexType cu;
    if (!to_index_type(cu_type, &cu)) return kda::invalid_argument("cu_type: unknown KDA_INDEX_* code");
    return kda::count_chunks(cu_seqlens, cu, num_sequences, chunk_size, total_tokens, num_chunks, bad_position);
  });
}

KDA_CAPI_EXPORT kda_status kda_longest_sequence(const void* cu_seqlens, int cu_type, int64_t num_sequences,
                                                int64_t total_tokens, int64_t* max_sequence_tokens,
                                                int64_t* bad_position) {
  return guarded([&]() -> Status {
    clear_position(bad_position);
    kda::IndexType cu;
    if (!to_index_type(cu_type, &cu)) return kda::invalid_argument("cu_type: unknown KDA_INDEX_* code");
    return kda::longest_sequence(cu_seqlens, cu, num_sequences, total_tokens, max_sequence_tokens, bad_position);
  });
}

KDA_CAPI_EXPORT kda_status kda_build_chunk_metadata(const void* cu_seqlens, int cu_type, int64_t num_sequences,
                                                    int chunk_size, int64_t total_tokens, int out_type,
                                                    void* chunk_indices, int64_t capacity_rows, void* chunk_offsets,
                                                    int64_t* num_chunks, int64_t* bad_position) {
  return guarded([&]() -> Status {
    clear_position(bad_position);
    kda::IndexType cu, out;
    if (!to_index_type(cu_type, &cu)) return kda::invalid_argument("cu_type: unknown KDA_INDEX_* code");
    if (!to_index_type(out_type, &out)) return kda::invalid_argument("out_type: unknown KDA_INDEX_* code");
    return kda::build_chunk_metadata(cu_seqlens, cu, num_sequences, chunk_size, total_tokens, out, chunk_indices,
                                     capacity_rows, chunk_offsets, num_chunks, bad_position);
  });
}

KDA_CAPI_EXPORT kda_status kda_chunk_metadata_bytes(int64_t num_chunks, int64_t num_sequences, int type,
                                                    size_t* bytes) {
  return guarded([&]() -> Status {
    kda::IndexType t;
    if (!to_index_type(type, &t)) return kda::invalid_argument("type: unknown KDA_INDEX_* code");
    if (num_chunks < 0) return kda::invalid_argument("num_chunks: negative");
    if (num_sequences < 0) return kda::invalid_argument("num_sequences: negative");
    if (bytes == nullptr) return kda::invalid_argument("bytes: null");
    *bytes = kda::chunk_metadata_bytes(num_chunks, num_sequences, t);
    return Status();
  });
}

KDA_CAPI_EXPORT kda_status kda_upload_chunk_metadata(const void* cu_seqlens, int cu_type, int64_t num_sequences,
                                                     int chunk_size, int64_t total_tokens, int out_type,
                                                     void* pinned_staging, size_t staging_bytes, void* device_buffer,
                                                     size_t device_bytes, void* stream,
                                                     kda_device_chunk_metadata* out) {
  return guarded([&]() -> Status {
    kda::IndexType cu, type;
    if (!to_index_type(cu_type, &cu)) return kda::invalid_argument("cu_type: unknown KDA_INDEX_* code");
    if (!to_index_type(out_type, &type)) return kda::invalid_argument("out_type: unknown KDA_INDEX_* code");
    if (out == nullptr) return kda::invalid_argument("out: null");
    kda::DeviceChunkMetadata d;
    KDA_RETURN_IF_ERROR(kda::upload_chunk_metadata(cu_seqlens, cu, num_sequences, chunk_size, total_tokens, type,
                                                   pinned_staging, staging_bytes, device_buffer, device_bytes,
                                                   static_cast<hipStream_t>(stream), &d));
    kda_device_chunk_metadata r;
    r.chunk_indices = d.chunk_indices.data;
    r.chunk_offsets = d.chunk_offsets.data;
    r.num_chunks = d.num_chunks;
    r.bytes = d.bytes;
    r.type = out_type;
    r.reserved = 0;
    *out = r;
    return Status();
  });
}

KDA_CAPI_EXPORT const char* kda_last_error_message(void) { return t_last_error; }

KDA_CAPI_EXPORT const char* kda_status_name(int status) {
  kda::StatusCode code;
  if (!to_enum(status, KDA_STATUS_RUNTIME_ERROR, &code)) return "unknown";
  return kda::status_code_name(code);
}

KDA_CAPI_EXPORT int kda_abi_version(void) { return KDA_C_ABI_VERSION; }

}  // extern "C"
