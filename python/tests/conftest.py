"""Shared fixtures of the Python tests.

Run from the repository root after building (scripts/test.sh does):
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q python/tests
GEARBOX_BUILD_DIR names another build directory (default: build).
"""

import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("GEARBOX_BUILD_DIR", ROOT / "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD

try:
    import gearbox  # noqa: F401
except ImportError:  # PYTHONPATH not set: use the build tree's package
    sys.path.insert(0, str(BUILD / "python"))


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def cli():
    """The gearbox command-line tool of the same build."""
    path = BUILD / "tools" / "gearbox"
    if not path.exists():
        pytest.skip(f"{path} is not built (GEARBOX_BUILD_TOOLS=OFF?)")
    return path


@pytest.fixture(scope="session")
def azure_trace():
    """The bundled Azure LLM conversation trace (scripts/main-job.sh converts it)."""
    return ROOT / "data" / "AzureLLMInferenceTrace_conv.csv"


@pytest.fixture(scope="session")
def prefill_config():
    """The config scripts/main-job.sh replays the Azure trace with."""
    return ROOT / "data" / "configs" / "prefill_times.json"


def batch_config(gears, splittable=True, **adaptive):
    """A one-dimension BATCHSIZE config as a dict."""
    config = {"dims": [{"name": "BATCHSIZE", "gears": list(gears), "splittable": splittable}]}
    if adaptive:
        config["adaptive"] = adaptive
    return config
