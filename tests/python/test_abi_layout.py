"""The ctypes declarations mirror include/kda/kda_c.h: sizes, offsets, field order and every code.

The expected offsets come from three places that must agree: the numbers frozen in capi/kda_capi.cu's
static_asserts (read from that file), the header's own field order (read from kda_c.h), and the ctypes layout.
"""

import ctypes
import os
import re

import pytest

from conftest import REPO_ROOT
from kda import _abi

HEADER = os.path.join(REPO_ROOT, "include", "kda", "kda_c.h")
CAPI_SOURCE = os.path.join(REPO_ROOT, "capi", "kda_capi.cu")

pytestmark = pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the layout is frozen for 64-bit targets")


def read(path):
    with open(path) as f:
        return f.read()


def struct_body(header, name):
    match = re.search(r"typedef struct " + name + r" \{(.*?)\} " + name + ";", header, re.S)
    assert match, f"{name} not found in kda_c.h"
    body = re.sub(r"/\*.*?\*/", "", match.group(1), flags=re.S)
    return body


def header_field_names(header, name):
    """Field names of a kda_c.h struct, in order (one declaration per statement there)."""
    names = []
    for statement in struct_body(header, name).split(";"):
        statement = statement.strip()
        if statement:
            names.append(re.findall(r"(\w+)\s*$", statement)[0])
    return names


def test_args_size_and_version_two_tail():
    assert ctypes.sizeof(_abi.ChunkKdaArgs) == 328
    assert _abi.ChunkKdaArgs.max_sequence_tokens.offset == 320  # version 1 is the first 320 bytes
    assert ctypes.sizeof(_abi.DeviceChunkMetadata) == 40
    assert ctypes.sizeof(_abi.TensorView) == 24
    assert ctypes.sizeof(_abi.MutableTensorView) == 24


def test_offsets_match_the_static_asserts_of_the_c_abi():
    source = read(CAPI_SOURCE)
    frozen = dict(
        (field, int(offset))
        for field, offset in re.findall(r"offsetof\(kda_chunk_kda_args,\s*(\w+)\)\s*==\s*(\d+)", source)
    )
    # The static_asserts name these; if one disappears the test should say so rather than pass on fewer.
    assert set(frozen) >= {"cu_seqlens", "num_chunks", "scale", "q", "o", "pool_size", "state_indices_type",
                           "max_sequence_tokens"}
    for field, offset in frozen.items():
        assert getattr(_abi.ChunkKdaArgs, field).offset == offset, field
    size = re.search(r"sizeof\(kda_chunk_kda_args\)\s*==\s*(\d+)", source)
    assert ctypes.sizeof(_abi.ChunkKdaArgs) == int(size.group(1))


@pytest.mark.parametrize(
    "c_name, py_type",
    [
        ("kda_chunk_kda_args", _abi.ChunkKdaArgs),
        ("kda_tensor_view", _abi.TensorView),
        ("kda_mutable_tensor_view", _abi.MutableTensorView),
        ("kda_device_chunk_metadata", _abi.DeviceChunkMetadata),
    ],
)
def test_field_order_matches_the_header(c_name, py_type):
    assert [name for name, _ in py_type._fields_] == header_field_names(read(HEADER), c_name)


def test_key_field_offsets():
    a = _abi.ChunkKdaArgs
    expected = {
        "struct_size": 0, "num_sequences": 8, "total_tokens": 16, "num_heads": 24, "head_dim_k": 28,
        "chunk_size": 36, "cu_seqlens": 48, "chunk_indices": 56, "num_chunks": 72, "g_type": 84, "gate": 92,
        "lower_bound": 104, "scale": 108, "q": 112, "k": 136, "beta": 208, "o": 232, "A_log": 256,
        "initial_state": 272, "has_initial_state": 296, "pool_size": 304, "state_layout": 312,
        "state_indices_type": 316, "max_sequence_tokens": 320,
    }
    assert {name: getattr(a, name).offset for name in expected} == expected


def test_codes_equal_the_header_values():
    header = read(HEADER)
    codes = dict((name, int(value)) for name, value in re.findall(r"\bKDA_(\w+)\s*=\s*(\d+)", header))
    python_codes = {name: value for name, value in vars(_abi).items()
                    if name.isupper() and isinstance(value, int) and name != "PACKAGE_ABI_VERSION"}
    assert python_codes == codes  # the same names, the same values, none missing on either side
    version = int(re.search(r"#define KDA_C_ABI_VERSION (\d+)", header).group(1))
    assert _abi.PACKAGE_ABI_VERSION == version


def test_function_prototypes_cover_every_exported_function():
    declared = set(re.findall(r"KDA_CAPI_EXPORT\s+[\w\s\*]+?\b(kda_\w+)\s*\(", read(HEADER)))
    assert declared == set(_abi.FUNCTION_PROTOTYPES)
