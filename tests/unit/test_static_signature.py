"""The keyword names a config `_target_` takes, read from source without importing it, against the oracle of
the imported object's signature (`config.accepted_arguments`, i.e. `inspect.signature`) for every `_target_`
our configs and recipes name."""

import re

import pytest
from hydra.utils import get_object

from lightning_lars.config import compose as config
from lightning_lars.config.static_signature import static_arguments

TARGETS = sorted({target for path in [*config.CONF_DIR.rglob("*.yaml"), *config.CONF_DIR.parent.joinpath(
    "recipes").rglob("*.yaml")] for target in re.findall(r"_target_:\s*([A-Za-z_][\w.]*)", path.read_text())})
# read statically, so a misspelt key under them is an error without importing Lightning, timm or FFCV
READ_FROM_SOURCE = ["lightning.pytorch.Trainer", "lightning_lars.runtime.checkpointing.Checkpoint",
                    "lightning_lars.optim.lars.LARS", "lightning_lars.data.ffcv_datamodule.FFCVDataModule",
                    "lightning_lars.training.module.ImageClassifier", "lightning_lars.report.wandb_logger.wandb_logger"]


def test_the_configs_name_the_targets_this_test_reads():
    assert len(TARGETS) > 30 and set(READ_FROM_SOURCE) <= set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_source_reading_agrees_with_the_imported_signature(target):
    names = static_arguments(target)
    if target in READ_FROM_SOURCE:
        assert names is not None
    if names is not None:  # None: the caller imports the target and reads its signature instead
        assert names == config.accepted_arguments(get_object(target))


def test_what_the_reading_cannot_follow_is_none():
    assert static_arguments("lightning_lars.parallel.bucket_hook.GroupedAllReduceState") is None  # a dataclass
    assert static_arguments("no_such_package.Thing") is None
    assert static_arguments("lightning_lars.config.compose.NO_SUCH_NAME") is None
