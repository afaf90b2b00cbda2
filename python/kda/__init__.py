"""kda: chunked KDA (Kimi Delta Attention) prefill from Python, through libkda_capi.so and ctypes.

Without torch (importing kda never imports torch):
    kda.build_chunk_metadata(cu_seqlens_cpu)      host chunk tables (list, numpy array or CPU tensor in)
    kda.count_chunks, kda.longest_sequence         the builder's counts
    kda.abi_version()                              the loaded library's C ABI version
    kda.make_chunk_kda_args(tensors, options)      the C struct from framework-free tensor descriptions
    kda.fla_chunk_kda_options(...)                 FLA's chunk_kda flags as kda options

The library is libkda_capi.so beside this package, or the file named by KDA_LIBRARY.
"""

from ._abi import PACKAGE_ABI_VERSION
from ._library import LIBRARY_ENV, abi_version, find_library_path
from .chunk_kda_args import ChunkKdaOptions, ChunkKdaTensors, fill_chunk_kda_args, make_chunk_kda_args
from .chunk_metadata import ChunkMetadata, build_chunk_metadata, count_chunks, longest_sequence
from .errors import KdaError, KdaInvalidArgumentError, KdaLibraryError, KdaUnsupportedError
from .fla_semantics import fla_chunk_kda_options
from .tensor_description import TensorDescription

__all__ = [
    "LIBRARY_ENV",
    "PACKAGE_ABI_VERSION",
    "ChunkKdaOptions",
    "ChunkKdaTensors",
    "ChunkMetadata",
    "KdaError",
    "KdaInvalidArgumentError",
    "KdaLibraryError",
    "KdaUnsupportedError",
    "TensorDescription",
    "abi_version",
    "build_chunk_metadata",
    "count_chunks",
    "fill_chunk_kda_args",
    "find_library_path",
    "fla_chunk_kda_options",
    "longest_sequence",
    "make_chunk_kda_args",
]
