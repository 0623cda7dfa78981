"""ResNet-50 v1 (stride in the 1x1 conv) against the layer table of He et al. 2015 and timm's v1.5."""

import pytest
import timm
import torch

import lightning_lars.models  # noqa: F401  (registers resnet50_v1)


@pytest.fixture(scope="module")
def v1():
    return timm.create_model("resnet50_v1", num_classes=10, zero_init_last=True).eval()


def _strides(model):
    """(conv1 stride, conv2 stride, shortcut stride) of the first block of each stage."""
    return [
        (
            s[0].conv1.stride[0],
            s[0].conv2.stride[0],
            s[0].downsample[0].stride[0] if s[0].downsample is not None else 1,
        )
        for s in (model.layer1, model.layer2, model.layer3, model.layer4)
    ]


def test_v1_strides_the_first_1x1_conv_and_keeps_every_tensor_of_v15(v1):
    v15 = timm.create_model("resnet50", num_classes=10)
    # He et al. 2015 / the original Caffe prototxt: conv3_1, conv4_1, conv5_1 downsample in their first 1x1
    # conv (res3a_branch2a stride 2), the projection shortcut strides too
    assert _strides(v1) == [(1, 1, 1), (2, 1, 2), (2, 1, 2), (2, 1, 2)]
    assert _strides(v15) == [(1, 1, 1), (1, 2, 2), (1, 2, 2), (1, 2, 2)]  # timm's resnet50 is v1.5
    shapes = lambda m: [(n, tuple(p.shape)) for n, p in m.named_parameters()]
    assert shapes(v1) == shapes(v15)
    # 25.56 M at 1000 classes (the "25.6 M" the ResNet-50 papers state): 2048 * 990 + 990 fewer at 10 classes
    assert sum(p.numel() for p in v1.parameters()) == 25_557_032 - 2048 * 990 - 990


def test_v1_output_and_stage_shapes(v1):
    x = torch.zeros(2, 3, 224, 224)
    h = v1.maxpool(v1.act1(v1.bn1(v1.conv1(x))))
    sizes = []
    for stage in (v1.layer1, v1.layer2, v1.layer3, v1.layer4):
        h = stage(h)
        sizes.append(tuple(h.shape[1:]))
    # conv2_x 56x56x256, conv3_x 28x28x512, conv4_x 14x14x1024, conv5_x 7x7x2048 (He et al. Table 1)
    assert sizes == [(256, 56, 56), (512, 28, 28), (1024, 14, 14), (2048, 7, 7)]
    assert v1(x).shape == (2, 10)


def test_v1_zero_init_last_is_timms(v1):
    assert all(
        float(block.bn3.weight.abs().sum()) == 0.0
        for stage in (v1.layer1, v1.layer2, v1.layer3, v1.layer4)
        for block in stage
    )
