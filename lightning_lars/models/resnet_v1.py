"""ResNet-50 v1: the original He et al. (2015) bottleneck, with the stride on the first 1x1 conv.

timm's ``resnet50`` is "v1.5" (torchvision, fb.resnet.torch, the MLPerf and TPU references): a downsampling
bottleneck strides its 3x3 conv. The original Caffe model (KaimingHe/deep-residual-networks) and Chainer's
ImageNet example as of chainer/chainer 3e78ae2d (examples/imagenet/resnet50.py, ``BottleNeckA.conv1 =
Convolution2D(in_size, ch, 1, stride, 0)``; later versions stride the 3x3) stride the 1x1 conv that opens the
block instead. Same tensors, same 25.56 M parameters; only the first block of stages 3-5 differs: its 3x3 conv
runs on the already-downsampled map (fewer FLOPs, and v1.5 is the slightly more accurate of the two).

Built from timm's own ``ResNet``: ``BottleneckV1`` is timm's ``Bottleneck`` with the two strides swapped, so
``zero_init_last``, ``get_classifier`` and every other timm interface behave as for ``resnet50``.
"""

from __future__ import annotations

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.resnet import Bottleneck, ResNet, _cfg


class BottleneckV1(Bottleneck):
    """timm's bottleneck with the stride on ``conv1`` (1x1) instead of ``conv2`` (3x3): ResNet v1."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("aa_layer") is not None:  # anti-aliased blocks stride after conv2: no v1 form exists
            raise ValueError("resnet50_v1 takes no aa_layer")
        super().__init__(*args, **kwargs)
        self.conv1.stride, self.conv2.stride = self.conv2.stride, (1, 1)


default_cfgs = generate_default_cfgs({"resnet50_v1": _cfg(url="")})


@register_model
def resnet50_v1(pretrained: bool = False, **kwargs) -> ResNet:
    """ResNet-50 v1 (He et al. 2015, stride in the first 1x1 conv of a downsampling bottleneck)."""
    if pretrained:
        raise ValueError("resnet50_v1 has no pretrained weights")
    return build_model_with_cfg(
        ResNet, "resnet50_v1", pretrained, block=BottleneckV1, layers=(3, 4, 6, 3), **kwargs
    )
