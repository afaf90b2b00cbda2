"""kda: chunked KDA (Kimi Delta Attention) prefill from Python, through libkda_capi.so and ctypes.

The library is libkda_capi.so beside this package, or the file named by KDA_LIBRARY.
"""

from ._abi import PACKAGE_ABI_VERSION
from ._library import LIBRARY_ENV, abi_version, find_library_path
from .errors import KdaError, KdaInvalidArgumentError, KdaLibraryError, KdaUnsupportedError

__all__ = [
    "LIBRARY_ENV",
    "PACKAGE_ABI_VERSION",
    "KdaError",
    "KdaInvalidArgumentError",
    "KdaLibraryError",
    "KdaUnsupportedError",
    "abi_version",
    "find_library_path",
]
