// A host-only consumer of the installed package: builds chunk metadata for a small batch through kda::kda.
#include <kda/chunk_metadata.hpp>

#include <cstdio>

int main() {
  kda::ChunkMetadata meta;
  const kda::Status s = kda::build_chunk_metadata({0, 100, 100, 164}, 64, &meta);
  if (!s.is_ok() || meta.num_chunks != 3) {
    std::printf("unexpected: %s, NT=%lld\n", s.message(), static_cast<long long>(meta.num_chunks));
    return 1;
  }
  std::printf("kda consumer ok: NT=%lld\n", static_cast<long long>(meta.num_chunks));
  return 0;
}
