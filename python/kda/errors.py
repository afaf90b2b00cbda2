"""Exceptions of the kda package.

Rule: an argument the package itself rejects raises a plain ValueError whose message starts with the argument's
name; a status the C library returns raises a KdaError carrying the status and the library's own message (which
also names the argument). Invalid and unsupported arguments found by the library are ValueErrors too, so a caller
catches one type for "kda cannot take this call" wherever the check happens.
"""

from . import _abi


class KdaError(RuntimeError):
    """A kda_* function returned a non-zero kda_status.

    Attributes: function (the C function's name), status (the code), status_name (kda_status_name), message
    (kda_last_error_message, read right after the failing call on the same thread).
    """

    def __init__(self, function, status, status_name, message, detail=""):
        self.function = function
        self.status = status
        self.status_name = status_name
        self.message = message
        text = f"{function}: {status_name}: {message}"
        if detail:
            text += f" ({detail})"
        super().__init__(text)


class KdaInvalidArgumentError(KdaError, ValueError):
    """KDA_STATUS_INVALID_ARGUMENT: the library rejected an argument before enqueuing anything."""


class KdaUnsupportedError(KdaError, ValueError):
    """KDA_STATUS_UNSUPPORTED: a valid argument the library does not implement (head dim, dtype, chunk size)."""


class KdaLibraryError(ImportError):
    """libkda_capi.so could not be found or loaded, lacks a symbol, or is older than this package expects."""


def error_for_status(function, status, status_name, message, detail=""):
    """The exception to raise for a non-zero status from `function`."""
    if status == _abi.STATUS_INVALID_ARGUMENT:
        cls = KdaInvalidArgumentError
    elif status == _abi.STATUS_UNSUPPORTED:
        cls = KdaUnsupportedError
    else:
        cls = KdaError
    return cls(function, status, status_name, message, detail)
