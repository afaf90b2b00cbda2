"""Argument translation without torch or a GPU: made-up tensor descriptions -> kda_chunk_kda_args.

A translated struct is also handed to the real library: kda_chunk_kda_fwd with no workspace runs every host check
and, when they all pass, stops at "workspace too small" before anything reaches the GPU (the addresses here are
never dereferenced). A final check asserts the CUDA driver was never loaded into this process.
"""

import ctypes
import sys

import pytest

from kda import _abi
from kda._library import library
from kda.chunk_kda_args import ChunkKdaOptions, ChunkKdaTensors, make_chunk_kda_args
from kda.errors import KdaInvalidArgumentError
from kda.tensor_description import TensorDescription, token_head_strides

H, K, V = 4, 128, 64
T = 229
N = 3  # cu_seqlens = [0, 100, 100, 229] on the "device"
DEVICE = "cuda:0"
BASE = 1 << 40
SLOT = 1 << 30  # each fake tensor gets its own gigabyte of address space: no accidental overlap


def dense_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def fake(slot, shape, dtype="bfloat16", strides=None, device=DEVICE, offset=0):
    shape = tuple(shape)
    return TensorDescription(BASE + slot * SLOT + offset, shape, strides or dense_strides(shape), dtype, device)


def tensors(**changes):
    """A valid varlen call: [1, T, H, *] inputs, bf16, fp32 g and beta, a K-first pool of 8 slots with indices."""
    fields = dict(
        q=fake(1, (1, T, H, K)),
        k=fake(2, (1, T, H, K)),
        v=fake(3, (1, T, H, V)),
        g=fake(4, (1, T, H, K), "float32"),
        beta=fake(5, (1, T, H), "float32"),
        o=fake(6, (1, T, H, V)),
        cu_seqlens=fake(7, (N + 1,), "int32"),
        A_log=fake(8, (H,), "float32"),
        dt_bias=fake(9, (H * K,), "float32"),
        initial_state=fake(10, (8, H, K, V), "float32"),
        final_state=fake(10, (8, H, K, V), "float32"),
        state_indices=fake(11, (N,), "int32"),
        has_initial_state=fake(12, (N,), "bool"),
    )
    fields.update(changes)
    return ChunkKdaTensors(**fields)


SOFTPLUS = ChunkKdaOptions(gate=_abi.GATE_SOFTPLUS, beta_activation=_abi.BETA_SIGMOID, qk_l2norm=True)


def library_verdict(args):
    """(status, message) of kda_chunk_kda_fwd with no workspace: WORKSPACE_TOO_SMALL means every check passed."""
    lib = library()
    status = lib.kda_chunk_kda_fwd(ctypes.byref(args), None, 0, None)
    return status, lib.last_error_message() if status != _abi.STATUS_WORKSPACE_TOO_SMALL else "all checks passed"


def assert_library_accepts(args):
    status, message = library_verdict(args)
    assert status == _abi.STATUS_WORKSPACE_TOO_SMALL, message
    size = ctypes.c_size_t(0)
    library().call("kda_chunk_kda_workspace_size", ctypes.byref(args), ctypes.byref(size))
    assert size.value > 0


@pytest.fixture(scope="module", autouse=True)
def never_loads_the_cuda_driver():
    yield
    if "torch" in sys.modules:
        return  # torch may load it itself; the ctest host entry runs without torch
    with open("/proc/self/maps") as maps:
        assert "/libcuda.so" not in maps.read(), "a host-side call reached the CUDA driver"


# ---- A valid call, field by field ----------------------------------------------------------------------------------


def test_valid_call_fills_every_field():
    t = tensors()
    a = make_chunk_kda_args(t, SOFTPLUS)
    assert a.struct_size == ctypes.sizeof(_abi.ChunkKdaArgs)
    assert (a.num_sequences, a.total_tokens, a.num_heads, a.head_dim_k, a.head_dim_v, a.chunk_size) == (
        N, T, H, K, V, 64)
    assert a.dtype == _abi.DTYPE_BF16 and a.cu_seqlens_type == _abi.INDEX_INT32
    assert a.cu_seqlens == t.cu_seqlens.data_ptr
    assert a.chunk_indices is None and a.chunk_offsets is None and a.num_chunks == -1
    assert (a.g_type, a.beta_type) == (_abi.SCALAR_FLOAT32, _abi.SCALAR_FLOAT32)
    assert (a.gate, a.beta_activation, a.qk_l2norm) == (_abi.GATE_SOFTPLUS, _abi.BETA_SIGMOID, 1)
    assert a.scale == 0.0  # the library's K^-0.5
    for name, dim in (("q", K), ("k", K), ("v", V), ("g", K), ("o", V)):
        view = getattr(a, name)
        assert view.data == getattr(t, name).data_ptr, name
        assert (view.token_stride, view.head_stride) == (H * dim, dim), name
    assert (a.beta.data, a.beta.token_stride, a.beta.head_stride) == (t.beta.data_ptr, H, 1)
    assert a.A_log == t.A_log.data_ptr and a.dt_bias == t.dt_bias.data_ptr
    assert a.initial_state == a.final_state == t.initial_state.data_ptr
    assert a.state_indices == t.state_indices.data_ptr and a.has_initial_state == t.has_initial_state.data_ptr
    assert (a.pool_size, a.state_layout, a.state_indices_type) == (8, _abi.STATE_K_FIRST, _abi.INDEX_INT32)
    assert a.max_sequence_tokens == 0
    assert_library_accepts(a)


def test_codes_for_other_dtypes_and_options():
    t = tensors(
        q=fake(1, (1, T, H, K), "float16"), k=fake(2, (1, T, H, K), "float16"), v=fake(3, (1, T, H, V), "float16"),
        o=fake(6, (1, T, H, V), "float16"), g=fake(4, (1, T, H, K), "bfloat16"), beta=fake(5, (1, T, H), "float16"),
        cu_seqlens=fake(7, (N + 1,), "int64"), state_indices=fake(11, (N,), "int64"),
        initial_state=fake(10, (8, H, V, K), "float32"), final_state=None,
    )
    options = ChunkKdaOptions(gate=_abi.GATE_LOWER_BOUND, lower_bound=-2.5, beta_activation=_abi.BETA_SIGMOID_TIMES_TWO,
                              qk_l2norm=False, scale=0.1, state_layout=_abi.STATE_V_FIRST, chunk_size=32,
                              max_sequence_tokens=129)
    a = make_chunk_kda_args(t, options)
    assert a.dtype == _abi.DTYPE_FP16 and a.cu_seqlens_type == _abi.INDEX_INT64
    assert (a.g_type, a.beta_type) == (_abi.SCALAR_BFLOAT16, _abi.SCALAR_FLOAT16)
    assert (a.gate, a.lower_bound, a.beta_activation, a.qk_l2norm) == (
        _abi.GATE_LOWER_BOUND, -2.5, _abi.BETA_SIGMOID_TIMES_TWO, 0)
    assert a.scale == pytest.approx(0.1)
    assert (a.state_layout, a.state_indices_type, a.chunk_size, a.max_sequence_tokens) == (
        _abi.STATE_V_FIRST, _abi.INDEX_INT64, 32, 129)
    assert a.final_state is None and a.pool_size == 8
    assert_library_accepts(a)


def test_batch_of_equal_sequences_flattens_into_tokens():
    B, L = 3, 77
    t = tensors(
        q=fake(1, (B, L, H, K)), k=fake(2, (B, L, H, K)), v=fake(3, (B, L, H, V)), g=fake(4, (B, L, H, K), "float32"),
        beta=fake(5, (B, L, H), "float32"), o=fake(6, (B, L, H, V)),
    )
    a = make_chunk_kda_args(t, SOFTPLUS)
    assert a.total_tokens == B * L and a.q.token_stride == H * K and a.beta.token_stride == H


def test_three_dimensional_token_major_inputs():
    t = tensors(q=fake(1, (T, H, K)), k=fake(2, (T, H, K)), v=fake(3, (T, H, V)), g=fake(4, (T, H, K), "float32"),
                beta=fake(5, (T, H), "float32"), o=fake(6, (T, H, V)))
    a = make_chunk_kda_args(t, SOFTPLUS)
    assert a.total_tokens == T
    assert_library_accepts(a)


def test_views_into_a_fused_projection_keep_their_strides():
    # q, k and v side by side in one [T, 2*H*K + H*V] buffer, as an engine's fused projection gives them.
    row = 2 * H * K + H * V
    strides_qk = (T * row, row, K, 1)
    strides_v = (T * row, row, V, 1)
    q = fake(1, (1, T, H, K), strides=strides_qk)
    k = fake(1, (1, T, H, K), strides=strides_qk, offset=2 * H * K)
    v = fake(1, (1, T, H, V), strides=strides_v, offset=2 * 2 * H * K)
    a = make_chunk_kda_args(tensors(q=q, k=k, v=v), SOFTPLUS)
    assert (a.q.token_stride, a.q.head_stride) == (row, K)
    assert (a.k.data - a.q.data) == 2 * H * K
    assert (a.v.token_stride, a.v.head_stride) == (row, V)
    assert_library_accepts(a)


def test_head_major_views_are_accepted():
    # [T, H, K] seen through a [H, T, K] buffer: token stride K, head stride T*K.
    q = fake(1, (1, T, H, K), strides=(T * H * K, K, T * K, 1))
    a = make_chunk_kda_args(tensors(q=q), SOFTPLUS)
    assert (a.q.token_stride, a.q.head_stride) == (K, T * K)
    assert_library_accepts(a)


def test_o_may_be_v_itself():
    t = tensors()
    a = make_chunk_kda_args(tensors(o=t.v), SOFTPLUS)
    assert a.o.data == a.v.data
    assert_library_accepts(a)


def test_chunk_tables_set_num_chunks_and_their_type():
    t = tensors(chunk_indices=fake(13, (5, 2), "int64"), chunk_offsets=fake(14, (N + 1,), "int64"))
    a = make_chunk_kda_args(t, SOFTPLUS)
    assert (a.chunk_indices, a.chunk_offsets) == (t.chunk_indices.data_ptr, t.chunk_offsets.data_ptr)
    assert (a.num_chunks, a.chunk_table_type) == (5, _abi.INDEX_INT64)
    assert_library_accepts(a)


def test_no_pool_means_pool_size_minus_one():
    a = make_chunk_kda_args(tensors(initial_state=None, final_state=None, state_indices=None,
                                    has_initial_state=None), SOFTPLUS)
    assert a.initial_state is None and a.final_state is None and a.pool_size == -1
    assert_library_accepts(a)


def test_empty_batch_with_null_addresses():
    empty = dict(
        q=TensorDescription(0, (1, 0, H, K), (0, H * K, K, 1), "bfloat16", DEVICE),
        k=TensorDescription(0, (1, 0, H, K), (0, H * K, K, 1), "bfloat16", DEVICE),
        v=TensorDescription(0, (1, 0, H, V), (0, H * V, V, 1), "bfloat16", DEVICE),
        g=TensorDescription(0, (1, 0, H, K), (0, H * K, K, 1), "float32", DEVICE),
        beta=TensorDescription(0, (1, 0, H), (0, H, 1), "float32", DEVICE),
        o=TensorDescription(0, (1, 0, H, V), (0, H * V, V, 1), "bfloat16", DEVICE),
        cu_seqlens=fake(7, (1,), "int32"),
        state_indices=None, has_initial_state=None,
    )
    a = make_chunk_kda_args(tensors(**empty), SOFTPLUS)
    assert a.total_tokens == 0 and a.num_sequences == 0 and a.q.data is None
    status, message = library_verdict(a)
    assert status in (_abi.STATUS_OK, _abi.STATUS_WORKSPACE_TOO_SMALL), message


# ---- What the package refuses, by name -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(q=fake(1, (T, K))), r"^q: expected \[\.\.\., T, H, K\]"),
        (dict(q=fake(1, (1, T, H, K), device="cpu")), r"^q: on cpu"),
        (dict(q=fake(1, (1, T, H, K), "float32")), r"^q: dtype float32 is not supported \(q, k, v and o must be "
                                                    r"bfloat16 or float16\)"),
        (dict(q=fake(1, (1, T, H, 60)), k=fake(2, (1, T, H, 60)), g=fake(4, (1, T, H, 60), "float32")),
         r"^q: head dim K=60 is not supported \(kda takes 64, 128 or 256\)"),
        (dict(v=fake(3, (1, T, H, 96)), o=fake(6, (1, T, H, 96))), r"^v: head dim V=96 is not supported"),
        (dict(v=fake(3, (1, T, 2 * H, V)), o=fake(6, (1, T, 2 * H, V))),
         r"^v: 8 value heads for 4 query/key heads: grouped value heads \(HV != H\) are not supported"),
        (dict(k=fake(2, (1, T, H, K), device="cuda:1")), r"^k: on cuda:1, but q is on cuda:0"),
        (dict(k=fake(2, (1, T - 1, H, K))), r"^k: expected shape \[1, 229, 4, 128\] \(like q\)"),
        (dict(k=fake(2, (1, T, H, K), "float16")), r"^k: dtype float16 differs from q's bfloat16"),
        (dict(v=fake(3, (2, T, H, V))), r"^v: expected shape"),
        (dict(g=fake(4, (1, T, H, K), "float64")), r"^g: dtype float64 is not supported"),
        (dict(g=fake(4, (1, T, H, 1), "float32")), r"^g: expected shape \[1, 229, 4, 128\]"),
        (dict(beta=fake(5, (1, T, H, 1), "float32")), r"^beta: expected shape \[1, 229, 4\]"),
        (dict(beta=fake(5, (1, T, H), "int32")), r"^beta: dtype int32 is not supported"),
        (dict(o=fake(6, (1, T, H, V), "float16")), r"^o: dtype float16 differs from q's bfloat16"),
        (dict(o=fake(6, (1, T, H, K))), r"^o: expected shape \[1, 229, 4, 64\]"),
        (dict(cu_seqlens=fake(7, (N + 1,), "float32")), r"^cu_seqlens: dtype float32 is not supported"),
        (dict(cu_seqlens=fake(7, (N + 1, 1), "int32")), r"^cu_seqlens: expected shape \[N\+1\]"),
        (dict(cu_seqlens=fake(7, (N + 1,), "int32", strides=(2,))), r"^cu_seqlens: must be contiguous"),
        (dict(cu_seqlens=fake(7, (N + 1,), "int32", device="cpu")), r"^cu_seqlens: on cpu, but q is on cuda:0"),
        (dict(A_log=fake(8, (H + 1,), "float32")), r"^A_log: 5 elements, expected H=4"),
        (dict(A_log=fake(8, (H,), "bfloat16")), r"^A_log: dtype bfloat16 is not supported"),
        (dict(dt_bias=fake(9, (K,), "float32")), r"^dt_bias: 128 elements, expected H\*K=512"),
        (dict(initial_state=fake(10, (8, H, K, V), "bfloat16")),
         r"^initial_state: dtype bfloat16 is not supported: the C ABI \(version 2\) takes float32 state pools only"),
        (dict(final_state=fake(10, (8, H, K, V), "float16")), r"^final_state: dtype float16 is not supported"),
        (dict(initial_state=fake(10, (8, H, V, K), "float32")), r"^initial_state: expected shape \[P, 4, 128, 64\] "
                                                                 r"\(\[P, H, K, V\] K-first\)"),
        (dict(initial_state=fake(10, (8, H, K, V), "float32", strides=(2 * H * K * V, K * V, V, 1))),
         r"^initial_state: slot stride 65536 is not H\*K\*V=32768: strided state pools are not supported"),
        (dict(initial_state=fake(10, (8, H, K, V), "float32", strides=(H * K * V, K * V, 1, K))),
         r"^initial_state: must be contiguous"),
        (dict(final_state=fake(15, (9, H, K, V), "float32")), r"^final_state: shape \[9, 4, 128, 64\] differs from "
                                                               r"initial_state's"),
        (dict(state_indices=fake(11, (N + 1,), "int32")), r"^state_indices: expected shape \[3\]"),
        (dict(state_indices=fake(11, (N,), "uint8")), r"^state_indices: dtype uint8 is not supported"),
        (dict(has_initial_state=fake(12, (N,), "int32")), r"^has_initial_state: dtype int32 is not supported"),
        (dict(chunk_indices=fake(13, (5, 2), "int32")), r"^chunk_offsets: required too"),
        (dict(chunk_offsets=fake(14, (N + 1,), "int32")), r"^chunk_indices: required too"),
        (dict(chunk_indices=fake(13, (5, 3), "int32"), chunk_offsets=fake(14, (N + 1,), "int32")),
         r"^chunk_indices: expected shape \[NT, 2\]"),
        (dict(chunk_indices=fake(13, (5, 2), "int32"), chunk_offsets=fake(14, (N + 1,), "int64")),
         r"^chunk_offsets: dtype int64 differs from chunk_indices' int32"),
        (dict(q=fake(1, (1, T, H, K), strides=(T * H * K, H * K, 1, H))),
         r"^q: strides \[117248, 512, 1, 4\] for shape \[1, 229, 4, 128\] are no token-major view"),
        (dict(o=fake(6, (1, T, H, V), strides=(T * H * V, H * V, 0, 1))), r"^o: strides .* are no token-major view"),
    ],
)
def test_refused_with_the_argument_named(changes, message):
    with pytest.raises(ValueError, match=message):
        make_chunk_kda_args(tensors(**changes), SOFTPLUS)


def test_a_batch_slice_that_does_not_flatten_is_refused():
    # Rows 0 and 2 of a [4, T, H, K] buffer: batch stride 2*T*H*K is not T times the token stride.
    B = 2
    batch = dict(k=fake(2, (B, T, H, K)), v=fake(3, (B, T, H, V)), g=fake(4, (B, T, H, K), "float32"),
                 beta=fake(5, (B, T, H), "float32"), o=fake(6, (B, T, H, V)))
    make_chunk_kda_args(tensors(q=fake(1, (B, T, H, K)), **batch), SOFTPLUS)  # the dense batch passes
    q = fake(1, (B, T, H, K), strides=(2 * T * H * K, H * K, K, 1))
    with pytest.raises(ValueError, match=r"^q: strides .* are no token-major view"):
        make_chunk_kda_args(tensors(q=q, **batch), SOFTPLUS)


@pytest.mark.parametrize(
    "options, message",
    [
        (ChunkKdaOptions(scale=0.0), r"^scale: 0 cannot be passed"),
        (ChunkKdaOptions(scale=float("inf")), r"^scale: inf is not a finite float32"),
        (ChunkKdaOptions(scale=1e39), r"^scale: 1e\+39 is not a finite float32"),
        (ChunkKdaOptions(chunk_size=16), r"^chunk_size: 16 is not supported \(kda takes 32 or 64\)"),
        (ChunkKdaOptions(max_sequence_tokens=-1), r"^max_sequence_tokens: -1 is negative"),
    ],
)
def test_refused_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        make_chunk_kda_args(tensors(), options)


# ---- What the library refuses, with its own message ----------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, options, message",
    [
        (dict(A_log=None), SOFTPLUS, "A_log: required by the softplus gate"),
        (dict(initial_state=None, final_state=None), SOFTPLUS,
         "state_indices: given without an initial_state or final_state pool"),
        (dict(state_indices=None, initial_state=fake(10, (2, H, K, V), "float32"),
              final_state=fake(10, (2, H, K, V), "float32")), SOFTPLUS, "pool_size: smaller than num_sequences"),
        (dict(o=fake(1, (1, T, H, V))), SOFTPLUS, "o:"),  # o on top of q
        (dict(), ChunkKdaOptions(gate=_abi.GATE_LOWER_BOUND, lower_bound=-7.0), "lower_bound: must be in [-5, 0)"),
    ],
)
def test_library_checks_reach_the_caller_with_their_messages(changes, options, message):
    a = make_chunk_kda_args(tensors(**changes), options)
    status, text = library_verdict(a)
    assert status == _abi.STATUS_INVALID_ARGUMENT and message in text
    with pytest.raises(KdaInvalidArgumentError, match="kda_chunk_kda_fwd: invalid argument: " + message.split("[")[0]):
        library().raise_for_status("kda_chunk_kda_fwd", status)


# ---- The layout rule on its own ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, strides, expected",
    [
        ((5, 3, 8), (24, 8, 1), (24, 8)),            # dense
        ((2, 5, 3, 8), (120, 24, 8, 1), (24, 8)),    # batch flattens
        ((1, 5, 3, 8), (999, 24, 8, 1), (24, 8)),    # a batch of 1 may have any stride
        ((5, 1, 8), (40, 3, 1), (40, 8)),            # one head: its stride does not matter
        ((1, 3, 8), (7, 8, 1), (24, 8)),             # one token: its stride does not matter
        ((5, 3, 8), (8, 40, 1), (8, 40)),            # head-major
        ((5, 3, 8), (24, 8, 2), None),               # innermost not contiguous
        ((5, 3, 8), (16, 8, 1), None),               # tokens overlap heads
        ((5, 3, 8), (24, -8, 1), None),              # negative stride
        ((2, 5, 3, 8), (240, 24, 8, 1), None),       # a batch slice of a longer buffer
    ],
)
def test_token_head_strides(shape, strides, expected):
    assert token_head_strides(TensorDescription(BASE, shape, strides, "bfloat16", DEVICE)) == expected
