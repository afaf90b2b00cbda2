"""Finding and checking libkda_capi.so: KDA_LIBRARY, the file beside the package, and the errors when the library
is missing, is not kda's, or is older than the package's structs."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

import kda
from kda import _abi, _library
from kda.errors import KdaLibraryError


def test_kda_library_env_wins(tmp_path):
    fake = tmp_path / "libsomething.so"
    fake.write_bytes(b"")
    assert _library.find_library_path({"KDA_LIBRARY": str(fake)}) == str(fake)


def test_kda_library_env_pointing_nowhere_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    monkeypatch.setattr(_library, "PACKAGE_DIR", str(tmp_path))
    (tmp_path / _library.LIBRARY_FILE_NAME).write_bytes(b"")  # a library beside the package must not be used
    missing = str(tmp_path / "nope.so")
    with pytest.raises(KdaLibraryError, match=r"KDA_LIBRARY=.*nope\.so: no such file"):
        _library.find_library_path({"KDA_LIBRARY": missing})


def test_library_beside_the_package_when_env_unset(tmp_path, monkeypatch):
    monkeypatch.setattr(_library, "PACKAGE_DIR", str(tmp_path))
    beside = tmp_path / _library.LIBRARY_FILE_NAME
    beside.write_bytes(b"")
    assert _library.find_library_path({}) == str(beside)


def test_missing_library_error_says_where_it_looked_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(_library, "PACKAGE_DIR", str(tmp_path))
    with pytest.raises(KdaLibraryError) as error:
        _library.find_library_path({})
    message = str(error.value)
    assert "KDA_LIBRARY is not set" in message
    assert str(tmp_path / "libkda_capi.so") in message
    assert "kda_capi" in message
    assert isinstance(error.value, ImportError)


def test_older_library_version_is_refused():
    with pytest.raises(KdaLibraryError, match=r"/x/libkda_capi\.so: C ABI version 1 is older than this kda package "
                                               r"needs \(>= 2\)"):
        _library.check_abi_version(_abi.PACKAGE_ABI_VERSION - 1, "/x/libkda_capi.so")
    _library.check_abi_version(_abi.PACKAGE_ABI_VERSION, "same")      # the same version: fine
    _library.check_abi_version(_abi.PACKAGE_ABI_VERSION + 1, "newer")  # newer libraries take older structs


def test_built_library_loads_and_reports_its_version(library_path):
    lib = _library.CapiLibrary(library_path)
    assert lib.abi_version == _abi.PACKAGE_ABI_VERSION
    assert lib.status_name(_abi.STATUS_WORKSPACE_TOO_SMALL) == "workspace too small"
    assert kda.abi_version() == lib.abi_version  # the package's own copy, found through KDA_LIBRARY


def test_a_file_that_is_no_library_is_a_clear_error(tmp_path):
    bogus = tmp_path / "libkda_capi.so"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(KdaLibraryError, match="cannot be loaded"):
        _library.CapiLibrary(str(bogus))


def _compile_shared(tmp_path, source, name):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in library")
    c_file = tmp_path / (name + ".c")
    c_file.write_text(source)
    so = tmp_path / (name + ".so")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(c_file)], check=True)
    return str(so)


def test_a_version_one_library_is_refused_when_loaded(tmp_path):
    # Every prototype present, kda_abi_version() answering 1: loading must fail on the version alone.
    stubs = "\n".join(f"int {name}(void) {{ return 0; }}" for name in _abi.FUNCTION_PROTOTYPES
                      if name != "kda_abi_version")
    so = _compile_shared(tmp_path, stubs + "\nint kda_abi_version(void) { return 1; }\n", "libold")
    with pytest.raises(KdaLibraryError, match=r"C ABI version 1 is older than this kda package needs"):
        _library.CapiLibrary(so)


def test_a_library_without_kda_symbols_names_the_missing_one(tmp_path):
    so = _compile_shared(tmp_path, "int kda_abi_version(void) { return 2; }\n", "libpartial")
    with pytest.raises(KdaLibraryError, match=r"has no symbol kda_"):
        _library.CapiLibrary(so)


def test_import_kda_neither_imports_torch_nor_loads_the_library():
    code = (
        "import sys, kda, kda._library as L\n"
        "assert 'torch' not in sys.modules, 'import kda imported torch'\n"
        "assert L._loaded is None, 'import kda loaded the library'\n"
        "print('ok')\n"
    )
    env = dict(os.environ, KDA_LIBRARY="/nonexistent/libkda_capi.so")  # would fail if anything loaded it
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_torch_entry_points_without_torch_say_what_is_missing():
    with pytest.raises(ImportError, match=r"^kda\.chunk_kda needs PyTorch, which is not installed$"):
        kda.chunk_kda
