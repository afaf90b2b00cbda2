"""Finding, loading and version-checking libkda_capi.so.

Rule: the library is the file named by the environment variable KDA_LIBRARY when it is set (and then nothing else,
so a wrong setting is an error rather than a silent fallback), else libkda_capi.so in the package's own directory.
It is loaded on first use, not at `import kda`, so that the package imports (and its host-only parts can be tested)
without it. A library whose kda_abi_version() is older than the structs this package writes is refused: it would
reject or misread them.
"""

import ctypes
import os
import threading

from . import _abi
from .errors import KdaLibraryError, error_for_status

LIBRARY_ENV = "KDA_LIBRARY"
LIBRARY_FILE_NAME = "libkda_capi.so"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def find_library_path(environ=None):
    """The path of the library to load, by the module's rule; raises KdaLibraryError when there is none."""
    environ = os.environ if environ is None else environ
    configured = environ.get(LIBRARY_ENV)
    if configured:
        if not os.path.isfile(configured):
            raise KdaLibraryError(f"{LIBRARY_ENV}={configured}: no such file (point it at libkda_capi.so)")
        return configured
    beside_package = os.path.join(PACKAGE_DIR, LIBRARY_FILE_NAME)
    if os.path.isfile(beside_package):
        return beside_package
    raise KdaLibraryError(
        f"{LIBRARY_FILE_NAME} not found: {LIBRARY_ENV} is not set and {beside_package} does not exist. Build the "
        f"CMake target kda_capi and either copy {LIBRARY_FILE_NAME} next to the kda package or set {LIBRARY_ENV} to "
        f"its path."
    )


def check_abi_version(library_version, path):
    """Raises KdaLibraryError when a library of `library_version` cannot take this package's structs."""
    if library_version < _abi.PACKAGE_ABI_VERSION:
        raise KdaLibraryError(
            f"{path}: C ABI version {library_version} is older than this kda package needs "
            f"(>= {_abi.PACKAGE_ABI_VERSION}); rebuild libkda_capi.so from the same source tree as the package"
        )


class CapiLibrary:
    """libkda_capi.so loaded with ctypes, its functions bound to the kda_c.h prototypes.

    `call(name, *args)` runs a kda_status function and raises the matching KdaError when it returns non-zero;
    attribute access (`lib.kda_chunk_kda_fwd`) gives the raw ctypes function for hot paths.
    """

    def __init__(self, path):
        self.path = path
        try:
            self._cdll = ctypes.CDLL(path)
        except OSError as e:
            raise KdaLibraryError(f"{path}: cannot be loaded: {e}") from e
        for name, (restype, argtypes) in _abi.FUNCTION_PROTOTYPES.items():
            try:
                function = getattr(self._cdll, name)
            except AttributeError:
                raise KdaLibraryError(
                    f"{path}: has no symbol {name}; it is not libkda_capi.so, or older than C ABI version "
                    f"{_abi.PACKAGE_ABI_VERSION}"
                ) from None
            function.restype = restype
            function.argtypes = argtypes
            setattr(self, name, function)
        self.abi_version = int(self.kda_abi_version())
        check_abi_version(self.abi_version, path)

    def last_error_message(self):
        return self.kda_last_error_message().decode("utf-8", "replace")

    def status_name(self, status):
        return self.kda_status_name(status).decode("utf-8", "replace")

    def raise_for_status(self, function, status, detail=""):
        """Raises for a non-zero `status` just returned by `function` on this thread."""
        if status != _abi.STATUS_OK:
            raise error_for_status(function, status, self.status_name(status), self.last_error_message(), detail)

    def call(self, name, *args):
        status = getattr(self, name)(*args)
        self.raise_for_status(name, status)


_loaded = None
_lock = threading.Lock()


def library():
    """The process's library, found and loaded on the first call."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = CapiLibrary(find_library_path())
    return _loaded


def abi_version():
    """kda_abi_version() of the loaded library."""
    return library().abi_version
