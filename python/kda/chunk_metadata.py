"""The host chunk-metadata builder (kda_count_chunks, kda_longest_sequence, kda_build_chunk_metadata) for a CPU
cu_seqlens given as a list, a numpy array or a CPU torch tensor.

Rule: the tables are what the C builder computes, never a Python re-implementation, so they always agree with
what the kernels expect:
  chunk_indices [NT, 2]: row g = (n, c), sequence-major, c < ceil(len_n / BT); NT = sum_n ceil(len_n / BT);
  chunk_offsets [N+1]:   0, then the running sum of ceil(len_n / BT), ending at NT.
Results come back as torch CPU tensors for a torch input and as numpy arrays otherwise. Nothing here imports torch:
a torch tensor is recognised only when torch is already loaded.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

from . import _abi
from ._library import library

INDEX_TYPE_NAMES = {"int32": _abi.INDEX_INT32, "int64": _abi.INDEX_INT64}


@dataclass(frozen=True)
class ChunkMetadata:
    """The tables for one batch, on the host. max_sequence_tokens is the longest sequence (the bound
    kda_chunk_kda_args.max_sequence_tokens takes)."""

    chunk_indices: object
    chunk_offsets: object
    num_chunks: int
    max_sequence_tokens: int


@dataclass(frozen=True)
class HostIndexArray:
    """A host integer array the C builder can read: its address, entry count and KDA_INDEX_* type. `owner` keeps
    the memory alive while the address is in use."""

    data_ptr: int
    length: int
    index_type: int
    owner: object


def _torch_tensor_type():
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def is_torch_tensor(value):
    tensor_type = _torch_tensor_type()
    return tensor_type is not None and isinstance(value, tensor_type)


def index_type_code(index_dtype):
    """KDA_INDEX_* for 'int32' / 'int64', numpy's or torch's int32 / int64."""
    if isinstance(index_dtype, str):
        name = index_dtype
    elif isinstance(index_dtype, type):  # numpy's scalar types: np.int32
        name = index_dtype.__name__
    else:  # numpy dtypes and torch dtypes: "int32", "torch.int32"
        name = str(index_dtype).replace("torch.", "")
    if name not in INDEX_TYPE_NAMES:
        raise ValueError(f"index_dtype: {index_dtype} is not supported (int32 or int64)")
    return INDEX_TYPE_NAMES[name]


def host_index_array(cu_seqlens, name="cu_seqlens"):
    """cu_seqlens as a HostIndexArray: int32/int64 used in place when contiguous, other integer types converted."""
    if is_torch_tensor(cu_seqlens):
        t = cu_seqlens
        if t.device.type != "cpu":
            raise ValueError(
                f"{name}: on {t.device}; the host builder needs a CPU tensor (e.g. vLLM's query_start_loc_cpu)"
            )
        if t.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D tensor [N+1], got shape {list(t.shape)}")
        if t.dtype.is_floating_point or t.dtype.is_complex or str(t.dtype) == "torch.bool":
            raise ValueError(f"{name}: dtype {t.dtype} is not an integer type")
        if str(t.dtype) not in ("torch.int32", "torch.int64"):
            t = t.to(dtype=sys.modules["torch"].int64)
        t = t.contiguous()
        index_type = _abi.INDEX_INT32 if str(t.dtype) == "torch.int32" else _abi.INDEX_INT64
        return HostIndexArray(t.data_ptr(), t.numel(), index_type, t)
    if type(cu_seqlens).__module__ == "numpy" or hasattr(cu_seqlens, "__array_interface__"):
        import numpy as np

        a = np.asarray(cu_seqlens)
        if a.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array [N+1], got shape {list(a.shape)}")
        if a.dtype.kind not in "iu":
            raise ValueError(f"{name}: dtype {a.dtype} is not an integer type")
        if a.dtype not in (np.int32, np.int64):
            a = a.astype(np.int64)
        a = np.ascontiguousarray(a)
        index_type = _abi.INDEX_INT32 if a.dtype == np.int32 else _abi.INDEX_INT64
        return HostIndexArray(a.ctypes.data, a.shape[0], index_type, a)
    try:
        values = [int(x) for x in cu_seqlens]
    except TypeError:
        raise ValueError(f"{name}: expected a list, numpy array or CPU torch tensor of integers") from None
    for value in values:
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{name}: {value} does not fit int64")
    array = (ctypes.c_int64 * len(values))(*values)
    return HostIndexArray(ctypes.addressof(array), len(values), _abi.INDEX_INT64, array)


def _entries(cu):
    if cu.length < 1:
        raise ValueError("cu_seqlens: empty; it needs N+1 >= 1 entries (0 first)")
    return cu.length - 1


def _raise_builder_error(lib, function, status, bad_position):
    detail = f"at cu_seqlens[{bad_position.value}]" if bad_position.value >= 0 else ""
    lib.raise_for_status(function, status, detail)


def _total(total_tokens):
    return -1 if total_tokens is None else int(total_tokens)


def _count_chunks(lib, cu, chunk_size, total_tokens):
    nt = ctypes.c_int64(-1)
    bad = ctypes.c_int64(-1)
    status = lib.kda_count_chunks(cu.data_ptr, cu.index_type, _entries(cu), chunk_size, _total(total_tokens),
                                  ctypes.byref(nt), ctypes.byref(bad))
    _raise_builder_error(lib, "kda_count_chunks", status, bad)
    return nt.value


def _longest_sequence(lib, cu, total_tokens):
    longest = ctypes.c_int64(-1)
    bad = ctypes.c_int64(-1)
    status = lib.kda_longest_sequence(cu.data_ptr, cu.index_type, _entries(cu), _total(total_tokens),
                                      ctypes.byref(longest), ctypes.byref(bad))
    _raise_builder_error(lib, "kda_longest_sequence", status, bad)
    return longest.value


def count_chunks(cu_seqlens, chunk_size=64, total_tokens=None):
    """NT = sum_n ceil(len_n / chunk_size), after the C builder's checks of cu_seqlens (and of cu[N] against
    total_tokens when given)."""
    return _count_chunks(library(), host_index_array(cu_seqlens), chunk_size, total_tokens)


def longest_sequence(cu_seqlens, total_tokens=None):
    """The longest sequence's length (0 when all are empty), after the same checks."""
    return _longest_sequence(library(), host_index_array(cu_seqlens), total_tokens)


def count_chunks_and_longest(cu, chunk_size, total_tokens=None):
    """(NT, longest sequence) of a HostIndexArray: what sizes the tables and bounds the sequences."""
    lib = library()
    return _count_chunks(lib, cu, chunk_size, total_tokens), _longest_sequence(lib, cu, total_tokens)


def build_chunk_metadata_into(cu, chunk_size, out_type, chunk_indices_ptr, capacity_rows, chunk_offsets_ptr,
                              total_tokens=None):
    """Fills caller memory (host addresses of out_type entries) from a HostIndexArray; returns NT. For the torch
    layer, which builds straight into pinned memory."""
    lib = library()
    nt = ctypes.c_int64(-1)
    bad = ctypes.c_int64(-1)
    status = lib.kda_build_chunk_metadata(
        cu.data_ptr, cu.index_type, _entries(cu), chunk_size, _total(total_tokens), out_type,
        chunk_indices_ptr or None, capacity_rows, chunk_offsets_ptr, ctypes.byref(nt), ctypes.byref(bad))
    _raise_builder_error(lib, "kda_build_chunk_metadata", status, bad)
    return nt.value


def build_chunk_metadata(cu_seqlens, chunk_size=64, index_dtype="int32", total_tokens=None) -> ChunkMetadata:
    """chunk_indices, chunk_offsets, NT and the longest sequence for a host cu_seqlens (list, numpy array or CPU
    torch tensor), in index_dtype (int32 or int64). Raises KdaInvalidArgumentError (a ValueError) naming the first
    bad cu_seqlens entry."""
    cu = host_index_array(cu_seqlens)
    out_type = index_type_code(index_dtype)
    num_chunks, longest = count_chunks_and_longest(cu, chunk_size, total_tokens)
    n = _entries(cu)
    if is_torch_tensor(cu_seqlens):
        torch = sys.modules["torch"]
        dtype = torch.int32 if out_type == _abi.INDEX_INT32 else torch.int64
        indices = torch.empty((num_chunks, 2), dtype=dtype)
        offsets = torch.empty((n + 1,), dtype=dtype)
        indices_ptr, offsets_ptr = indices.data_ptr(), offsets.data_ptr()
    else:
        import numpy as np

        dtype = np.int32 if out_type == _abi.INDEX_INT32 else np.int64
        indices = np.empty((num_chunks, 2), dtype=dtype)
        offsets = np.empty((n + 1,), dtype=dtype)
        indices_ptr, offsets_ptr = indices.ctypes.data, offsets.ctypes.data
    build_chunk_metadata_into(cu, chunk_size, out_type, indices_ptr if num_chunks else 0, num_chunks, offsets_ptr,
                              total_tokens)
    return ChunkMetadata(indices, offsets, num_chunks, longest)
