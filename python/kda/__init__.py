"""kda: chunked KDA (Kimi Delta Attention) prefill from Python, through libkda_capi.so and ctypes.

Without torch (importing kda never imports torch):
    kda.build_chunk_metadata(cu_seqlens_cpu)      host chunk tables (list, numpy array or CPU tensor in)
    kda.count_chunks, kda.longest_sequence         the builder's counts
    kda.abi_version()                              the loaded library's C ABI version
    kda.make_chunk_kda_args(tensors, options)      the C struct from framework-free tensor descriptions
    kda.fla_chunk_kda_options(...)                 FLA's chunk_kda flags as kda options
With torch (its modules load on first use of these names):
    kda.chunk_kda(q, k, v, g, beta, ...)           FLA's chunk_kda forward: returns (o, final_state)
    kda.chunk_kda_with_state_pool(...)             the engine form: out= and an in-place state pool, a torch
                                                   custom op (torch.ops.kda.chunk_kda_with_state_pool)
    kda.upload_chunk_metadata(cu_seqlens_cpu, device)   host-built tables on the device, one async copy

The library is libkda_capi.so beside this package, or the file named by KDA_LIBRARY.
"""

from importlib import import_module

from ._abi import PACKAGE_ABI_VERSION
from ._library import LIBRARY_ENV, abi_version, find_library_path
from .chunk_kda_args import ChunkKdaOptions, ChunkKdaTensors, fill_chunk_kda_args, make_chunk_kda_args
from .chunk_metadata import ChunkMetadata, build_chunk_metadata, count_chunks, longest_sequence
from .errors import KdaError, KdaInvalidArgumentError, KdaLibraryError, KdaUnsupportedError
from .fla_semantics import fla_chunk_kda_options
from .tensor_description import TensorDescription

# Public names that need torch, and the module that defines each: imported on first access (PEP 562), so that
# `import kda` never imports torch.
_TORCH_NAMES = {
    "chunk_kda": ".torch_chunk_kda",
    "chunk_kda_with_state_pool": ".torch_engine",
    "upload_chunk_metadata": ".torch_metadata",
    "DeviceChunkMetadata": ".torch_metadata",
}


def __getattr__(name):
    module = _TORCH_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'kda' has no attribute '{name}'")
    try:
        value = getattr(import_module(module, __name__), name)
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise ImportError(f"kda.{name} needs PyTorch, which is not installed") from e
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_TORCH_NAMES))


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
] + sorted(_TORCH_NAMES)
