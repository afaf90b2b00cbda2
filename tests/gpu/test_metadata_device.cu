// Chunk tables on the device: the device derivation equals the host builder on every batch kind (zero-length
// sequences anywhere, decodes, spec batches, random batches), rows past NT are marked empty, and the upload helper
// delivers the builder's tables with one async copy; the prepare kernels' grid visits every (chunk, head) once.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "gpu_test_utils.hpp"
#include "kda/detail/chunk_table.hpp"
#include "kda/launch/chunk_metadata_args.hpp"
#include "kda/launch/stage_common.hpp"
#include "kda/metadata_upload.hpp"

namespace kda::test {
namespace {

std::vector<std::vector<int64_t>> batches() {
  std::vector<std::vector<int64_t>> out = {
      {0},                        // N = 0
      {0, 0},                     // one empty sequence
      {0, 1},                     // one token
      {0, 0, 0, 100, 100, 164, 164},  // zeros first, middle, last
      {0, 64, 128, 129},
      {0, 8192},
  };
  std::vector<int64_t> spec, mix;
  EXPECT_TRUE(make_spec_cu_seqlens(256, 8, &spec).is_ok());
  EXPECT_TRUE(make_decode_prefill_cu_seqlens(56, {200, 1799, 640, 1000}, &mix).is_ok());
  out.push_back(spec);
  out.push_back(mix);
  std::mt19937_64 rng(3);
  for (int b = 0; b < 40; ++b) {  // random batches, up to 3000 sequences (more than the 1024 scan threads)
    const int n = int(rng() % 3000);
    std::vector<int64_t> cu{0};
    for (int i = 0; i < n; ++i) cu.push_back(cu.back() + int64_t(rng() % 4 == 0 ? 0 : rng() % 300));
    out.push_back(cu);
  }
  return out;
}

TEST(DeviceMetadata, DerivedTablesEqualHostBuilder) {
  ASSERT_TRUE(have_gpu());
  for (const auto& cu : batches()) {
    for (int BT : {16, 32, 64}) {
      for (IndexType it : {IndexType::kInt32, IndexType::kInt64}) {
        ChunkMetadata want;
        ASSERT_TRUE(build_chunk_metadata(cu, BT, &want).is_ok());
        const int64_t N = int64_t(cu.size()) - 1, T = cu.back();
        std::vector<int32_t> cu32(cu.begin(), cu.end());
        DeviceBuffer d_cu(cu.size() * index_type_size(it));
        d_cu.upload(it == IndexType::kInt64 ? static_cast<const void*>(cu.data()) : cu32.data(), d_cu.bytes());
        ChunkMetadataArgs m;
        m.cu_seqlens = IndexSpan{d_cu.get(), it};
        m.num_sequences = N;
        m.total_tokens = T;
        DeviceBuffer ws(std::max<size_t>(1, derived_chunk_metadata_bytes(T, N, BT)));
        detail::ResolvedChunks r;
        KDA_ASSERT_OK(detail::resolve_chunks(m, BT, ws.get(), ws.bytes(), nullptr, &r));
        KDA_ASSERT_RT(hipDeviceSynchronize());
        const int64_t nt_max = max_num_chunks(T, N, BT);
        EXPECT_EQ(r.grid_chunks, nt_max);
        const std::vector<uint8_t> bytes = ws.download_bytes();
        const auto* offsets = reinterpret_cast<const int32_t*>(bytes.data());
        const int32_t nt = offsets[N + 1];
        const auto* indices = static_cast<const int32_t*>(r.table.chunk_indices.data);
        const size_t indices_at = reinterpret_cast<const char*>(indices) - static_cast<const char*>(ws.get());
        const auto* rows = reinterpret_cast<const int32_t*>(bytes.data() + indices_at);
        ASSERT_EQ(nt, want.num_chunks) << "N=" << N << " BT=" << BT;
        for (int64_t n = 0; n <= N; ++n) ASSERT_EQ(offsets[n], want.chunk_offsets[n]) << "offset " << n;
        for (int64_t g = 0; g < nt; ++g) {
          ASSERT_EQ(rows[2 * g], want.chunk_indices[2 * g]) << "row " << g;
          ASSERT_EQ(rows[2 * g + 1], want.chunk_indices[2 * g + 1]) << "row " << g;
        }
        for (int64_t g = nt; g < nt_max; ++g) ASSERT_EQ(rows[2 * g], -1) << "row past NT " << g;
      }
    }
  }
}

// resolve_chunks clears the status word only when asked (chunk_kda_fwd asks; a stage launcher's caller owns the
// word and may be OR-ing several launches into it), in both metadata modes, and a malformed cu_seqlens found while
// deriving is reported after the clear, not wiped by it.
TEST(DeviceMetadata, StatusWordIsClearedOnlyWhenAsked) {
  ASSERT_TRUE(have_gpu());
  const std::vector<int32_t> good = {0, 100, 164}, bad = {0, 180, 164};  // bad: decreasing
  ChunkMetadata built;
  ASSERT_TRUE(build_chunk_metadata(std::vector<int64_t>{0, 100, 164}, 64, &built).is_ok());
  std::vector<int32_t> indices(built.chunk_indices.begin(), built.chunk_indices.end());
  std::vector<int32_t> offsets(built.chunk_offsets.begin(), built.chunk_offsets.end());
  DeviceBuffer d_indices(indices.size() * sizeof(int32_t)), d_offsets(offsets.size() * sizeof(int32_t));
  d_indices.upload(indices.data(), d_indices.bytes());
  d_offsets.upload(offsets.data(), d_offsets.bytes());
  for (bool with_tables : {false, true}) {
    for (bool clear : {false, true}) {
      for (const auto* cu : {&good, &bad}) {
        DeviceBuffer d_cu(cu->size() * sizeof(int32_t)), d_status(sizeof(uint32_t));
        d_cu.upload(cu->data(), d_cu.bytes());
        const uint32_t stale = 0x80000000u;
        d_status.upload(&stale, sizeof(stale));
        ChunkMetadataArgs m;
        m.cu_seqlens = IndexSpan{d_cu.get(), IndexType::kInt32};
        m.num_sequences = 2;
        m.total_tokens = 164;
        m.device_status = d_status.as<uint32_t>();
        if (with_tables) {
          m.chunk_indices = IndexSpan{d_indices.get(), IndexType::kInt32};
          m.chunk_offsets = IndexSpan{d_offsets.get(), IndexType::kInt32};
          m.num_chunks = built.num_chunks;
        }
        DeviceBuffer ws(std::max<size_t>(1, derived_chunk_metadata_bytes(164, 2, 64)));
        detail::ResolvedChunks r;
        KDA_ASSERT_OK(detail::resolve_chunks(m, 64, ws.get(), ws.bytes(), nullptr, &r, clear));
        uint32_t bits = 0;
        KDA_ASSERT_OK(read_device_status(m.device_status, nullptr, &bits));
        // Only the derivation reads cu_seqlens here; with tables the stages (not launched) would report.
        const uint32_t found = !with_tables && cu == &bad ? uint32_t(detail::kDeviceStatusBadCuSeqlens) : 0u;
        EXPECT_EQ(bits, (clear ? 0u : stale) | found)
            << (with_tables ? "tables" : "derived") << (clear ? " clear" : " keep") << (cu == &bad ? " bad" : " good");
      }
    }
  }
}

// Counts the (chunk, head) a block of the prepare grid takes; chunk ids past grid_chunks (the grid's rounding when
// the chunks span y and z) go to past[0].
__global__ void count_prepare_blocks_kernel(int64_t grid_chunks, int num_heads, unsigned* visits, unsigned* past) {
  if (threadIdx.x != 0) return;  // one count per block
  const int64_t g = detail::block_chunk_id();
  const int h = detail::block_head();
  if (g < 0 || h < 0 || h >= num_heads) {
    atomicAdd(&past[1], 1u);  // never: an id outside the grid
  } else if (g >= grid_chunks) {
    atomicAdd(&past[0], 1u);
  } else {
    atomicAdd(&visits[g * num_heads + h], 1u);
  }
}

// detail::prepare_grid with block_chunk_id / block_head: every (chunk, head) exactly once, also past y's limit of
// 65535 (the chunk ids then span z), and only a rounding's worth of blocks past the chunks.
TEST(DeviceMetadata, PrepareGridTakesEveryChunkAndHeadOnce) {
  ASSERT_TRUE(have_gpu());
  for (const int64_t chunks : {int64_t(1), int64_t(7), int64_t(65535), int64_t(65536), int64_t(131071),
                               int64_t(200003)}) {
    for (const int heads : {1, 3}) {
      const dim3 grid = detail::prepare_grid(chunks, heads);
      ASSERT_EQ(grid.x, unsigned(heads));
      ASSERT_LE(grid.y, 65535u) << chunks;
      ASSERT_GE(int64_t(grid.y) * grid.z, chunks);
      const int64_t n = chunks * heads;
      DeviceBuffer visits(size_t(n) * sizeof(unsigned)), past(2 * sizeof(unsigned));
      KDA_ASSERT_RT(hipMemsetAsync(visits.get(), 0, visits.bytes(), nullptr));
      KDA_ASSERT_RT(hipMemsetAsync(past.get(), 0, past.bytes(), nullptr));
      count_prepare_blocks_kernel<<<grid, 32>>>(chunks, heads, visits.as<unsigned>(), past.as<unsigned>());
      KDA_ASSERT_RT(hipGetLastError());
      KDA_ASSERT_RT(hipDeviceSynchronize());
      std::vector<unsigned> got(static_cast<size_t>(n)), extra(2);
      KDA_ASSERT_RT(hipMemcpy(got.data(), visits.get(), visits.bytes(), hipMemcpyDeviceToHost));
      KDA_ASSERT_RT(hipMemcpy(extra.data(), past.get(), past.bytes(), hipMemcpyDeviceToHost));
      const int64_t wrong = std::count_if(got.begin(), got.end(), [](unsigned c) { return c != 1u; });
      EXPECT_EQ(wrong, 0) << chunks << " chunks x " << heads << " heads: (chunk, head) not visited exactly once";
      EXPECT_EQ(extra[1], 0u);
      EXPECT_EQ(int64_t(extra[0]), (int64_t(grid.y) * grid.z - chunks) * heads);
      EXPECT_LT(int64_t(grid.y) * grid.z - chunks, int64_t(grid.z));  // fewer than one id per z-slice past the end
    }
  }
}

TEST(DeviceMetadata, UploadHelperDeliversBuilderTables) {
  ASSERT_TRUE(have_gpu());
  std::vector<int64_t> cu;
  ASSERT_TRUE(make_decode_prefill_cu_seqlens(8, {200, 77, 513}, &cu).is_ok());
  const int64_t N = int64_t(cu.size()) - 1;
  ChunkMetadata want;
  ASSERT_TRUE(build_chunk_metadata(cu, 64, &want).is_ok());
  for (IndexType it : {IndexType::kInt32, IndexType::kInt64}) {
    const size_t bytes = chunk_metadata_bytes(want.num_chunks, N, it);
    void* staging = nullptr;
    KDA_ASSERT_RT(hipHostMalloc(&staging, bytes));
    DeviceBuffer dev(bytes);
    hipStream_t stream;
    KDA_ASSERT_RT(hipStreamCreate(&stream));
    DeviceChunkMetadata out;
    KDA_ASSERT_OK(upload_chunk_metadata(cu.data(), IndexType::kInt64, N, 64, cu.back(), it, staging, bytes,
                                        dev.get(), bytes, stream, &out));
    KDA_ASSERT_RT(hipStreamSynchronize(stream));
    EXPECT_EQ(out.num_chunks, want.num_chunks);
    EXPECT_EQ(out.max_sequence_tokens, 513) << "the longest sequence, for ChunkMetadataArgs::max_sequence_tokens";
    auto read = [&](IndexSpan s, size_t count) {
      std::vector<int64_t> v(count);
      const std::vector<uint8_t> raw = download_raw(s.data, count * index_type_size(it));
      for (size_t i = 0; i < count; ++i) {
        v[i] = it == IndexType::kInt64 ? reinterpret_cast<const int64_t*>(raw.data())[i]
                                       : reinterpret_cast<const int32_t*>(raw.data())[i];
      }
      return v;
    };
    EXPECT_EQ(read(out.chunk_indices, want.chunk_indices.size()), want.chunk_indices);
    EXPECT_EQ(read(out.chunk_offsets, want.chunk_offsets.size()), want.chunk_offsets);
    (void)hipStreamDestroy(stream);
    (void)hipHostFree(staging);
  }
}

}  // namespace
}  // namespace kda::test
