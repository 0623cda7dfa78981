import os
from unittest import mock

import pytest
import torch

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


@pytest.fixture(autouse=True)
def environment_restored_after_each_test():
    """Each test leaves ``os.environ`` as it found it. Lightning's launchers write ``MASTER_PORT``,
    ``WORLD_SIZE`` and the like into the test process and leave them; a later DDP test in the same xdist
    worker then reused that stale port, by then possibly taken by another process (EADDRINUSE)."""
    with mock.patch.dict(os.environ):
        yield
