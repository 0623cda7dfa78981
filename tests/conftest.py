import os
from unittest import mock

import pytest
import torch

# The optional packages some test modules import at their top, and the extra that brings each. A GPU node with
# only the GPU kit lacks them; there such a module is reported skipped with the install line, so that
# `pytest -m gpu tests` collects (an ImportError at collection stops the whole session before -m deselects).
OPTIONAL_PACKAGES = {
    "ffcv": "pip install 'lightning-lars[ffcv]'",
    "mlperf_logging": "pip install 'lightning-lars[mlperf]'",
    "submitit": "pip install 'lightning-lars[slurm]'",
    "hydra_plugins": "pip install 'lightning-lars[slurm]'",
}

# Tests never talk to W&B's servers and never prompt.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        # the marker, not item.keywords: a test parametrised with the value "gpu" has that keyword too
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    error = str(report.longrepr) if report.failed else ""
    for package, install in OPTIONAL_PACKAGES.items():
        if f"No module named '{package}" in error:
            report.outcome = "skipped"
            report.longrepr = (
                str(collector.path),
                0,
                f"Skipped: needs {package}, not installed here: {install}",
            )
    return report


@pytest.fixture(autouse=True)
def environment_restored_after_each_test():
    """Each test leaves ``os.environ`` as it found it. Lightning's launchers write ``MASTER_PORT``,
    ``WORLD_SIZE`` and the like into the test process and leave them; a later DDP test in the same xdist
    worker then reused that stale port, by then possibly taken by another process (EADDRINUSE)."""
    with mock.patch.dict(os.environ):
        yield
