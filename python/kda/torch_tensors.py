"""torch tensors -> TensorDescription, and the launch of one kda_chunk_kda_fwd on torch's current stream.

Rules: the library runs on the stream torch is using (torch.cuda.current_stream of q's device) and on q's device
(the C ABI launches on the calling thread's current device, so a call for another device switches to it); its
workspace is a uint8 tensor from torch's caching allocator, which also serves CUDA-graph capture from the graph's
pool. Imports torch: import it only from the torch-facing modules.
"""

import ctypes

import torch

from ._library import library
from .chunk_kda_args import ChunkKdaTensors, make_chunk_kda_args
from .tensor_description import TensorDescription, token_head_strides

WORKSPACE_ALIGNMENT = 256  # kda_chunk_kda_fwd's requirement (what cudaMalloc gives)

_DTYPE_NAMES = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.uint8: "uint8",
    torch.bool: "bool",
}


def dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype) or str(dtype).replace("torch.", "")


def describe(t):
    """The TensorDescription of a torch tensor (None for None)."""
    if t is None:
        return None
    return TensorDescription(t.data_ptr(), tuple(t.shape), tuple(t.stride()), dtype_name(t.dtype), str(t.device))


def readable(t, has_inner_dim=True):
    """An input as a view kda can read: itself when its strides form a token-major view, else a contiguous copy
    (inputs only: an output must already be such a view)."""
    if t is None:
        return None
    if token_head_strides(describe(t), has_inner_dim) is not None:
        return t
    return t.contiguous()


def contiguous_float32(t):
    """A small per-head parameter (A_log, dt_bias) as the C ABI reads it: contiguous fp32. FLA casts the same way."""
    if t is None:
        return None
    return t.to(dtype=torch.float32).contiguous()


def workspace_bytes(args):
    """kda_chunk_kda_workspace_size for a filled struct (a pure host query)."""
    nbytes = ctypes.c_size_t(0)
    library().call("kda_chunk_kda_workspace_size", ctypes.byref(args), ctypes.byref(nbytes))
    return nbytes.value


def run_chunk_kda(args, device, workspace=None):
    """Enqueues kda_chunk_kda_fwd for `args` on torch's current stream of `device`. workspace: a uint8 CUDA tensor
    to reuse (at least the queried size, 256-byte aligned), or None for one from the caching allocator. Returns the
    workspace used (its first 4 bytes hold the device status word once the stream gets there)."""
    nbytes = workspace_bytes(args)
    if workspace is None:
        workspace = torch.empty((max(nbytes, 1),), dtype=torch.uint8, device=device)
    else:
        if workspace.device != device or workspace.dtype != torch.uint8 or not workspace.is_contiguous():
            raise ValueError(f"workspace: must be a contiguous uint8 tensor on {device}")
        if workspace.numel() < nbytes:
            raise ValueError(f"workspace: {workspace.numel()} bytes, this call needs {nbytes}")
        if workspace.data_ptr() % WORKSPACE_ALIGNMENT != 0:
            raise ValueError(f"workspace: address not {WORKSPACE_ALIGNMENT}-byte aligned")
    lib = library()
    if device.index is not None and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            status = _launch(lib, args, workspace, device)
    else:
        status = _launch(lib, args, workspace, device)
    lib.raise_for_status("kda_chunk_kda_fwd", status)
    return workspace


def run_chunk_kda_on_tensors(options, *, q, k, v, g, beta, o, cu_seqlens, A_log=None, dt_bias=None,
                             initial_state=None, final_state=None, state_indices=None, has_initial_state=None,
                             chunk_indices=None, chunk_offsets=None, workspace=None):
    """One kda_chunk_kda_fwd on torch tensors (ChunkKdaTensors' shapes): inputs that are no kda view are copied,
    everything is described and checked, and the call is enqueued on q's device. Returns the workspace used."""
    # The copies are held in these locals until the launch is enqueued: a temporary freed earlier could hand its
    # memory to the workspace that run_chunk_kda allocates.
    q, k, v, g = readable(q), readable(k), readable(v), readable(g)
    beta = readable(beta, has_inner_dim=False)
    tensors = ChunkKdaTensors(
        q=describe(q),
        k=describe(k),
        v=describe(v),
        g=describe(g),
        beta=describe(beta),
        o=describe(o),
        cu_seqlens=describe(cu_seqlens),
        A_log=describe(A_log),
        dt_bias=describe(dt_bias),
        initial_state=describe(initial_state),
        final_state=describe(final_state),
        state_indices=describe(state_indices),
        has_initial_state=describe(has_initial_state),
        chunk_indices=describe(chunk_indices),
        chunk_offsets=describe(chunk_offsets),
    )
    return run_chunk_kda(make_chunk_kda_args(tensors, options), q.device, workspace)


def _launch(lib, args, workspace, device):
    stream = torch.cuda.current_stream(device).cuda_stream
    return lib.kda_chunk_kda_fwd(ctypes.byref(args), workspace.data_ptr() or None, workspace.numel(), stream or None)

