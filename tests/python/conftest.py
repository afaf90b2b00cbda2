"""pytest setup for the kda Python package tests.

Host tests (no marker) need only python3, pytest, numpy and libkda_capi.so (KDA_LIBRARY); they never touch a GPU.
Tests marked `gpu` need torch with CUDA; ctest runs them as a separate entry (label gpu) with
KDA_REQUIRE_GPU=1, under which a missing torch or GPU fails them instead of skipping them.
"""

import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_PARENT = os.path.join(REPO_ROOT, "python")
if PACKAGE_PARENT not in sys.path:
    sys.path.insert(0, PACKAGE_PARENT)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs torch and a CUDA GPU (ctest label gpu)")


@pytest.fixture(scope="session")
def library_path():
    """The libkda_capi.so under test: KDA_LIBRARY, which ctest sets to the built target."""
    path = os.environ.get("KDA_LIBRARY")
    if not path:
        pytest.fail("KDA_LIBRARY is not set: point it at the built libkda_capi.so (ctest does)")
    return path
