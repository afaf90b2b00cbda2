"""kda: chunked KDA (Kimi Delta Attention) prefill from Python, through libkda_capi.so and ctypes.

Without torch (importing kda never imports torch):
    kda.build_chunk_metadata(cu_seqlens_cpu)      host chunk tables (list, numpy array or CPU tensor in)
    kda.count_chunks, kda.longest_sequence         the builder's counts
    kda.abi_version()                              the loaded library's C ABI version

The library is libkda_capi.so beside this package, or the file named by KDA_LIBRARY.
"""

from ._abi import PACKAGE_ABI_VERSION
from ._library import LIBRARY_ENV, abi_version, find_library_path
from .chunk_metadata import ChunkMetadata, build_chunk_metadata, count_chunks, longest_sequence
from .errors import KdaError, KdaInvalidArgumentError, KdaLibraryError, KdaUnsupportedError

__all__ = [
    "LIBRARY_ENV",
    "PACKAGE_ABI_VERSION",
    "ChunkMetadata",
    "KdaError",
    "KdaInvalidArgumentError",
    "KdaLibraryError",
    "KdaUnsupportedError",
    "abi_version",
    "build_chunk_metadata",
    "count_chunks",
    "find_library_path",
    "longest_sequence",
]
