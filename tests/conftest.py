import os
from collections.abc import Callable
from pathlib import Path
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


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "demo_data(train_per_class=16, val_per_class=8): on a test or a module, the size of the demo dataset "
        "the data_dir fixture gives it",
    )


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


@pytest.fixture(scope="session")
def demo_datasets(tmp_path_factory) -> Callable[..., Path]:
    """``demo_datasets(train_per_class=16, val_per_class=8)``: a ``paths.data_dir`` folder holding the demo
    dataset at that size, made by its real command the first time a test of this session asks for that size."""
    # imported here, not at the top: helpers imports Lightning, which a collection of unit tests need not wait for
    from helpers import make_demo_data

    made: dict[tuple[int, int], Path] = {}

    def dataset(train_per_class: int = 16, val_per_class: int = 8) -> Path:
        size = (train_per_class, val_per_class)
        if size not in made:
            folder = tmp_path_factory.mktemp(f"demo_{train_per_class}_{val_per_class}")
            made[size] = make_demo_data(folder, train_per_class=train_per_class, val_per_class=val_per_class)
        return made[size]

    return dataset


@pytest.fixture
def data_dir(request, demo_datasets) -> Path:
    """The demo dataset's ``paths.data_dir`` (10 classes): 16 train and 8 val images a class, or the size a
    ``pytest.mark.demo_data(train_per_class=..., val_per_class=...)`` on the test or its module names. Every test
    of the session that asks for that size reads the same files: a test that changes them works on a copy."""
    marker = request.node.get_closest_marker("demo_data")
    return demo_datasets(**(marker.kwargs if marker else {}))


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory) -> Path:
    """The folder of the runs the resume tests share (tests/integration/resume_runs.py): the demo data and the
    unbroken reference run, made there once a session by whichever test needs them first."""
    return tmp_path_factory.mktemp("resume_runs")
