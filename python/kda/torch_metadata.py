"""Host-built chunk tables on the device: the C builder writes them into pinned memory, one async copy moves them.

Rule: the staging buffer is a pinned uint8 tensor from torch's caching host allocator, and the copy is torch's own
non_blocking copy on the current stream, so torch keeps the staging memory from being reused before the copy has
run (kda_upload_chunk_metadata would enqueue a copy torch does not know about). Each region starts on an 8-byte
boundary so that its typed view is aligned. Nothing synchronises the host. The host data is read when this is
called: under CUDA-graph capture the copy would replay stale tables, so build them outside the graph.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from . import _abi
from .chunk_metadata import build_chunk_metadata_into, count_chunks_and_longest, host_index_array, index_type_code

_TORCH_INDEX_DTYPES = {_abi.INDEX_INT32: torch.int32, _abi.INDEX_INT64: torch.int64}


@dataclass(frozen=True)
class DeviceChunkMetadata:
    """Tables on the device for one batch: chunk_indices [NT, 2] and chunk_offsets [N+1] (pass both to kda),
    NT and the longest sequence known on the host, and cu_seqlens [N+1] on the device when it was uploaded too."""

    chunk_indices: torch.Tensor
    chunk_offsets: torch.Tensor
    num_chunks: int
    max_sequence_tokens: int
    cu_seqlens: torch.Tensor | None = None


def _aligned(nbytes):
    return (nbytes + 7) // 8 * 8


def upload_chunk_metadata(cu_seqlens_cpu, device, *, chunk_size=64, index_dtype=torch.int32,
                          with_cu_seqlens=False) -> DeviceChunkMetadata:
    """Builds the chunk tables of a host cu_seqlens (list, numpy array or CPU tensor) and copies them to `device`
    in one non_blocking copy; with_cu_seqlens also carries cu_seqlens itself (in its own int32/int64 type) in
    the same copy. Raises KdaInvalidArgumentError naming a bad cu_seqlens entry."""
    device = torch.device(device)
    cu = host_index_array(cu_seqlens_cpu, "cu_seqlens_cpu")
    out_type = index_type_code(index_dtype)
    num_chunks, longest = count_chunks_and_longest(cu, chunk_size)
    n = cu.length - 1
    item = 4 if out_type == _abi.INDEX_INT32 else 8
    cu_item = 4 if cu.index_type == _abi.INDEX_INT32 else 8
    offsets_at = _aligned(2 * num_chunks * item)
    cu_at = _aligned(offsets_at + (n + 1) * item)
    total = cu_at + ((n + 1) * cu_item if with_cu_seqlens else 0)

    staging = torch.empty((max(total, 8),), dtype=torch.uint8, pin_memory=True)
    base = staging.data_ptr()
    build_chunk_metadata_into(cu, chunk_size, out_type, base if num_chunks else 0, num_chunks, base + offsets_at)
    if with_cu_seqlens:
        ctypes.memmove(base + cu_at, cu.data_ptr, (n + 1) * cu_item)
    on_device = staging.to(device, non_blocking=True)

    table_dtype = _TORCH_INDEX_DTYPES[out_type]
    chunk_indices = on_device[: 2 * num_chunks * item].view(table_dtype).view(num_chunks, 2)
    chunk_offsets = on_device[offsets_at : offsets_at + (n + 1) * item].view(table_dtype)
    cu_seqlens = None
    if with_cu_seqlens:
        cu_seqlens = on_device[cu_at:total].view(_TORCH_INDEX_DTYPES[cu.index_type])
    return DeviceChunkMetadata(chunk_indices, chunk_offsets, num_chunks, longest, cu_seqlens)
