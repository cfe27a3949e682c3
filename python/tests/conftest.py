"""Shared fixtures: the devices present, fresh random inputs, and the
modules a run must have (TF_PYTEST_REQUIRE="numpy,torch" makes a missing
one an error instead of a skip, so make test cannot pass by skipping)."""
import importlib
import os

import pytest

import tensorframe as tf

REQUIRED = [m for m in os.environ.get("TF_PYTEST_REQUIRE", "").split(",") if m]
REQUIRED_DEVICES = [d for d in os.environ.get("TF_PYTEST_DEVICES", "").split(",") if d]
DEVICES = [d.name for d in tf.devices()]


def need(module):
    """The module, or a skip - an error when the run requires it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if module in REQUIRED:
            raise
        pytest.skip("%s is not installed" % module)


def pytest_sessionstart(session):
    missing = [d for d in REQUIRED_DEVICES if d not in DEVICES]
    if missing:
        raise pytest.UsageError("TF_PYTEST_DEVICES wants %s; present: %s" % (missing, DEVICES))
    for m in REQUIRED:
        importlib.import_module(m)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def rng():
    np = need("numpy")
    seed = int.from_bytes(os.urandom(4), "little")
    print("random seed", seed)
    return np.random.default_rng(seed)


@pytest.fixture
def np():
    return need("numpy")
