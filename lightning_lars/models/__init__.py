"""Models timm does not have (registered with ``timm.register_model`` on import: importing this package
makes ``timm.create_model("alexnet_bn")`` work like any timm name), and batch norm over a chosen span.

Imports ``core``.
"""

import timm
from omegaconf import OmegaConf

from lightning_lars.models import alexnet_bn, resnet_v1  # noqa: F401  (register with timm)


def at_least_model_min(pixels: int, arch: str) -> int:
    """``pixels``, or the smallest input the timm model takes if that is larger (its pretrained config's
    ``min_input_size``; AlexNet-BN pools 32 px images to nothing and needs 63)."""
    try:
        minimum = timm.models.get_pretrained_cfg(arch).min_input_size
    except (AttributeError, RuntimeError, KeyError):  # an unknown name: target_checks names the fix
        minimum = None
    return max(int(pixels), int(minimum[-1]) if minimum else 0)


# `${at_least_model_min:32,${model.arch}}` in conf/debug/toy.yaml: every recipe's model runs on the demo data
OmegaConf.register_new_resolver("at_least_model_min", at_least_model_min, replace=True)
