// The C ABI without a GPU (label cpu, runs in CI): argument errors and their messages, the defaults, the pure
// workspace-size query, and the host metadata builder, all through kda_c.h and libkda_capi.so only.
//
// No call here may reach the GPU runtime: every kda_chunk_kda_fwd call gets workspace_bytes = 0 unless it tests the
// workspace itself, so an argument check that wrongly passes ends in "workspace too small" (a failed expectation),
// never in a launch. Device pointers are host addresses that the library only compares with null. A global check
// at the end of each test process asserts that the CUDA driver library was never loaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kda/kda_c.h"

extern "C" void kda_capi_c_layout(size_t out[9]);  // c_header_check.c
extern "C" int kda_capi_c_round_trip(void);        // c_header_check.c

namespace {

// ---- Helpers ---------------------------------------------------------------------------------------------------

// Fake device buffers: distinct, aligned, never dereferenced by the library on these paths, and each large enough
// for the views below (the library rejects o overlapping another tensor).
alignas(256) unsigned char g_fake[16][1 << 17];
const void* fake(int i) { return g_fake[i]; }

constexpr int kH = 2, kK = 64, kV = 64;
constexpr int64_t kN = 3, kT = 229;  // cu = {0, 100, 100, 229}

kda_tensor_view view(int i, int64_t dim) { return kda_tensor_view{fake(i), kH * dim, dim}; }

// Arguments that pass every check (a softplus-gated, l2-normalised bf16 problem with a state pool).
kda_chunk_kda_args valid_args() {
  kda_chunk_kda_args a;
  EXPECT_EQ(kda_chunk_kda_args_init(&a, sizeof a), KDA_STATUS_OK);
  a.num_sequences = kN;
  a.total_tokens = kT;
  a.num_heads = kH;
  a.head_dim_k = kK;
  a.head_dim_v = kV;
  a.cu_seqlens = fake(0);
  a.q = view(1, kK);
  a.k = view(2, kK);
  a.v = view(3, kV);
  a.g = view(4, kK);
  a.beta = kda_tensor_view{fake(5), kH, 1};
  a.o = kda_mutable_tensor_view{g_fake[6], kH * kV, kV};
  a.A_log = static_cast<const float*>(fake(7));
  a.dt_bias = static_cast<const float*>(fake(8));
  a.initial_state = static_cast<const float*>(fake(9));
  a.final_state = reinterpret_cast<float*>(g_fake[10]);
  return a;
}

// Calls kda_chunk_kda_fwd with no workspace: an argument error, or "workspace too small" when the arguments pass.
int fwd_no_workspace(const kda_chunk_kda_args& a) { return kda_chunk_kda_fwd(&a, nullptr, 0, nullptr); }

std::string last_error() { return kda_last_error_message(); }

#define EXPECT_STATUS(call, code, message_part)                                            \
  do {                                                                                     \
    const int s_ = (call);                                                                 \
    EXPECT_EQ(s_, (code)) << #call << " -> " << kda_status_name(s_) << ": " << last_error(); \
    EXPECT_NE(last_error().find(message_part), std::string::npos)                         \
        << #call << ": message '" << last_error() << "' lacks '" << (message_part) << "'";   \
  } while (0)

// Whether the CUDA driver library is mapped into this process (Linux). The static CUDA runtime loads it on its
// first real call; no test here may make one.
bool cuda_driver_loaded() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/libcuda.so") != std::string::npos) return true;
  }
  return false;
}

class NoGpuRuntimeEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { EXPECT_FALSE(cuda_driver_loaded()) << "a C ABI call reached the CUDA driver"; }
};
::testing::Environment* const g_no_gpu_env = ::testing::AddGlobalTestEnvironment(new NoGpuRuntimeEnvironment);

// ---- Version, names, C header ------------------------------------------------------------------------------------

TEST(CapiBasics, VersionAndStatusNames) {
  EXPECT_EQ(kda_abi_version(), KDA_C_ABI_VERSION);
  EXPECT_STREQ(kda_status_name(KDA_STATUS_OK), "ok");
  EXPECT_STREQ(kda_status_name(KDA_STATUS_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(kda_status_name(KDA_STATUS_UNSUPPORTED), "unsupported");
  EXPECT_STREQ(kda_status_name(KDA_STATUS_WORKSPACE_TOO_SMALL), "workspace too small");
  EXPECT_STREQ(kda_status_name(KDA_STATUS_RUNTIME_ERROR), "runtime error");
  EXPECT_STREQ(kda_status_name(5), "unknown");
  EXPECT_STREQ(kda_status_name(-1), "unknown");
}

TEST(CapiBasics, HeaderIsValidCAndLayoutsAgree) {
  EXPECT_EQ(kda_capi_c_round_trip(), 0) << "the failing check's number, see c_header_check.c";
  size_t c[9];
  kda_capi_c_layout(c);
  EXPECT_EQ(c[0], sizeof(kda_chunk_kda_args));
  EXPECT_EQ(c[1], offsetof(kda_chunk_kda_args, total_tokens));
  EXPECT_EQ(c[2], offsetof(kda_chunk_kda_args, cu_seqlens));
  EXPECT_EQ(c[3], offsetof(kda_chunk_kda_args, lower_bound));
  EXPECT_EQ(c[4], offsetof(kda_chunk_kda_args, beta));
  EXPECT_EQ(c[5], offsetof(kda_chunk_kda_args, o));
  EXPECT_EQ(c[6], offsetof(kda_chunk_kda_args, pool_size));
  EXPECT_EQ(c[7], sizeof(kda_device_chunk_metadata));
  EXPECT_EQ(c[8], offsetof(kda_chunk_kda_args, max_sequence_tokens));
  if (sizeof(void*) == 8) {
    EXPECT_EQ(sizeof(kda_chunk_kda_args), 328u);
    EXPECT_EQ(offsetof(kda_chunk_kda_args, max_sequence_tokens), 320u);  // version 1 is the first 320 bytes
  }
}

TEST(CapiBasics, LastErrorIsThreadLocalAndKeptAcrossSuccess) {
  EXPECT_STATUS(kda_chunk_kda_fwd(nullptr, nullptr, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT, "args: null");
  std::string other;
  std::thread([&] { other = kda_last_error_message(); }).join();
  EXPECT_EQ(other, "ok");  // a fresh thread has seen no failure
  EXPECT_EQ(kda_abi_version(), KDA_C_ABI_VERSION);
  size_t bytes = 0;
  const kda_chunk_kda_args a = valid_args();
  EXPECT_EQ(kda_chunk_kda_workspace_size(&a, &bytes), KDA_STATUS_OK);
  EXPECT_EQ(last_error(), "args: null");  // successes do not clear it
}

TEST(CapiBasics, InitDefaults) {
  kda_chunk_kda_args a;
  std::memset(&a, 0x5a, sizeof a);
  ASSERT_EQ(kda_chunk_kda_args_init(&a, sizeof a), KDA_STATUS_OK);
  EXPECT_EQ(a.struct_size, sizeof a);
  EXPECT_EQ(a.num_sequences, 0);
  EXPECT_EQ(a.total_tokens, 0);
  EXPECT_EQ(a.num_heads, 0);
  EXPECT_EQ(a.head_dim_k, 128);
  EXPECT_EQ(a.head_dim_v, 128);
  EXPECT_EQ(a.chunk_size, 64);
  EXPECT_EQ(a.dtype, KDA_DTYPE_BF16);
  EXPECT_EQ(a.cu_seqlens_type, KDA_INDEX_INT32);
  EXPECT_EQ(a.cu_seqlens, nullptr);
  EXPECT_EQ(a.chunk_indices, nullptr);
  EXPECT_EQ(a.chunk_offsets, nullptr);
  EXPECT_EQ(a.num_chunks, -1);
  EXPECT_EQ(a.g_type, KDA_SCALAR_FLOAT32);
  EXPECT_EQ(a.beta_type, KDA_SCALAR_FLOAT32);
  EXPECT_EQ(a.gate, KDA_GATE_SOFTPLUS);
  EXPECT_EQ(a.beta_activation, KDA_BETA_SIGMOID);
  EXPECT_EQ(a.qk_l2norm, 1);
  EXPECT_EQ(a.lower_bound, -5.0f);
  EXPECT_EQ(a.scale, 0.0f);
  EXPECT_EQ(a.q.data, nullptr);
  EXPECT_EQ(a.q.token_stride, 0);
  EXPECT_EQ(a.o.data, nullptr);
  EXPECT_EQ(a.A_log, nullptr);
  EXPECT_EQ(a.initial_state, nullptr);
  EXPECT_EQ(a.final_state, nullptr);
  EXPECT_EQ(a.state_indices, nullptr);
  EXPECT_EQ(a.has_initial_state, nullptr);
  EXPECT_EQ(a.pool_size, -1);
  EXPECT_EQ(a.state_layout, KDA_STATE_K_FIRST);
  EXPECT_EQ(a.state_indices_type, KDA_INDEX_INT32);
  EXPECT_EQ(a.max_sequence_tokens, 0);

  EXPECT_STATUS(kda_chunk_kda_args_init(nullptr, sizeof a), KDA_STATUS_INVALID_ARGUMENT, "args: null");
  kda_chunk_kda_args b;
  std::memset(&b, 0x5a, sizeof b);
  EXPECT_STATUS(kda_chunk_kda_args_init(&b, sizeof b - 4), KDA_STATUS_INVALID_ARGUMENT, "struct_size");
  EXPECT_EQ(b.num_heads, 0x5a5a5a5a);  // untouched
}

// A caller compiled against version 1 (struct_size 320, no max_sequence_tokens) keeps working: init writes only its
// 320 bytes, and the library never reads past them (the bound is then unknown).
constexpr size_t kArgsSizeV1 = 320;
static_assert(sizeof(void*) != 8 || offsetof(kda_chunk_kda_args, max_sequence_tokens) == kArgsSizeV1, "v1 size");

TEST(CapiBasics, VersionOneStructIsStillAccepted) {
  kda_chunk_kda_args a;
  std::memset(&a, 0x5a, sizeof a);
  ASSERT_EQ(kda_chunk_kda_args_init(&a, kArgsSizeV1), KDA_STATUS_OK) << last_error();
  EXPECT_EQ(a.struct_size, kArgsSizeV1);
  EXPECT_EQ(a.chunk_size, 64);
  EXPECT_EQ(a.state_indices_type, KDA_INDEX_INT32);
  unsigned char tail[sizeof a - kArgsSizeV1];
  std::memcpy(tail, reinterpret_cast<const unsigned char*>(&a) + kArgsSizeV1, sizeof tail);
  for (unsigned char byte : tail) EXPECT_EQ(byte, 0x5a) << "init wrote past a version-1 struct";

  // The bytes past a version-1 struct are not the caller's: a bound of -1 there (invalid if read) must be ignored.
  kda_chunk_kda_args v1 = valid_args();
  v1.struct_size = kArgsSizeV1;
  v1.max_sequence_tokens = -1;
  EXPECT_STATUS(fwd_no_workspace(v1), KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace");
  size_t v1_bytes = 0, v2_bytes = 0;
  ASSERT_EQ(kda_chunk_kda_workspace_size(&v1, &v1_bytes), KDA_STATUS_OK) << last_error();
  kda_chunk_kda_args v2 = valid_args();
  ASSERT_EQ(kda_chunk_kda_workspace_size(&v2, &v2_bytes), KDA_STATUS_OK) << last_error();
  EXPECT_EQ(v1_bytes, v2_bytes);
  // Read as version 2, the same bytes are an error: the field is read exactly when struct_size covers it.
  v1.struct_size = sizeof v1;
  EXPECT_STATUS(fwd_no_workspace(v1), KDA_STATUS_INVALID_ARGUMENT, "max_sequence_tokens");
}

// ---- kda_chunk_kda_fwd: every check returns its code and message, before any GPU call --------------------------

TEST(CapiFwdErrors, ValidArgumentsReachTheWorkspaceCheck) {
  const kda_chunk_kda_args a = valid_args();
  size_t need = 0;
  ASSERT_EQ(kda_chunk_kda_workspace_size(&a, &need), KDA_STATUS_OK);
  ASSERT_GT(need, 0u);
  EXPECT_STATUS(fwd_no_workspace(a), KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace: smaller");
  EXPECT_STATUS(kda_chunk_kda_fwd(&a, g_fake[11], need - 1, nullptr), KDA_STATUS_WORKSPACE_TOO_SMALL,
                "workspace: smaller");
  EXPECT_STATUS(kda_chunk_kda_fwd(&a, nullptr, need, nullptr), KDA_STATUS_INVALID_ARGUMENT, "workspace: null");
}

TEST(CapiFwdErrors, StructAndNull) {
  EXPECT_STATUS(kda_chunk_kda_fwd(nullptr, nullptr, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT, "args: null");
  for (size_t size : {size_t(0), kArgsSizeV1 - 8, kArgsSizeV1 + 4, sizeof(kda_chunk_kda_args) + 8, size_t(1) << 40}) {
    kda_chunk_kda_args a = valid_args();
    a.struct_size = size;
    EXPECT_STATUS(fwd_no_workspace(a), KDA_STATUS_INVALID_ARGUMENT, "struct_size");
    size_t bytes = 99;
    EXPECT_STATUS(kda_chunk_kda_workspace_size(&a, &bytes), KDA_STATUS_INVALID_ARGUMENT, "struct_size");
    EXPECT_EQ(bytes, 99u);
  }
}

// One field set to a bad value -> code and message part.
struct BadCase {
  const char* name;
  void (*mutate)(kda_chunk_kda_args*);
  int code;
  const char* message;
  bool sizing_checks_it;  // kda_chunk_kda_workspace_size reports it too
};

const BadCase kBadCases[] = {
    // Unknown enum codes: rejected, never cast.
    {"dtype 2", [](kda_chunk_kda_args* a) { a->dtype = 2; }, 1, "dtype: unknown", true},
    {"dtype -1", [](kda_chunk_kda_args* a) { a->dtype = -1; }, 1, "dtype: unknown", true},
    {"cu_seqlens_type 2", [](kda_chunk_kda_args* a) { a->cu_seqlens_type = 2; }, 1, "cu_seqlens_type: unknown", true},
    {"chunk_table_type 7", [](kda_chunk_kda_args* a) { a->chunk_table_type = 7; }, 1, "chunk_table_type: unknown", true},
    {"g_type 3", [](kda_chunk_kda_args* a) { a->g_type = 3; }, 1, "g_type: unknown", true},
    {"beta_type -2", [](kda_chunk_kda_args* a) { a->beta_type = -2; }, 1, "beta_type: unknown", true},
    {"gate 3", [](kda_chunk_kda_args* a) { a->gate = 3; }, 1, "gate: unknown", true},
    {"beta_activation 3", [](kda_chunk_kda_args* a) { a->beta_activation = 3; }, 1, "beta_activation: unknown", true},
    {"qk_l2norm 2", [](kda_chunk_kda_args* a) { a->qk_l2norm = 2; }, 1, "qk_l2norm", true},
    {"state_layout 2", [](kda_chunk_kda_args* a) { a->state_layout = 2; }, 1, "state_layout: unknown", true},
    {"state_indices_type 9", [](kda_chunk_kda_args* a) { a->state_indices_type = 9; }, 1, "state_indices_type", true},
    // Shapes.
    {"head_dim_k 96", [](kda_chunk_kda_args* a) { a->head_dim_k = 96; }, 2, "head_dim_k", true},
    {"head_dim_v 96", [](kda_chunk_kda_args* a) { a->head_dim_v = 96; }, 2, "head_dim_v", true},
    {"chunk_size 16", [](kda_chunk_kda_args* a) { a->chunk_size = 16; }, 2, "chunk_size", true},
    {"chunk_size 48", [](kda_chunk_kda_args* a) { a->chunk_size = 48; }, 1, "chunk_size", true},
    {"num_heads 0", [](kda_chunk_kda_args* a) { a->num_heads = 0; }, 1, "num_heads", true},
    {"num_heads 5000", [](kda_chunk_kda_args* a) { a->num_heads = 5000; }, 1, "num_heads", true},
    {"num_sequences -1", [](kda_chunk_kda_args* a) { a->num_sequences = -1; }, 1, "num_sequences: negative", true},
    {"total_tokens -5", [](kda_chunk_kda_args* a) { a->total_tokens = -5; }, 1, "total_tokens: negative", true},
    {"huge T", [](kda_chunk_kda_args* a) { a->total_tokens = int64_t(1) << 40; }, 1, "more than 2^31-1 tokens", true},
    // Chunk tables.
    {"indices without offsets", [](kda_chunk_kda_args* a) { a->chunk_indices = fake(12); a->num_chunks = 5; }, 1,
     "pass both", true},
    {"offsets without indices", [](kda_chunk_kda_args* a) { a->chunk_offsets = fake(12); a->num_chunks = 5; }, 1,
     "pass both", true},
    {"tables without NT", [](kda_chunk_kda_args* a) { a->chunk_indices = fake(12); a->chunk_offsets = fake(13); }, 1,
     "num_chunks", true},
    {"NT above bound",
     [](kda_chunk_kda_args* a) { a->chunk_indices = fake(12); a->chunk_offsets = fake(13); a->num_chunks = 8; }, 1,
     "num_chunks", true},
    // The bound on the sequence lengths (version 2): >= 0, and 0 or at least ceil(T / N) = 77.
    {"max_sequence_tokens -1", [](kda_chunk_kda_args* a) { a->max_sequence_tokens = -1; }, 1,
     "max_sequence_tokens: negative", true},
    {"max_sequence_tokens below T/N", [](kda_chunk_kda_args* a) { a->max_sequence_tokens = 76; }, 1,
     "max_sequence_tokens: smaller", true},
    // Pointers and views (not needed for sizing).
    {"null cu_seqlens", [](kda_chunk_kda_args* a) { a->cu_seqlens = nullptr; }, 1, "cu_seqlens: null", false},
    {"null q", [](kda_chunk_kda_args* a) { a->q.data = nullptr; }, 1, "q: null", false},
    {"null k", [](kda_chunk_kda_args* a) { a->k.data = nullptr; }, 1, "k: null", false},
    {"null v", [](kda_chunk_kda_args* a) { a->v.data = nullptr; }, 1, "v: null", false},
    {"null g", [](kda_chunk_kda_args* a) { a->g.data = nullptr; }, 1, "g: null", false},
    {"null beta", [](kda_chunk_kda_args* a) { a->beta.data = nullptr; }, 1, "beta: null", false},
    {"null o", [](kda_chunk_kda_args* a) { a->o.data = nullptr; }, 1, "o: null", false},
    {"q heads overlap", [](kda_chunk_kda_args* a) { a->q.head_stride = kK - 1; }, 1, "q: null or overlapping", false},
    {"v tokens overlap", [](kda_chunk_kda_args* a) { a->v.token_stride = kV; }, 1, "v: null or overlapping", false},
    {"beta head stride 0", [](kda_chunk_kda_args* a) { a->beta.head_stride = 0; }, 1, "beta: null or overlapping",
     false},
    {"negative stride", [](kda_chunk_kda_args* a) { a->k.token_stride = -kH * kK; }, 1, "k: null or overlapping", false},
    // Gate.
    {"softplus without A_log", [](kda_chunk_kda_args* a) { a->A_log = nullptr; }, 1, "A_log", false},
    {"lower_bound 0", [](kda_chunk_kda_args* a) { a->gate = KDA_GATE_LOWER_BOUND; a->lower_bound = 0.0f; }, 1,
     "lower_bound", false},
    {"lower_bound -6", [](kda_chunk_kda_args* a) { a->gate = KDA_GATE_LOWER_BOUND; a->lower_bound = -6.0f; }, 1,
     "lower_bound", false},
    // State pool.
    {"state_indices without pool",
     [](kda_chunk_kda_args* a) {
       a->initial_state = nullptr;
       a->final_state = nullptr;
       a->state_indices = fake(14);
       a->pool_size = 8;
     },
     1, "state_indices: given without", false},
    {"state_indices without pool_size", [](kda_chunk_kda_args* a) { a->state_indices = fake(14); }, 1,
     "pool_size: required", false},
    {"pool smaller than N", [](kda_chunk_kda_args* a) { a->pool_size = kN - 1; }, 1, "pool_size: smaller", false},
};

TEST(CapiFwdErrors, EachBadFieldHasItsCodeAndMessage) {
  for (const BadCase& c : kBadCases) {
    SCOPED_TRACE(c.name);
    kda_chunk_kda_args a = valid_args();
    c.mutate(&a);
    EXPECT_STATUS(fwd_no_workspace(a), c.code, c.message);
    size_t bytes = 77;
    const int s = kda_chunk_kda_workspace_size(&a, &bytes);
    if (c.sizing_checks_it) {
      EXPECT_STATUS(s, c.code, c.message);
      EXPECT_EQ(bytes, 77u) << "written on error";
    } else {
      EXPECT_EQ(s, KDA_STATUS_OK) << last_error();
    }
  }
}

// A bound of exactly ceil(T / N) is valid (validation takes no more than the host knows), as is the true longest.
TEST(CapiFwdErrors, SequenceBoundAtLeastTheAverageIsValid) {
  kda_chunk_kda_args a = valid_args();
  for (int64_t bound : {int64_t(77), int64_t(129), int64_t(1) << 40}) {
    a.max_sequence_tokens = bound;
    EXPECT_STATUS(fwd_no_workspace(a), KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace");
  }
}

TEST(CapiFwdErrors, LowerBoundGateWithoutALogIsValid) {
  kda_chunk_kda_args a = valid_args();
  a.gate = KDA_GATE_LOWER_BOUND;
  a.A_log = nullptr;
  EXPECT_STATUS(fwd_no_workspace(a), KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace");
  a.gate = KDA_GATE_PRECOMPUTED;
  EXPECT_STATUS(fwd_no_workspace(a), KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace");
}

TEST(CapiFwdErrors, EmptyBatchNeedsNoTensors) {
  kda_chunk_kda_args a = valid_args();
  a.total_tokens = 0;
  a.q.data = a.k.data = a.v.data = a.g.data = a.beta.data = nullptr;
  a.o.data = nullptr;
  size_t need = 0;
  ASSERT_EQ(kda_chunk_kda_workspace_size(&a, &need), KDA_STATUS_OK);
  ASSERT_GT(need, 0u);  // the derived chunk tables still need room (N + 1 offsets)
  EXPECT_STATUS(kda_chunk_kda_fwd(&a, g_fake[11], need - 1, nullptr), KDA_STATUS_WORKSPACE_TOO_SMALL, "workspace");
}

// ---- kda_chunk_kda_workspace_size: pure and deterministic ---------------------------------------------------------

size_t workspace_of(const kda_chunk_kda_args& a) {
  size_t bytes = 0;
  EXPECT_EQ(kda_chunk_kda_workspace_size(&a, &bytes), KDA_STATUS_OK) << last_error();
  return bytes;
}

TEST(CapiWorkspace, PureAndDeterministic) {
  const kda_chunk_kda_args a = valid_args();
  const kda_chunk_kda_args copy = a;
  const size_t first = workspace_of(a);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(workspace_of(a), first);
  EXPECT_EQ(std::memcmp(&a, &copy, sizeof a), 0) << "args modified";
  std::thread([&] { EXPECT_EQ(workspace_of(a), first); }).join();

  // No data pointer matters: sizing before the batch's buffers exist gives the same answer.
  kda_chunk_kda_args bare;
  ASSERT_EQ(kda_chunk_kda_args_init(&bare, sizeof bare), KDA_STATUS_OK);
  bare.num_sequences = kN;
  bare.total_tokens = kT;
  bare.num_heads = kH;
  bare.head_dim_k = kK;
  bare.head_dim_v = kV;
  EXPECT_EQ(workspace_of(bare), first);
  EXPECT_STATUS(kda_chunk_kda_workspace_size(&bare, nullptr), KDA_STATUS_INVALID_ARGUMENT, "bytes: null");
  EXPECT_STATUS(kda_chunk_kda_workspace_size(nullptr, nullptr), KDA_STATUS_INVALID_ARGUMENT, "null");
}

TEST(CapiWorkspace, DependsOnWhatItShould) {
  const kda_chunk_kda_args a = valid_args();
  const size_t base = workspace_of(a);
  // Chunks of 64 and K = V = 64: the fused form at any average length. Lower bound: Aqk, fp32-sized [T,H,BT] (its
  // 16-bit hi + lo pair), and w, u, kg, qg in the I/O type (bf16); no fp32 G (G, Akk and Tinv never leave the chip).
  EXPECT_GE(base, size_t(kT) * kH * 64 * 4 + 4 * size_t(kT) * kH * kK * 2);

  kda_chunk_kda_args more = a;
  more.total_tokens = 2 * kT;
  EXPECT_GT(workspace_of(more), base);

  // Chunks of 32 and sequences averaging fewer than four chunks (229 < 4 * 32 * 3): the staged form. Lower bound:
  // the fp32 gate cumsum plus Aqk, fp32 [T,H,BT] (with l2norm and K = V = 64, Akk and Tinv never leave the chip).
  kda_chunk_kda_args staged = a;
  staged.chunk_size = 32;
  const size_t staged_base = workspace_of(staged);
  EXPECT_GE(staged_base, size_t(kT) * kH * kK * 4 + size_t(kT) * kH * 32 * 4);

  kda_chunk_kda_args no_norm = staged;
  no_norm.qk_l2norm = 0;
  // Three bf16 [T,H,K] buffers fewer (q, k normalised, and qg), two fp32 [T,H,BT] more and the per-chunk h:
  // unnormalised q, k may be unaligned caller views, which need the unfused launches with Akk and Tinv in memory,
  // and without the one prepare kernel there is no qg for the state kernel to form the output from, so the output
  // is a launch of its own reading h (derived grid: ceil(T / 32) + N chunks).
  const size_t h_bytes = size_t((kT + 31) / 32 + kN) * kH * kK * kV * 2;
  EXPECT_EQ(workspace_of(no_norm) + 3 * size_t(kT) * kH * kK * 2, staged_base + 2 * size_t(kT) * kH * 32 * 4 + h_bytes);
  // The fused form normalises q and k itself: without the in-kernel l2norm its workspace is the same.
  kda_chunk_kda_args fused_no_norm = a;
  fused_no_norm.qk_l2norm = 0;
  EXPECT_EQ(workspace_of(fused_no_norm), base);

  // In chunks of 32, sequences averaging four chunks or more (T >= 4 * 32 * N) run the fused form, whose workspace
  // has no G and no normalised q, k: one token more can make it smaller.
  kda_chunk_kda_args at_rule = staged, below_rule = staged;
  at_rule.total_tokens = 4 * 32 * kN;
  below_rule.total_tokens = 4 * 32 * kN - 1;
  EXPECT_LT(workspace_of(at_rule), workspace_of(below_rule));
  // In chunks of 64 the same average changes nothing but the token count: the fused form on both sides, one token
  // more costing far less than the fp32 G of the staged form (T x H x K x 4 bytes).
  kda_chunk_kda_args at_rule64 = a, below_rule64 = a;
  at_rule64.total_tokens = 4 * 64 * kN;
  below_rule64.total_tokens = 4 * 64 * kN - 1;
  EXPECT_GT(workspace_of(at_rule64), workspace_of(below_rule64));
  EXPECT_LT(workspace_of(at_rule64) - workspace_of(below_rule64), size_t(kT) * kH * kK * 4);

  kda_chunk_kda_args tables = a;  // exact grids (NT = 5 here) and no derived tables: smaller
  tables.chunk_indices = fake(12);
  tables.chunk_offsets = fake(13);
  tables.num_chunks = 5;
  EXPECT_LT(workspace_of(tables), base);

  kda_chunk_kda_args fp16 = a;  // same element size
  fp16.dtype = KDA_DTYPE_FP16;
  EXPECT_EQ(workspace_of(fp16), base);

  kda_chunk_kda_args unused = a;  // pointers, gate, beta and state do not change the size
  unused.gate = KDA_GATE_PRECOMPUTED;
  unused.beta_activation = KDA_BETA_NONE;
  unused.state_layout = KDA_STATE_V_FIRST;
  unused.initial_state = nullptr;
  EXPECT_EQ(workspace_of(unused), base);
}

// ---- Host metadata builder ---------------------------------------------------------------------------------------

struct Batch {
  const char* name;
  std::vector<int64_t> cu;
  int chunk_size;
  std::vector<int64_t> indices;  // [NT*2]
  std::vector<int64_t> offsets;  // [N+1]
};

const std::vector<Batch>& batches() {
  static const std::vector<Batch> b = {
      {"gpu_test_batch", {0, 100, 100, 229}, 64, {0, 0, 0, 1, 2, 0, 2, 1, 2, 2}, {0, 2, 2, 5}},
      {"zero_lengths_everywhere", {0, 0, 1, 2, 66, 66}, 32, {1, 0, 2, 0, 3, 0, 3, 1}, {0, 0, 1, 2, 4, 4}},
      {"all_empty", {0, 0, 0}, 64, {}, {0, 0, 0}},
      {"no_sequences", {0}, 16, {}, {0}},
      {"spec_3x8", {0, 8, 16, 24}, 16, {0, 0, 1, 0, 2, 0}, {0, 1, 2, 3}},
      {"exact_multiple", {0, 64, 192}, 64, {0, 0, 1, 0, 1, 1}, {0, 1, 3}},
  };
  return b;
}

// cu as raw bytes of the given type.
std::vector<unsigned char> as_bytes(const std::vector<int64_t>& x, int type) {
  std::vector<unsigned char> out(x.size() * (type == KDA_INDEX_INT64 ? 8 : 4));
  for (size_t i = 0; i < x.size(); ++i) {
    if (type == KDA_INDEX_INT64) {
      std::memcpy(&out[i * 8], &x[i], 8);
    } else {
      const int32_t v = int32_t(x[i]);
      std::memcpy(&out[i * 4], &v, 4);
    }
  }
  return out;
}
int64_t element(const unsigned char* p, size_t i, int type) {
  if (type == KDA_INDEX_INT64) {
    int64_t v;
    std::memcpy(&v, p + i * 8, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, p + i * 4, 4);
  return v;
}
std::vector<int64_t> widen(const unsigned char* p, size_t n, int type) {
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = element(p, i, type);
  return out;
}

void check_batch(const Batch& b, int cu_type, int out_type) {
  SCOPED_TRACE(std::string(b.name) + " cu_type " + std::to_string(cu_type) + " out_type " + std::to_string(out_type));
  const std::vector<unsigned char> cu = as_bytes(b.cu, cu_type);
  const int64_t n = int64_t(b.cu.size()) - 1, want_nt = int64_t(b.indices.size()) / 2;
  int64_t nt = -1, pos = 42;
  ASSERT_EQ(kda_count_chunks(cu.data(), cu_type, n, b.chunk_size, b.cu.back(), &nt, &pos), KDA_STATUS_OK);
  EXPECT_EQ(nt, want_nt);
  EXPECT_EQ(pos, -1);
  ASSERT_EQ(kda_count_chunks(cu.data(), cu_type, n, b.chunk_size, -1, &nt, nullptr), KDA_STATUS_OK);
  EXPECT_EQ(nt, want_nt);

  // The longest sequence, against a loop of its own.
  int64_t want_longest = 0, longest = -1;
  for (int64_t s = 0; s < n; ++s) want_longest = std::max(want_longest, b.cu[size_t(s + 1)] - b.cu[size_t(s)]);
  pos = 42;
  ASSERT_EQ(kda_longest_sequence(cu.data(), cu_type, n, b.cu.back(), &longest, &pos), KDA_STATUS_OK) << last_error();
  EXPECT_EQ(longest, want_longest);
  EXPECT_EQ(pos, -1);

  const size_t width = out_type == KDA_INDEX_INT64 ? 8 : 4;
  std::vector<unsigned char> indices(size_t(want_nt + 1) * 2 * width, 0xee), offsets(size_t(n + 1) * width, 0xee);
  nt = -1;
  ASSERT_EQ(kda_build_chunk_metadata(cu.data(), cu_type, n, b.chunk_size, b.cu.back(), out_type,
                                     want_nt > 0 ? indices.data() : nullptr, want_nt, offsets.data(), &nt, &pos),
            KDA_STATUS_OK)
      << last_error();
  EXPECT_EQ(nt, want_nt);
  EXPECT_EQ(widen(indices.data(), size_t(want_nt) * 2, out_type), b.indices);
  EXPECT_EQ(widen(offsets.data(), size_t(n + 1), out_type), b.offsets);
  EXPECT_EQ(indices[size_t(want_nt) * 2 * width], 0xee) << "wrote past NT rows";

  // Packed size: indices, then offsets at an 8-byte boundary.
  size_t bytes = 0;
  ASSERT_EQ(kda_chunk_metadata_bytes(want_nt, n, out_type, &bytes), KDA_STATUS_OK);
  EXPECT_EQ(bytes, (size_t(want_nt) * 2 * width + 7) / 8 * 8 + size_t(n + 1) * width);
}

TEST(CapiMetadata, KnownBatchesAllIndexTypes) {
  for (const Batch& b : batches()) {
    for (int cu_type : {KDA_INDEX_INT32, KDA_INDEX_INT64}) {
      for (int out_type : {KDA_INDEX_INT32, KDA_INDEX_INT64}) check_batch(b, cu_type, out_type);
    }
  }
}

// A brute-force loop, independent of the library, on random batches with many zero lengths.
TEST(CapiMetadata, RandomBatchesAgainstBruteForce) {
  uint64_t state = 12345;
  auto next = [&] { state = state * 6364136223846793005ull + 1442695040888963407ull; return state >> 33; };
  for (int trial = 0; trial < 500; ++trial) {
    const int n = int(next() % 20), bt = 16 << (next() % 3);
    std::vector<int64_t> cu{0};
    for (int i = 0; i < n; ++i) cu.push_back(cu.back() + (next() % 3 == 0 ? 0 : int64_t(next() % 300)));
    Batch b{"random", cu, bt, {}, {}};
    for (int s = 0; s < n; ++s) {
      b.offsets.push_back(int64_t(b.indices.size()) / 2);
      for (int64_t c = 0; c * bt < cu[s + 1] - cu[s]; ++c) {
        b.indices.push_back(s);
        b.indices.push_back(c);
      }
    }
    b.offsets.push_back(int64_t(b.indices.size()) / 2);
    check_batch(b, trial % 2 == 0 ? KDA_INDEX_INT32 : KDA_INDEX_INT64, trial % 3 == 0 ? KDA_INDEX_INT64 : KDA_INDEX_INT32);
    if (HasFailure()) return;
  }
}

TEST(CapiMetadata, ErrorsNamePositionAndWriteNothing) {
  const int32_t good[] = {0, 100, 100, 229};
  const int32_t bad_start[] = {1, 100, 100, 229};
  const int32_t decreasing[] = {0, 100, 90, 229};
  const int64_t too_big[] = {0, 100, int64_t(1) << 32, (int64_t(1) << 32) + 5};
  int64_t nt = -9, pos = 0;
  int32_t indices[32], offsets[8];
  std::memset(indices, 0x77, sizeof indices);
  std::memset(offsets, 0x77, sizeof offsets);
  auto untouched = [&] {
    for (int32_t v : indices) if (v != 0x77777777) return false;
    for (int32_t v : offsets) if (v != 0x77777777) return false;
    return nt == -9;
  };
  auto build = [&](const void* cu, int cu_type, int64_t n, int bt, int64_t t, int out_type, void* idx, int64_t cap,
                   void* off, int64_t* ntp) {
    return kda_build_chunk_metadata(cu, cu_type, n, bt, t, out_type, idx, cap, off, ntp, &pos);
  };

  EXPECT_STATUS(build(bad_start, 0, 3, 64, 229, 0, indices, 16, offsets, &nt), 1, "cu_seqlens[0] must be 0");
  EXPECT_EQ(pos, 0);
  EXPECT_STATUS(build(decreasing, 0, 3, 64, 229, 0, indices, 16, offsets, &nt), 1, "decreasing");
  EXPECT_EQ(pos, 2);
  EXPECT_STATUS(build(good, 0, 3, 64, 230, 0, indices, 16, offsets, &nt), 1, "total_tokens");
  EXPECT_EQ(pos, 3);
  EXPECT_STATUS(build(too_big, 1, 3, 64, -1, 0, indices, 16, offsets, &nt), 1, "does not fit out_type");
  EXPECT_EQ(pos, 2);
  EXPECT_STATUS(build(good, 0, 3, 64, 229, 0, indices, 4, offsets, &nt), 1, "capacity_rows");
  EXPECT_STATUS(build(good, 0, 3, 64, 229, 0, nullptr, 5, offsets, &nt), 1, "chunk_indices output is null");
  EXPECT_STATUS(build(good, 0, 3, 64, 229, 0, indices, 16, nullptr, &nt), 1, "chunk_offsets output is null");
  EXPECT_STATUS(build(good, 0, 3, 64, 229, 0, indices, 16, offsets, nullptr), 1, "num_chunks output is null");
  EXPECT_STATUS(build(nullptr, 0, 3, 64, 229, 0, indices, 16, offsets, &nt), 1, "cu_seqlens is null");
  EXPECT_STATUS(build(good, 0, -1, 64, 229, 0, indices, 16, offsets, &nt), 1, "num_sequences is negative");
  EXPECT_STATUS(build(good, 0, 3, 48, 229, 0, indices, 16, offsets, &nt), 1, "chunk_size");
  EXPECT_STATUS(build(good, 0, 3, 64, -2, 0, indices, 16, offsets, &nt), 1, "total_tokens is negative");
  pos = 5;
  EXPECT_STATUS(build(good, 2, 3, 64, 229, 0, indices, 16, offsets, &nt), 1, "cu_type: unknown");
  EXPECT_EQ(pos, -1);
  EXPECT_STATUS(build(good, 0, 3, 64, 229, -1, indices, 16, offsets, &nt), 1, "out_type: unknown");
  EXPECT_TRUE(untouched());

  EXPECT_STATUS(kda_count_chunks(good, 3, 3, 64, 229, &nt, &pos), 1, "cu_type: unknown");
  EXPECT_STATUS(kda_count_chunks(decreasing, 0, 3, 64, 229, &nt, &pos), 1, "decreasing");
  EXPECT_EQ(pos, 2);
  EXPECT_STATUS(kda_count_chunks(good, 0, 3, 64, 229, nullptr, &pos), 1, "num_chunks output is null");
  EXPECT_EQ(nt, -9);

  // kda_longest_sequence validates like kda_count_chunks and writes nothing on error.
  EXPECT_STATUS(kda_longest_sequence(decreasing, 0, 3, 229, &nt, &pos), 1, "decreasing");
  EXPECT_EQ(pos, 2);
  EXPECT_STATUS(kda_longest_sequence(good, 0, 3, 230, &nt, &pos), 1, "total_tokens");
  EXPECT_EQ(pos, 3);
  pos = 5;
  EXPECT_STATUS(kda_longest_sequence(good, 2, 3, 229, &nt, &pos), 1, "cu_type: unknown");
  EXPECT_EQ(pos, -1);
  EXPECT_STATUS(kda_longest_sequence(nullptr, 0, 3, 229, &nt, &pos), 1, "cu_seqlens is null");
  EXPECT_STATUS(kda_longest_sequence(good, 0, 3, 229, nullptr, &pos), 1, "max_sequence_tokens output is null");
  EXPECT_EQ(nt, -9);

  size_t bytes = 5;
  EXPECT_STATUS(kda_chunk_metadata_bytes(5, 3, 2, &bytes), 1, "type: unknown");
  EXPECT_STATUS(kda_chunk_metadata_bytes(-1, 3, 0, &bytes), 1, "num_chunks: negative");
  EXPECT_STATUS(kda_chunk_metadata_bytes(5, -1, 0, &bytes), 1, "num_sequences: negative");
  EXPECT_STATUS(kda_chunk_metadata_bytes(5, 3, 0, nullptr), 1, "bytes: null");
  EXPECT_EQ(bytes, 5u);
}

// Upload: only the checks that come before the copy (the copy itself needs a GPU; tests/capi/test_capi_gpu.cpp).
TEST(CapiMetadata, UploadArgumentErrorsComeBeforeTheCopy) {
  const int32_t good[] = {0, 100, 100, 229};
  const int32_t bad[] = {0, 100, 90, 229};
  alignas(8) unsigned char staging[256];
  std::memset(staging, 0x33, sizeof staging);
  void* dev = g_fake[15];  // never written on these paths
  kda_device_chunk_metadata out;
  std::memset(&out, 0x44, sizeof out);
  auto up = [&](const void* cu, int cu_type, int out_type, void* st, size_t st_bytes, void* d, size_t d_bytes,
                kda_device_chunk_metadata* o) {
    return kda_upload_chunk_metadata(cu, cu_type, 3, 64, 229, out_type, st, st_bytes, d, d_bytes, nullptr, o);
  };
  EXPECT_STATUS(up(good, 0, 0, staging, 256, dev, 256, nullptr), 1, "out: null");
  EXPECT_STATUS(up(good, 0, 0, staging, 256, nullptr, 256, &out), 1, "device_buffer is null");
  EXPECT_STATUS(up(good, 0, 0, staging, 256, g_fake[15] + 4, 252, &out), 1, "device_buffer is not 8-byte aligned");
  EXPECT_STATUS(up(bad, 0, 0, staging, 256, dev, 256, &out), 1, "decreasing");
  EXPECT_STATUS(up(good, 0, 0, staging, 256, dev, 55, &out), 1, "device_bytes");  // needs 40 + 16 = 56
  EXPECT_STATUS(up(good, 0, 0, nullptr, 256, dev, 256, &out), 1, "staging buffer is null");
  EXPECT_STATUS(up(good, 0, 0, staging + 4, 252, dev, 256, &out), 1, "staging buffer is not 8-byte aligned");
  EXPECT_STATUS(up(good, 0, 0, staging, 55, dev, 256, &out), 1, "staging_bytes");
  EXPECT_STATUS(up(good, 7, 0, staging, 256, dev, 256, &out), 1, "cu_type: unknown");
  EXPECT_STATUS(up(good, 0, 2, staging, 256, dev, 256, &out), 1, "out_type: unknown");
  for (unsigned char c : staging) ASSERT_EQ(c, 0x33) << "staging written on error";
  const unsigned char* o = reinterpret_cast<const unsigned char*>(&out);
  for (size_t i = 0; i < sizeof out; ++i) ASSERT_EQ(o[i], 0x44) << "out written on error";
}

}  // namespace
