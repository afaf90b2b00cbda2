/* Compiled as strict C99 (-pedantic-errors -Wall -Wextra -Werror): proves that kda_c.h is valid C and that a C
 * caller can fill the argument struct and call the library. Linked into kda_test_capi_host, which calls the two
 * functions below from C++ and compares the layout with the one the C++ compiler sees. */
#include "kda/kda_c.h"

#include <stddef.h>
#include <string.h>

/* C99 has no _Static_assert: a negative array size fails the build. */
#define KDA_C_STATIC_ASSERT(cond, name) typedef char kda_c_static_assert_##name[(cond) ? 1 : -1]

KDA_C_STATIC_ASSERT(KDA_STATUS_OK == 0 && KDA_STATUS_INVALID_ARGUMENT == 1 && KDA_STATUS_UNSUPPORTED == 2 &&
                        KDA_STATUS_WORKSPACE_TOO_SMALL == 3 && KDA_STATUS_RUNTIME_ERROR == 4,
                    status_codes);
KDA_C_STATIC_ASSERT(sizeof(void*) != 8 || sizeof(kda_chunk_kda_args) == 328, args_size);
KDA_C_STATIC_ASSERT(sizeof(void*) != 8 || offsetof(kda_chunk_kda_args, q) == 112, args_q_offset);
KDA_C_STATIC_ASSERT(sizeof(void*) != 8 || offsetof(kda_chunk_kda_args, state_indices_type) == 316, args_v1_last_offset);
KDA_C_STATIC_ASSERT(sizeof(void*) != 8 || offsetof(kda_chunk_kda_args, max_sequence_tokens) == 320, args_v2_offset);
KDA_C_STATIC_ASSERT(KDA_C_ABI_VERSION == 2 && KDA_DEVICE_STATUS_SEQUENCE_OVER_BOUND == 8, version_2);
KDA_C_STATIC_ASSERT(sizeof(void*) != 8 || sizeof(kda_device_chunk_metadata) == 40, metadata_size);

/* Layout as the C compiler sees it: sizeof, then the offsets of a few fields spread over the struct. */
void kda_capi_c_layout(size_t out[9]) {
  out[0] = sizeof(kda_chunk_kda_args);
  out[1] = offsetof(kda_chunk_kda_args, total_tokens);
  out[2] = offsetof(kda_chunk_kda_args, cu_seqlens);
  out[3] = offsetof(kda_chunk_kda_args, lower_bound);
  out[4] = offsetof(kda_chunk_kda_args, beta);
  out[5] = offsetof(kda_chunk_kda_args, o);
  out[6] = offsetof(kda_chunk_kda_args, pool_size);
  out[7] = sizeof(kda_device_chunk_metadata);
  out[8] = offsetof(kda_chunk_kda_args, max_sequence_tokens);
}

/* A C caller's round trip; returns 0, or the number of the first check that failed. */
int kda_capi_c_round_trip(void) {
  kda_chunk_kda_args a;
  size_t bytes = 12345;
  int32_t cu[3] = {0, 100, 229};
  int64_t nt = -7;
  memset(&a, 0xff, sizeof a);
  if (kda_abi_version() != KDA_C_ABI_VERSION) return 1;
  if (kda_chunk_kda_args_init(&a, sizeof a) != KDA_STATUS_OK) return 2;
  if (a.struct_size != sizeof a || a.chunk_size != 64 || a.pool_size != -1 || a.q.data != NULL) return 3;
  if (kda_chunk_kda_fwd(NULL, NULL, 0, NULL) != KDA_STATUS_INVALID_ARGUMENT) return 4;
  if (strcmp(kda_last_error_message(), "args: null") != 0) return 5;
  a.num_sequences = 2;
  a.total_tokens = 229;
  a.num_heads = 2;
  a.head_dim_k = 96;
  if (kda_chunk_kda_workspace_size(&a, &bytes) != KDA_STATUS_UNSUPPORTED || bytes != 12345) return 6;
  a.head_dim_k = 64;
  if (kda_chunk_kda_workspace_size(&a, &bytes) != KDA_STATUS_OK || bytes == 12345) return 7;
  if (kda_count_chunks(cu, KDA_INDEX_INT32, 2, 64, 229, &nt, NULL) != KDA_STATUS_OK || nt != 2 + 3) return 8;
  if (strcmp(kda_status_name(KDA_STATUS_WORKSPACE_TOO_SMALL), "workspace too small") != 0) return 9;
  if (a.max_sequence_tokens != 0) return 10;
  nt = -7;
  if (kda_longest_sequence(cu, KDA_INDEX_INT32, 2, 229, &nt, NULL) != KDA_STATUS_OK || nt != 129) return 11;
  a.max_sequence_tokens = 129;
  if (kda_chunk_kda_workspace_size(&a, &bytes) != KDA_STATUS_OK) return 12;
  return 0;
}
