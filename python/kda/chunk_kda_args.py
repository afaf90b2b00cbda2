"""Argument translation: tensor descriptions and options -> the C struct kda_chunk_kda_args.

Rule: everything the C struct cannot say, or says differently from a Python caller, is checked here, before the
library is called, with a ValueError that starts with the argument's name: ranks and shapes (the struct has only
sizes, so a wrong shape would be read as another problem), dtypes (the struct has codes only for what kda
computes), devices (the struct has no device), strides (the struct has two per tensor, so the leading dimensions
must flatten into one token axis), and features the C ABI of this package's version lacks (bf16 or strided state
pools). What the library checks well itself (overlaps, o aliasing v, a state_indices without a pool, pool_size
against N, the gate's A_log and lower_bound) is left to it; its messages name the argument too.

No torch here: tests/python/test_chunk_kda_args.py runs it on made-up descriptions.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

from . import _abi
from ._abi import ChunkKdaArgs
from .tensor_description import TensorDescription, token_head_strides

SUPPORTED_HEAD_DIMS = (64, 128, 256)
SUPPORTED_CHUNK_SIZES = (32, 64)

_IO_DTYPE_CODES = {"bfloat16": _abi.DTYPE_BF16, "float16": _abi.DTYPE_FP16}
_SCALAR_DTYPE_CODES = {
    "float32": _abi.SCALAR_FLOAT32,
    "bfloat16": _abi.SCALAR_BFLOAT16,
    "float16": _abi.SCALAR_FLOAT16,
}
_INDEX_DTYPE_CODES = {"int32": _abi.INDEX_INT32, "int64": _abi.INDEX_INT64}
_FLOAT32_MAX = 3.4028234663852886e38


class ChunkKdaOptions(NamedTuple):
    """How kda computes, in the C ABI's terms (fla_semantics.fla_chunk_kda_options maps FLA's flags onto these).

    scale None is K^-0.5 (the library's default); gate, beta_activation and state_layout are _abi codes;
    lower_bound is read with GATE_LOWER_BOUND only; max_sequence_tokens is a host-known bound on every sequence's
    length, 0 = unknown. A NamedTuple rather than a dataclass so that torch.compile traces the engine wrapper,
    which builds one, without a graph break.
    """

    gate: int = _abi.GATE_PRECOMPUTED
    lower_bound: float = -5.0
    beta_activation: int = _abi.BETA_NONE
    qk_l2norm: bool = False
    scale: Optional[float] = None
    state_layout: int = _abi.STATE_K_FIRST
    chunk_size: int = 64
    max_sequence_tokens: int = 0


@dataclass(frozen=True)
class ChunkKdaTensors:
    """The tensors of one call. q, k, g: [..., H, K]; v, o: [..., H, V]; beta: [..., H], where "..." is the same
    leading (token) dimensions for all, e.g. [B, T] or [T]. cu_seqlens: [N+1] on the device. The state pools are
    [P, H, K, V] (K-first) or [P, H, V, K] (V-first) fp32; initial_state and final_state may be the same pool.
    state_indices, has_initial_state: [N]. chunk_indices [NT, 2] and chunk_offsets [N+1]: both or neither."""

    q: TensorDescription
    k: TensorDescription
    v: TensorDescription
    g: TensorDescription
    beta: TensorDescription
    o: TensorDescription
    cu_seqlens: TensorDescription
    A_log: TensorDescription | None = None
    dt_bias: TensorDescription | None = None
    initial_state: TensorDescription | None = None
    final_state: TensorDescription | None = None
    state_indices: TensorDescription | None = None
    has_initial_state: TensorDescription | None = None
    chunk_indices: TensorDescription | None = None
    chunk_offsets: TensorDescription | None = None


def _fail(message):
    raise ValueError(message)


def _shape(shape):
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _check_device(name, desc, device):
    if desc.device != device:
        _fail(f"{name}: on {desc.device}, but q is on {device} (kda takes every tensor on q's device)")


def _check_shape(name, desc, expected, meaning):
    if tuple(desc.shape) != tuple(expected):
        _fail(f"{name}: expected shape {_shape(expected)} ({meaning}), got {_shape(desc.shape)}")


def _check_dtype(name, desc, allowed, what):
    if desc.dtype not in allowed:
        _fail(f"{name}: dtype {desc.dtype} is not supported ({what} must be {' or '.join(allowed)})")


def _check_contiguous(name, desc):
    if not desc.is_contiguous():
        _fail(f"{name}: must be contiguous (strides {_shape(desc.strides)} for shape {_shape(desc.shape)})")


def _view(name, desc, has_inner_dim=True):
    strides = token_head_strides(desc, has_inner_dim)
    if strides is None:
        layout = "[..., H, D] with a contiguous last dimension" if has_inner_dim else "[..., H]"
        _fail(
            f"{name}: strides {_shape(desc.strides)} for shape {_shape(desc.shape)} are no token-major view "
            f"({layout} whose leading dimensions flatten into one token axis, heads and tokens not overlapping)"
        )
    return strides


def _check_head_dim(name, value, axis_name):
    if value not in SUPPORTED_HEAD_DIMS:
        _fail(f"{name}: head dim {axis_name}={value} is not supported (kda takes 64, 128 or 256)")


def _check_state_pool(name, desc, device, heads, head_dim_k, head_dim_v, v_first):
    """A pool the C ABI (version 2) can take: fp32, dense [P, H, K, V] (or [P, H, V, K] V-first)."""
    if desc.dtype != "float32":
        _fail(
            f"{name}: dtype {desc.dtype} is not supported: the C ABI (version {_abi.PACKAGE_ABI_VERSION}) takes "
            f"float32 state pools only (bf16/fp16 pools are issue 55 item 3, not yet in the C ABI)"
        )
    _check_device(name, desc, device)
    inner = (heads, head_dim_v, head_dim_k) if v_first else (heads, head_dim_k, head_dim_v)
    layout = "[P, H, V, K] V-first" if v_first else "[P, H, K, V] K-first"
    if desc.ndim != 4 or tuple(desc.shape[1:]) != inner:
        _fail(f"{name}: expected shape {_shape(('P',) + inner)} ({layout}), got {_shape(desc.shape)}")
    slot_elements = inner[0] * inner[1] * inner[2]
    inner_desc = TensorDescription(desc.data_ptr, desc.shape[1:], desc.strides[1:], desc.dtype, desc.device)
    if inner_desc.is_contiguous() and desc.shape[0] > 1 and desc.strides[0] != slot_elements:
        _fail(
            f"{name}: slot stride {desc.strides[0]} is not H*K*V={slot_elements}: strided state pools are not "
            f"supported by the C ABI (version {_abi.PACKAGE_ABI_VERSION}; issue 55 item 3)"
        )
    _check_contiguous(name, desc)


def _check_index_vector(name, desc, device, length, allowed=("int32", "int64")):
    _check_device(name, desc, device)
    _check_dtype(name, desc, allowed, name)
    _check_shape(name, desc, (length,), "one entry per sequence" if name != "cu_seqlens" else "N+1")
    _check_contiguous(name, desc)


def _scale_value(scale):
    """The float the struct carries: 0 asks the library for K^-0.5."""
    if scale is None:
        return 0.0
    scale = float(scale)
    if not math.isfinite(scale) or abs(scale) > _FLOAT32_MAX:
        _fail(f"scale: {scale} is not a finite float32")
    if scale == 0.0:
        _fail("scale: 0 cannot be passed (the C ABI reads scale 0 as 'use K^-0.5'); use None for K^-0.5")
    return scale


def fill_chunk_kda_args(args: ChunkKdaArgs, tensors: ChunkKdaTensors, options: ChunkKdaOptions):
    """Checks the call by the module's rule and writes it into `args`, a struct already set to the library's
    defaults by kda_chunk_kda_args_init. Raises ValueError naming the argument."""
    t = tensors
    q = t.q
    if q.ndim < 3:
        _fail(f"q: expected [..., T, H, K] (e.g. [B, T, H, K]), got shape {_shape(q.shape)}")
    device = q.device
    if device == "cpu" or device.startswith("cpu"):
        _fail("q: on cpu; kda runs on a GPU (move the tensors to the device)")
    lead = tuple(q.shape[:-2])
    heads, head_dim_k = q.shape[-2], q.shape[-1]
    total_tokens = 1
    for size in lead:
        total_tokens *= size

    _check_dtype("q", q, tuple(_IO_DTYPE_CODES), "q, k, v and o")
    _check_head_dim("q", head_dim_k, "K")
    for name in ("k", "v", "g", "beta", "o"):
        _check_device(name, getattr(t, name), device)
    _check_shape("k", t.k, q.shape, "like q")
    if t.v.ndim != q.ndim or tuple(t.v.shape[:-2]) != lead:
        _fail(f"v: expected shape {_shape(lead + ('H', 'V'))} (q's leading dimensions), got {_shape(t.v.shape)}")
    if t.v.shape[-2] != heads:
        _fail(
            f"v: {t.v.shape[-2]} value heads for {heads} query/key heads: grouped value heads (HV != H) are not "
            f"supported by kda"
        )
    head_dim_v = t.v.shape[-1]
    _check_head_dim("v", head_dim_v, "V")
    _check_shape("g", t.g, lead + (heads, head_dim_k), "[..., H, K] like q")
    _check_shape("beta", t.beta, lead + (heads,), "[..., H]")
    _check_shape("o", t.o, lead + (heads, head_dim_v), "[..., H, V] like v")
    for name in ("k", "v", "o"):
        desc = getattr(t, name)
        if desc.dtype != q.dtype:
            _fail(f"{name}: dtype {desc.dtype} differs from q's {q.dtype} (q, k, v and o share one dtype)")
    _check_dtype("g", t.g, tuple(_SCALAR_DTYPE_CODES), "g")
    _check_dtype("beta", t.beta, tuple(_SCALAR_DTYPE_CODES), "beta")

    if t.cu_seqlens.ndim != 1 or t.cu_seqlens.shape[0] < 1:
        _fail(f"cu_seqlens: expected shape [N+1] with N >= 0, got {_shape(t.cu_seqlens.shape)}")
    num_sequences = t.cu_seqlens.shape[0] - 1
    _check_index_vector("cu_seqlens", t.cu_seqlens, device, num_sequences + 1)

    if options.chunk_size not in SUPPORTED_CHUNK_SIZES:
        _fail(f"chunk_size: {options.chunk_size} is not supported (kda takes 32 or 64)")
    if options.max_sequence_tokens < 0:
        _fail(f"max_sequence_tokens: {options.max_sequence_tokens} is negative (0 = unknown)")
    scale = _scale_value(options.scale)

    if t.A_log is not None:
        _check_device("A_log", t.A_log, device)
        _check_dtype("A_log", t.A_log, ("float32",), "A_log")
        if t.A_log.numel != heads:
            _fail(f"A_log: {t.A_log.numel} elements, expected H={heads} (one per head)")
        _check_contiguous("A_log", t.A_log)
    if t.dt_bias is not None:
        _check_device("dt_bias", t.dt_bias, device)
        _check_dtype("dt_bias", t.dt_bias, ("float32",), "dt_bias")
        if t.dt_bias.numel != heads * head_dim_k:
            _fail(f"dt_bias: {t.dt_bias.numel} elements, expected H*K={heads * head_dim_k}")
        _check_contiguous("dt_bias", t.dt_bias)

    v_first = options.state_layout == _abi.STATE_V_FIRST
    pool_size = -1
    for name in ("initial_state", "final_state"):
        pool = getattr(t, name)
        if pool is not None:
            _check_state_pool(name, pool, device, heads, head_dim_k, head_dim_v, v_first)
            pool_size = pool.shape[0]
    if t.initial_state is not None and t.final_state is not None and t.initial_state.shape != t.final_state.shape:
        _fail(
            f"final_state: shape {_shape(t.final_state.shape)} differs from initial_state's "
            f"{_shape(t.initial_state.shape)} (the C ABI has one pool size for both)"
        )
    if t.state_indices is not None:
        _check_index_vector("state_indices", t.state_indices, device, num_sequences)
    if t.has_initial_state is not None:
        _check_index_vector("has_initial_state", t.has_initial_state, device, num_sequences, ("bool", "uint8"))

    num_chunks = -1
    table_type = _abi.INDEX_INT32
    if (t.chunk_indices is None) != (t.chunk_offsets is None):
        missing = "chunk_offsets" if t.chunk_offsets is None else "chunk_indices"
        _fail(f"{missing}: required too (pass chunk_indices and chunk_offsets together, or neither)")
    if t.chunk_indices is not None:
        ci, co = t.chunk_indices, t.chunk_offsets
        _check_device("chunk_indices", ci, device)
        _check_dtype("chunk_indices", ci, tuple(_INDEX_DTYPE_CODES), "chunk_indices")
        if ci.ndim != 2 or ci.shape[1] != 2:
            _fail(f"chunk_indices: expected shape [NT, 2], got {_shape(ci.shape)}")
        _check_contiguous("chunk_indices", ci)
        _check_index_vector("chunk_offsets", co, device, num_sequences + 1)
        if co.dtype != ci.dtype:
            _fail(f"chunk_offsets: dtype {co.dtype} differs from chunk_indices' {ci.dtype} (one table type)")
        num_chunks = ci.shape[0]
        table_type = _INDEX_DTYPE_CODES[ci.dtype]

    q_view = _view("q", q)
    k_view = _view("k", t.k)
    v_view = _view("v", t.v)
    g_view = _view("g", t.g)
    beta_view = _view("beta", t.beta, has_inner_dim=False)
    o_view = _view("o", t.o)

    a = args
    a.num_sequences = num_sequences
    a.total_tokens = total_tokens
    a.num_heads = heads
    a.head_dim_k = head_dim_k
    a.head_dim_v = head_dim_v
    a.chunk_size = options.chunk_size
    a.dtype = _IO_DTYPE_CODES[q.dtype]
    a.cu_seqlens_type = _INDEX_DTYPE_CODES[t.cu_seqlens.dtype]
    a.cu_seqlens = t.cu_seqlens.data_ptr or None
    a.chunk_indices = _pointer(t.chunk_indices)
    a.chunk_offsets = _pointer(t.chunk_offsets)
    a.num_chunks = num_chunks
    a.chunk_table_type = table_type
    a.g_type = _SCALAR_DTYPE_CODES[t.g.dtype]
    a.beta_type = _SCALAR_DTYPE_CODES[t.beta.dtype]
    a.gate = options.gate
    a.beta_activation = options.beta_activation
    a.qk_l2norm = 1 if options.qk_l2norm else 0
    a.lower_bound = options.lower_bound
    a.scale = scale
    _set_view(a.q, q.data_ptr, q_view)
    _set_view(a.k, t.k.data_ptr, k_view)
    _set_view(a.v, t.v.data_ptr, v_view)
    _set_view(a.g, t.g.data_ptr, g_view)
    _set_view(a.beta, t.beta.data_ptr, beta_view)
    _set_view(a.o, t.o.data_ptr, o_view)
    a.A_log = _pointer(t.A_log)
    a.dt_bias = _pointer(t.dt_bias)
    a.initial_state = _pointer(t.initial_state)
    a.final_state = _pointer(t.final_state)
    a.state_indices = _pointer(t.state_indices)
    a.has_initial_state = _pointer(t.has_initial_state)
    a.pool_size = pool_size
    a.state_layout = options.state_layout
    a.state_indices_type = _INDEX_DTYPE_CODES[t.state_indices.dtype] if t.state_indices is not None else 0
    a.max_sequence_tokens = options.max_sequence_tokens
    return a


def _set_view(view, data_ptr, strides):
    view.data = data_ptr or None
    view.token_stride, view.head_stride = strides


def _pointer(desc):
    """A device address for the struct: None (NULL) for an absent tensor. An empty tensor's address may be 0,
    which the library reads as 'absent' too; it allows that only where nothing is read (T = 0)."""
    if desc is None or desc.data_ptr == 0:
        return None
    return desc.data_ptr


_default_args_bytes = None


def default_chunk_kda_args():
    """A fresh struct at the library's documented defaults: kda_chunk_kda_args_init runs once per process, and
    later structs are copies of its result (a copy costs less than a ctypes call)."""
    global _default_args_bytes
    if _default_args_bytes is None:
        from ._library import library

        args = ChunkKdaArgs()
        library().call("kda_chunk_kda_args_init", ctypes.byref(args), ctypes.sizeof(args))
        _default_args_bytes = bytes(args)
    return ChunkKdaArgs.from_buffer_copy(_default_args_bytes)


def make_chunk_kda_args(tensors: ChunkKdaTensors, options: ChunkKdaOptions):
    """The struct for one call: the library's defaults, then fill_chunk_kda_args."""
    return fill_chunk_kda_args(default_chunk_kda_args(), tensors, options)
