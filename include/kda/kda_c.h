/* kda_c.h: the C ABI of kda (libkda_capi.so), for engines written in C, Rust or Python (ctypes) that cannot use
 * the C++ headers.
 *
 * Pure C: compiles as C99 and as C++, includes no C++ and no GPU header. Streams are passed as `void*` (a
 * hipStream_t on AMD, a cudaStream_t on NVIDIA; NULL = the default stream). Every pointer called "device" points to
 * GPU memory; every pointer called "host" to CPU memory.
 *
 * Conventions, the same for every function:
 *   - Functions return a kda_status code (an int, KDA_STATUS_*; 0 = ok), except kda_abi_version,
 *     kda_status_name and kda_last_error_message. No function throws, aborts or allocates device memory.
 *   - When a function returns non-zero, kda_last_error_message() on the same thread names the argument and the
 *     problem (a static string). Out-parameters are written only on success.
 *   - Enum codes are plain ints with fixed values. An unknown code is rejected with KDA_STATUS_INVALID_ARGUMENT,
 *     never cast blindly.
 *   - Strides are in elements, not bytes.
 *
 * A prefill call, rocPRIM/CUB style (size query, then the call; the library never allocates):
 *
 *   kda_chunk_kda_args a;
 *   kda_chunk_kda_args_init(&a, sizeof a);   // struct_size and the documented defaults
 *   a.num_sequences = N; a.total_tokens = T; a.cu_seqlens = d_cu; ...; a.q.data = d_q; ...
 *   size_t bytes;
 *   if (kda_chunk_kda_workspace_size(&a, &bytes) != KDA_STATUS_OK) { puts(kda_last_error_message()); }
 *   ... allocate `bytes` of device memory as d_ws (once, or from the engine's pool) ...
 *   int s = kda_chunk_kda_fwd(&a, d_ws, bytes, (void*)stream);
 *
 * Nothing synchronises the host, so a whole prefill can be captured in a CUDA/HIP graph (DESIGN.md). Argument
 * errors are reported before anything is enqueued. Threads may call every function concurrently.
 */
#ifndef KDA_KDA_C_H_
#define KDA_KDA_C_H_

#include <stddef.h>
#include <stdint.h>

/* Symbols of libkda_capi.so. The library is built with hidden visibility and exports only what carries this. */
#if defined(_WIN32)
#if defined(KDA_CAPI_BUILDING)
#define KDA_CAPI_EXPORT __declspec(dllexport)
#else
#define KDA_CAPI_EXPORT __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define KDA_CAPI_EXPORT __attribute__((visibility("default")))
#else
#define KDA_CAPI_EXPORT
#endif

/* The ABI version this header describes; kda_abi_version() returns the library's. A library accepts the argument
 * structs of its own and of every earlier version (struct_size tells them apart), so a caller needs
 * kda_abi_version() >= the KDA_C_ABI_VERSION it was compiled with.
 *   1: the first release.
 *   2: kda_chunk_kda_args.max_sequence_tokens appended (328 bytes); KDA_DEVICE_STATUS_* and the device status word;
 *      kda_longest_sequence. */
#define KDA_C_ABI_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Codes (fixed values, equal to the C++ enums in kda/types.hpp and kda/status.hpp) ---------------------------- */

/* kda_status: the result of every call. */
typedef int kda_status;
enum {
  KDA_STATUS_OK = 0,
  KDA_STATUS_INVALID_ARGUMENT = 1,     /* a null pointer, a bad size, stride or code, an inconsistent table */
  KDA_STATUS_UNSUPPORTED = 2,          /* valid, but not implemented (head dim, dtype, chunk size) */
  KDA_STATUS_WORKSPACE_TOO_SMALL = 3,  /* workspace_bytes < kda_chunk_kda_workspace_size() */
  KDA_STATUS_RUNTIME_ERROR = 4         /* the GPU runtime failed (launch, copy, bad stream), or an internal error */
};

/* Element type of q, k, v, o (kda::DType). */
enum { KDA_DTYPE_BF16 = 0, KDA_DTYPE_FP16 = 1 };

/* Integer type of cu_seqlens, chunk_indices, chunk_offsets and state_indices (kda::IndexType). */
enum { KDA_INDEX_INT32 = 0, KDA_INDEX_INT64 = 1 };

/* Element type of the raw gate g and the raw beta, which may be fp32 or 16-bit (kda::ScalarType). */
enum { KDA_SCALAR_FLOAT32 = 0, KDA_SCALAR_BFLOAT16 = 1, KDA_SCALAR_FLOAT16 = 2 };

/* How the per-channel log-decay is obtained from the raw gate g (kda::GateKind; KDA_SPEC section 1.1). */
enum {
  KDA_GATE_PRECOMPUTED = 0,  /* g is already the natural-log decay */
  KDA_GATE_SOFTPLUS = 1,     /* -exp(A_log[h]) * softplus(g + dt_bias); A_log required */
  KDA_GATE_LOWER_BOUND = 2   /* lower_bound * sigmoid(exp(A_log[h]) * (g + dt_bias)); A_log optional */
};

/* What is applied to the raw beta (kda::BetaActivation). */
enum { KDA_BETA_NONE = 0, KDA_BETA_SIGMOID = 1, KDA_BETA_SIGMOID_TIMES_TWO = 2 };

/* Layout of one [K,V] fp32 state matrix in the pool (kda::StateLayout): FLA is K-first, vLLM V-first. */
enum { KDA_STATE_K_FIRST = 0, KDA_STATE_V_FIRST = 1 };

/* ---- Arguments of one prefill ---------------------------------------------------------------------------------- */

/* A [T, H, D] token-major device tensor: element (t, h, d) is at data + t*token_stride + h*head_stride + d, strides in
 * elements, the innermost dimension contiguous. A contiguous tensor has token_stride = H*D, head_stride = D; a view
 * into a fused projection (q/k/v side by side) has a larger token_stride. Heads and tokens must not overlap:
 * head_stride >= D and token_stride >= (H-1)*head_stride + D (D = 1 for beta). `data` may be NULL only when T = 0. */
typedef struct kda_tensor_view {
  const void* data;
  int64_t token_stride;
  int64_t head_stride;
} kda_tensor_view;

/* The same for the output. */
typedef struct kda_mutable_tensor_view {
  void* data;
  int64_t token_stride;
  int64_t head_stride;
} kda_mutable_tensor_view;

/* Everything one kda_chunk_kda_fwd call reads. Fill it with kda_chunk_kda_args_init first: a zeroed struct is NOT
 * a valid default (pool_size, num_chunks and lower_bound default to -1, -1 and -5). The layout is fixed per version
 * (64-bit targets, no implicit padding): version 1 is the first 320 bytes, version 2 appends max_sequence_tokens
 * (328 bytes). Versions only append fields, and struct_size tells the library which version the caller was built
 * with: a version-1 struct (struct_size 320) runs as version 2 with the appended fields at their defaults. */
typedef struct kda_chunk_kda_args {
  /* sizeof(kda_chunk_kda_args) of the header the caller compiled against: 320 (version 1) or 328 (version 2). The
   * library rejects a size it does not know (KDA_STATUS_INVALID_ARGUMENT). Set by kda_chunk_kda_args_init. */
  size_t struct_size;

  /* ---- Batch geometry ---- */
  int64_t num_sequences;    /* N >= 0: packed sequences in the batch */
  int64_t total_tokens;     /* T >= 0: packed tokens, equal to cu_seqlens[N] */
  int32_t num_heads;        /* H in [1, 4096] */
  int32_t head_dim_k;       /* K: 64, 128 or 256 (others: KDA_STATUS_UNSUPPORTED). Default 128. */
  int32_t head_dim_v;       /* V: 64, 128 or 256. Default 128. */
  int32_t chunk_size;       /* BT: 32 or 64. Default 64. */
  int32_t dtype;            /* KDA_DTYPE_*: element type of q, k, v, o. Default BF16. */
  int32_t cu_seqlens_type;  /* KDA_INDEX_*: element type of cu_seqlens. Default INT32. */
  const void* cu_seqlens;   /* required: device [N+1], 0 = cu[0] <= cu[1] <= ... <= cu[N] = T */

  /* ---- Optional chunk tables (from kda_build_chunk_metadata / kda_upload_chunk_metadata) ----
   * Both NULL (the default): the tables are derived on the device inside the call (no host sync; grids sized by
   * ceil(T/BT)+N). Both given: grids are exact. Outputs are bit-identical either way. */
  const void* chunk_indices;  /* device [NT,2] (sequence, chunk-in-sequence) rows, or NULL */
  const void* chunk_offsets;  /* device [N+1] first global chunk of each sequence, or NULL */
  int64_t num_chunks;         /* host NT of the tables; required (>= 0) with them, ignored without. Default -1. */
  int32_t chunk_table_type;   /* KDA_INDEX_*: element type of both tables. Default INT32. */
  /* (The optional bound on the sequence lengths, max_sequence_tokens, is the last field: it came with version 2.) */

  /* ---- Element types of the raw gate and beta, gate and beta processing ---- */
  int32_t g_type;           /* KDA_SCALAR_*: element type of g. Default FLOAT32. */
  int32_t beta_type;        /* KDA_SCALAR_*: element type of beta. Default FLOAT32. */
  int32_t gate;             /* KDA_GATE_*. Default SOFTPLUS. */
  int32_t beta_activation;  /* KDA_BETA_*. Default SIGMOID. */
  int32_t qk_l2norm;        /* 1: L2-normalise q and k per head in the kernel; 0: they already are. Default 1. */
  float lower_bound;        /* KDA_GATE_LOWER_BOUND only: in [-5, 0). Default -5. */
  float scale;              /* attention scale; 0 (the default) = 1/sqrt(K) */

  /* ---- Inputs and output (device tensors; see kda_tensor_view for strides) ---- */
  kda_tensor_view q;             /* [T,H,K] of dtype */
  kda_tensor_view k;             /* [T,H,K] of dtype */
  kda_tensor_view v;             /* [T,H,V] of dtype */
  kda_tensor_view g;             /* [T,H,K] of g_type: the raw gate (the log-decay itself if PRECOMPUTED) */
  kda_tensor_view beta;          /* [T,H] of beta_type: head_stride >= 1, token_stride >= (H-1)*head_stride + 1 */
  kda_mutable_tensor_view o;     /* out [T,H,V] of dtype. May alias v (o.data == v.data with equal strides). */
  const float* A_log;            /* device [H] fp32: required by SOFTPLUS, optional for LOWER_BOUND, else unused */
  const float* dt_bias;          /* device [H*K] fp32, or NULL for none */

  /* ---- Recurrent state: a pool of P fp32 [H,K,V] (K_FIRST) or [H,V,K] (V_FIRST) slots ---- */
  const float* initial_state;        /* device pool, or NULL = every sequence starts from a zero state */
  float* final_state;                /* device pool written at the end, or NULL = not written. May equal
                                        initial_state (in-place update of the engine's pool). */
  const void* state_indices;         /* device [N] of state_indices_type: pool slot of sequence n (negative = no
                                        state: zero start, nothing written), or NULL = slot n */
  const uint8_t* has_initial_state;  /* device [N]: 0 = sequence n starts from zero; NULL = all start from the pool */
  int64_t pool_size;                 /* P: slots in the pool; required (>= 0) with state_indices; -1 (the default)
                                        = N; without state_indices it must be -1 or >= N */
  int32_t state_layout;              /* KDA_STATE_*. Default K_FIRST. */
  int32_t state_indices_type;        /* KDA_INDEX_*: element type of state_indices. Default INT32. */

  /* ---- Version 2 ---- */
  /* A bound the caller knows on the host for every sequence's length (vLLM's max_query_len; kda_longest_sequence
   * computes it from host cu_seqlens), or 0 (the default) = unknown. When set it must be >= ceil(T / N). With it at
   * most 16 and chunk_size 64 the call runs its kernels for short sequences alone (speculative and decode batches:
   * fewer launches, more blocks per SM; the same bits as without it). A sequence longer than the bound is not
   * computed (its o rows and final state are left as they were) and sets KDA_DEVICE_STATUS_SEQUENCE_OVER_BOUND in the
   * device status word; nothing is written out of bounds. */
  int64_t max_sequence_tokens;
} kda_chunk_kda_args;

/* Fills *args with the defaults documented above and struct_size = struct_size: every pointer NULL, every stride and
 * size 0, head dims 128, chunk size 64, bf16, int32 indices, fp32 g and beta, softplus gate, sigmoid beta,
 * qk_l2norm 1, lower_bound -5, scale 0, num_chunks -1, pool_size -1, K-first state, max_sequence_tokens 0. Pass
 * sizeof(kda_chunk_kda_args) of your header (ctypes: ctypes.sizeof(KdaChunkKdaArgs)); exactly struct_size bytes are
 * written. A size the library does not know is rejected and *args is left untouched. Pure host function. */
KDA_CAPI_EXPORT kda_status kda_chunk_kda_args_init(kda_chunk_kda_args* args, size_t struct_size);

/* ---- The prefill ---------------------------------------------------------------------------------------------- */

/* Bytes of device workspace kda_chunk_kda_fwd needs for these arguments, in *bytes. Pure host function: no GPU
 * call, same answer for the same arguments. It depends on T, N, H, K, V, chunk_size, dtype, qk_l2norm and whether
 * chunk tables are given (with them, on num_chunks), and checks exactly those (plus struct_size and the enum codes);
 * data pointers need not be set yet, so an engine can size its workspace once for its largest batch. */
KDA_CAPI_EXPORT kda_status kda_chunk_kda_workspace_size(const kda_chunk_kda_args* args, size_t* bytes);

/* Enqueues the whole fused-gate KDA prefill on `stream`. workspace: device memory of workspace_bytes >=
 * kda_chunk_kda_workspace_size() (NULL only when that size is 0), 256-byte aligned (as hipMalloc/cudaMalloc give).
 * All argument checks happen before anything is enqueued; KDA_STATUS_RUNTIME_ERROR reports a failed launch.
 * Asynchronous: outputs are ready when the stream reaches this point, and so is the device status word (below). */
KDA_CAPI_EXPORT kda_status kda_chunk_kda_fwd(const kda_chunk_kda_args* args, void* workspace, size_t workspace_bytes,
                                             void* stream);

/* The device status word: what only the device can see (device-resident cu_seqlens and tables, state indices) and
 * so cannot be an argument error. The uint32_t at byte 0 of the workspace holds, once the stream has reached the end
 * of a kda_chunk_kda_fwd call, the OR of these bits for that call (0: nothing wrong; each call clears it first).
 * Kernels clamp every index they derive from such data, so nothing is read or written out of bounds either way.
 * Reading it needs a device-to-host copy after the call (e.g. in a debug build of the engine), never a sync inside
 * the library. */
enum {
  KDA_DEVICE_STATUS_BAD_CU_SEQLENS = 1,     /* cu_seqlens decreasing, outside [0, T], cu[0] != 0 or cu[N] != T */
  KDA_DEVICE_STATUS_BAD_CHUNK_TABLE = 2,    /* chunk_indices / chunk_offsets disagree with cu_seqlens */
  KDA_DEVICE_STATUS_BAD_STATE_INDEX = 4,    /* a state_indices entry >= pool_size (treated as "no state") */
  KDA_DEVICE_STATUS_SEQUENCE_OVER_BOUND = 8 /* a sequence longer than max_sequence_tokens (not computed) */
};

/* ---- Host chunk-metadata builder (mirrors kda/chunk_metadata.hpp) --------------------------------------------- *
 * From host cu_seqlens ([N+1] of cu_type) and a chunk size BT in {16, 32, 64}:
 *   chunk_indices [NT,2]: row g = (n, c), sequence-major, c < ceil(len_n / BT); NT = sum_n ceil(len_n / BT).
 *   chunk_offsets [N+1]:  0, then the running sum of ceil(len_n / BT), ending at NT.
 * Zero-length sequences may appear anywhere and own no chunk. total_tokens: T (cu[N] must equal it), or -1 if
 * unknown. bad_position (may be NULL) receives the index into cu_seqlens of the first offending entry, or -1 when
 * the error is not about one entry (and on success). Pure host functions: no GPU call. */

/* Validates cu_seqlens and returns NT in *num_chunks. */
KDA_CAPI_EXPORT kda_status kda_count_chunks(const void* cu_seqlens, int cu_type, int64_t num_sequences,
                                            int chunk_size, int64_t total_tokens, int64_t* num_chunks,
                                            int64_t* bad_position);

/* Validates cu_seqlens like kda_count_chunks and returns the longest sequence's length in *max_sequence_tokens (0
 * when every sequence is empty): the bound to pass as kda_chunk_kda_args.max_sequence_tokens. (Since version 2.) */
KDA_CAPI_EXPORT kda_status kda_longest_sequence(const void* cu_seqlens, int cu_type, int64_t num_sequences,
                                                int64_t total_tokens, int64_t* max_sequence_tokens,
                                                int64_t* bad_position);

/* Fills chunk_indices (host [capacity_rows,2] of out_type) and chunk_offsets (host [N+1] of out_type) and returns NT
 * in *num_chunks. Also checks capacity_rows >= NT and that every value fits out_type. chunk_indices may be NULL only
 * with capacity_rows == 0. Writes nothing on error. */
KDA_CAPI_EXPORT kda_status kda_build_chunk_metadata(const void* cu_seqlens, int cu_type, int64_t num_sequences,
                                                    int chunk_size, int64_t total_tokens, int out_type,
                                                    void* chunk_indices, int64_t capacity_rows, void* chunk_offsets,
                                                    int64_t* num_chunks, int64_t* bad_position);

/* ---- One-copy upload (mirrors kda/metadata_upload.hpp) -------------------------------------------------------- *
 * Packed layout of both tables in one buffer: chunk_indices [NT,2] at byte 0, chunk_offsets [N+1] right after them
 * (at an 8-byte-aligned offset), both of the table type. */

/* Bytes of the packed buffer for NT chunks and N sequences of `type` (KDA_INDEX_*), in *bytes. Size the buffers
 * either exactly (NT from kda_count_chunks) or once per T with the bound NT <= ceil(T/BT) + N. */
KDA_CAPI_EXPORT kda_status kda_chunk_metadata_bytes(int64_t num_chunks, int64_t num_sequences, int type,
                                                    size_t* bytes);

/* Where kda_upload_chunk_metadata put the tables: copy these into kda_chunk_kda_args (chunk_indices, chunk_offsets,
 * num_chunks, chunk_table_type). Its layout is fixed (40 bytes); the longest sequence, which the C++ upload also
 * returns, comes from kda_longest_sequence here. */
typedef struct kda_device_chunk_metadata {
  const void* chunk_indices;  /* device [NT,2]: the device buffer's start */
  const void* chunk_offsets;  /* device [N+1], inside the same buffer */
  int64_t num_chunks;         /* NT, known on the host */
  size_t bytes;               /* bytes the copy moved: kda_chunk_metadata_bytes(NT, N, type) */
  int32_t type;               /* KDA_INDEX_*: out_type */
  int32_t reserved;           /* 0 */
} kda_device_chunk_metadata;

/* Builds the tables from host cu_seqlens into pinned_staging (page-locked host memory from hipHostMalloc /
 * cudaMallocHost, 8-byte aligned, staging_bytes large enough) and enqueues ONE host-to-device copy into
 * device_buffer (device memory, 8-byte aligned, device_bytes large enough) on `stream`. Never synchronises, never
 * allocates: graph-capture safe. The staging buffer must stay untouched until the copy has completed on the stream.
 * Errors: those of kda_build_chunk_metadata and bad buffers (KDA_STATUS_INVALID_ARGUMENT, before anything is written
 * or enqueued), or the runtime's error from the copy (KDA_STATUS_RUNTIME_ERROR). *out is written only on success. */
KDA_CAPI_EXPORT kda_status kda_upload_chunk_metadata(const void* cu_seqlens, int cu_type, int64_t num_sequences,
                                                     int chunk_size, int64_t total_tokens, int out_type,
                                                     void* pinned_staging, size_t staging_bytes, void* device_buffer,
                                                     size_t device_bytes, void* stream,
                                                     kda_device_chunk_metadata* out);

/* ---- Errors and version --------------------------------------------------------------------------------------- */

/* The message of the last call on this thread that returned non-zero ("ok" if none has): the argument and the
 * problem, or the GPU runtime's own message. Successful calls do not clear it, so read it right after a failure.
 * Never NULL; a static string, valid for the life of the process. */
KDA_CAPI_EXPORT const char* kda_last_error_message(void);

/* "ok", "invalid argument", "unsupported", "workspace too small", "runtime error", or "unknown" for other codes.
 * Never NULL; static. */
KDA_CAPI_EXPORT const char* kda_status_name(int status);

/* KDA_C_ABI_VERSION of the library. */
KDA_CAPI_EXPORT int kda_abi_version(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* KDA_KDA_C_H_ */
