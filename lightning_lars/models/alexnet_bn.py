"""AlexNet-BN: AlexNet with its local response normalisation replaced by batch norm.

You, Gitman, Ginsburg 2017 (LARS, https://arxiv.org/abs/1708.03888, sec. 3): "we replaced Local Response
Normalization layers in AlexNet with Batch Normalization (BN). We will refer to this modification of AlexNet
as AlexNet-BN" - the model of the LARS AlexNet records at 8k and 32k. timm has no AlexNet, so this registers
``alexnet_bn`` with timm and every recipe creates it the same way as ``resnet50``.

Layers (single-tower AlexNet, Krizhevsky 2014 "one weird trick" widths, as torchvision and Caffe's
bvlc_alexnet without the two-GPU groups): conv 11x11/4 96 -> BN -> ReLU -> maxpool 3/2 -> conv 5x5 256 -> BN
-> ReLU -> maxpool 3/2 -> conv 3x3 384 -> ReLU -> conv 3x3 384 -> ReLU -> conv 3x3 256 -> ReLU -> maxpool 3/2
-> adaptive avg pool 6x6 -> dropout -> fc 4096 -> ReLU -> dropout -> fc 4096 -> ReLU -> fc num_classes.
BN sits where LRN sat (after conv1 and conv2), before the ReLU as in Ioffe & Szegedy; those two convs have
no bias (BN's beta replaces it). Inputs of 63 px or more (224 for ImageNet).
"""

from __future__ import annotations

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from torch import nn


class AlexNetBN(nn.Module):
    """AlexNet-BN with timm's classifier interface (``get_classifier``, ``reset_classifier``,
    ``forward_features``, ``forward_head``).

    Args:
        num_classes: classifier width (1000).
        in_chans: input channels (3).
        drop_rate: dropout before fc6 and fc7 (0.5, as AlexNet).
    """

    def __init__(self, num_classes: int = 1000, in_chans: int = 3, drop_rate: float = 0.5, **kwargs):
        super().__init__()
        if kwargs:
            raise TypeError(f"alexnet_bn takes no arguments {sorted(kwargs)}")
        self.num_classes, self.drop_rate, self.num_features = num_classes, drop_rate, 4096
        self.features = nn.Sequential(
            nn.Conv2d(in_chans, 96, kernel_size=11, stride=4, padding=2, bias=False),
            nn.BatchNorm2d(96),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(96, 256, kernel_size=5, padding=2, bias=False),
            nn.BatchNorm2d(256),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(256, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.pool = nn.AdaptiveAvgPool2d((6, 6))  # 6x6 at 224 px already; lets other sizes through
        self.pre_logits = nn.Sequential(
            nn.Flatten(1),
            nn.Dropout(drop_rate),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(drop_rate),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
        )
        self.fc = nn.Linear(4096, num_classes) if num_classes > 0 else nn.Identity()

    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.features(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.pre_logits(x)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


default_cfgs = generate_default_cfgs(
    {
        "alexnet_bn": {
            "url": "",
            "num_classes": 1000,
            "input_size": (3, 224, 224),
            "min_input_size": (3, 63, 63),
            "pool_size": (6, 6),
            "crop_pct": 0.875,
            "interpolation": "bilinear",
            "mean": IMAGENET_DEFAULT_MEAN,
            "std": IMAGENET_DEFAULT_STD,
            "first_conv": "features.0",
            "classifier": "fc",
        },
    }
)


@register_model
def alexnet_bn(pretrained: bool = False, **kwargs) -> AlexNetBN:
    """AlexNet-BN (You, Gitman, Ginsburg 2017); no pretrained weights exist."""
    if pretrained:
        raise ValueError("alexnet_bn has no pretrained weights")
    return build_model_with_cfg(AlexNetBN, "alexnet_bn", pretrained, **kwargs)
