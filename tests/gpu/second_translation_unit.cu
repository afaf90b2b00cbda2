// Included into a GPU test binary next to its main test file: proves the header-only library can be included
// from several translation units of one program without duplicate kernel or function definitions at link time.
#include "kda/chunk_kda.hpp"
#include "kda/metadata_upload.hpp"

namespace kda::test {
size_t workspace_size_from_second_translation_unit(const ChunkKdaArgs& args) {
  return chunk_kda_workspace_size(args);
}
}  // namespace kda::test
