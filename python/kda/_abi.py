"""The C ABI of libkda_capi.so (include/kda/kda_c.h) as ctypes declarations.

Rule: every structure here mirrors kda_c.h field for field, in order, with the same C types, so that ctypes lays it
out exactly as the C compiler does (64-bit targets; capi/kda_capi.cu's static_asserts freeze the offsets, and
tests/python/test_abi_layout.py checks the same offsets here). Codes are the header's fixed integer values.
Nothing in this module loads the library; _library.py does, and binds FUNCTION_PROTOTYPES to it.
"""

import ctypes

# The kda_c.h version these declarations describe (KDA_C_ABI_VERSION). A library accepts the structs of its own
# version and every earlier one, so the package needs kda_abi_version() >= this.
PACKAGE_ABI_VERSION = 2

# ---- kda_status ----------------------------------------------------------------------------------------------------
STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_WORKSPACE_TOO_SMALL = 3
STATUS_RUNTIME_ERROR = 4

# ---- Element types of q, k, v, o -----------------------------------------------------------------------------------
DTYPE_BF16 = 0
DTYPE_FP16 = 1

# ---- Integer types of cu_seqlens, chunk tables and state_indices ---------------------------------------------------
INDEX_INT32 = 0
INDEX_INT64 = 1

# ---- Element types of the raw gate g and the raw beta --------------------------------------------------------------
SCALAR_FLOAT32 = 0
SCALAR_BFLOAT16 = 1
SCALAR_FLOAT16 = 2

# ---- How the log-decay comes from g (KDA_SPEC section 1.1) ---------------------------------------------------------
GATE_PRECOMPUTED = 0
GATE_SOFTPLUS = 1
GATE_LOWER_BOUND = 2

# ---- What is applied to the raw beta -------------------------------------------------------------------------------
BETA_NONE = 0
BETA_SIGMOID = 1
BETA_SIGMOID_TIMES_TWO = 2

# ---- State layout in the pool --------------------------------------------------------------------------------------
STATE_K_FIRST = 0
STATE_V_FIRST = 1

# ---- Device status word bits (uint32 at byte 0 of the workspace after a call) --------------------------------------
DEVICE_STATUS_BAD_CU_SEQLENS = 1
DEVICE_STATUS_BAD_CHUNK_TABLE = 2
DEVICE_STATUS_BAD_STATE_INDEX = 4
DEVICE_STATUS_SEQUENCE_OVER_BOUND = 8


class TensorView(ctypes.Structure):
    """kda_tensor_view: a [T, H, D] device tensor, strides in elements, innermost dimension contiguous."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("token_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


class MutableTensorView(ctypes.Structure):
    """kda_mutable_tensor_view: the same for the output."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("token_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


class ChunkKdaArgs(ctypes.Structure):
    """kda_chunk_kda_args, version 2 (328 bytes). Fill it with kda_chunk_kda_args_init before setting fields: a
    zeroed struct is not the documented default (pool_size, num_chunks and lower_bound are -1, -1 and -5)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        # Batch geometry
        ("num_sequences", ctypes.c_int64),
        ("total_tokens", ctypes.c_int64),
        ("num_heads", ctypes.c_int32),
        ("head_dim_k", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("chunk_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("cu_seqlens_type", ctypes.c_int32),
        ("cu_seqlens", ctypes.c_void_p),
        # Optional chunk tables
        ("chunk_indices", ctypes.c_void_p),
        ("chunk_offsets", ctypes.c_void_p),
        ("num_chunks", ctypes.c_int64),
        ("chunk_table_type", ctypes.c_int32),
        # Gate and beta
        ("g_type", ctypes.c_int32),
        ("beta_type", ctypes.c_int32),
        ("gate", ctypes.c_int32),
        ("beta_activation", ctypes.c_int32),
        ("qk_l2norm", ctypes.c_int32),
        ("lower_bound", ctypes.c_float),
        ("scale", ctypes.c_float),
        # Inputs and output
        ("q", TensorView),
        ("k", TensorView),
        ("v", TensorView),
        ("g", TensorView),
        ("beta", TensorView),
        ("o", MutableTensorView),
        ("A_log", ctypes.c_void_p),
        ("dt_bias", ctypes.c_void_p),
        # Recurrent state pool
        ("initial_state", ctypes.c_void_p),
        ("final_state", ctypes.c_void_p),
        ("state_indices", ctypes.c_void_p),
        ("has_initial_state", ctypes.c_void_p),
        ("pool_size", ctypes.c_int64),
        ("state_layout", ctypes.c_int32),
        ("state_indices_type", ctypes.c_int32),
        # Version 2
        ("max_sequence_tokens", ctypes.c_int64),
    ]


class DeviceChunkMetadata(ctypes.Structure):
    """kda_device_chunk_metadata (40 bytes): where kda_upload_chunk_metadata put the tables."""

    _fields_ = [
        ("chunk_indices", ctypes.c_void_p),
        ("chunk_offsets", ctypes.c_void_p),
        ("num_chunks", ctypes.c_int64),
        ("bytes", ctypes.c_size_t),
        ("type", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


_args_p = ctypes.POINTER(ChunkKdaArgs)
_i64_p = ctypes.POINTER(ctypes.c_int64)
_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_int = ctypes.c_int
_void_p = ctypes.c_void_p

# name -> (restype, argtypes), exactly the prototypes of kda_c.h.
FUNCTION_PROTOTYPES = {
    "kda_abi_version": (_c_int, []),
    "kda_status_name": (ctypes.c_char_p, [_c_int]),
    "kda_last_error_message": (ctypes.c_char_p, []),
    "kda_chunk_kda_args_init": (_c_int, [_args_p, ctypes.c_size_t]),
    "kda_chunk_kda_workspace_size": (_c_int, [_args_p, _size_p]),
    "kda_chunk_kda_fwd": (_c_int, [_args_p, _void_p, ctypes.c_size_t, _void_p]),
    "kda_count_chunks": (_c_int, [_void_p, _c_int, ctypes.c_int64, _c_int, ctypes.c_int64, _i64_p, _i64_p]),
    "kda_longest_sequence": (_c_int, [_void_p, _c_int, ctypes.c_int64, ctypes.c_int64, _i64_p, _i64_p]),
    "kda_build_chunk_metadata": (
        _c_int,
        [_void_p, _c_int, ctypes.c_int64, _c_int, ctypes.c_int64, _c_int, _void_p, ctypes.c_int64, _void_p, _i64_p,
         _i64_p],
    ),
    "kda_chunk_metadata_bytes": (_c_int, [ctypes.c_int64, ctypes.c_int64, _c_int, _size_p]),
    "kda_upload_chunk_metadata": (
        _c_int,
        [_void_p, _c_int, ctypes.c_int64, _c_int, ctypes.c_int64, _c_int, _void_p, ctypes.c_size_t, _void_p,
         ctypes.c_size_t, _void_p, ctypes.POINTER(DeviceChunkMetadata)],
    ),
}
