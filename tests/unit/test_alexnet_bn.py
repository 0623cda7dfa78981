"""AlexNet-BN is a timm model like any other: created by name, BN where LRN was, usable by ImageClassifier."""

import functools

import pytest
import timm
import torch
from torch import nn

import lightning_lars.models  # noqa: F401  (registers alexnet_bn)
from lightning_lars.training.module import ImageClassifier


def test_created_by_name_with_the_alexnet_layout():
    model = timm.create_model("alexnet_bn", num_classes=1000)
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [96, 256, 384, 384, 256]
    assert [(c.kernel_size, c.stride) for c in convs[:2]] == [((11, 11), (4, 4)), ((5, 5), (1, 1))]
    kinds = [type(m).__name__ for m in model.features]
    # BN right after conv1 and conv2, where AlexNet had its LRN layers; none after conv3-5
    assert kinds[:3] == ["Conv2d", "BatchNorm2d", "ReLU"] and kinds[4:7] == ["Conv2d", "BatchNorm2d", "ReLU"]
    assert kinds.count("BatchNorm2d") == 2
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(9216, 4096), (4096, 4096), (4096, 1000)]
    expected = sum(c.weight.numel() + (c.bias.numel() if c.bias is not None else 0) for c in convs)
    expected += 2 * (96 + 256) + sum(m.weight.numel() + m.bias.numel() for m in linears)
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize("size", [64, 224])
def test_forward_at_small_and_imagenet_resolution(size):
    model = timm.create_model("alexnet_bn", num_classes=7)
    assert model(torch.randn(2, 3, size, size)).shape == (2, 7)
    assert model.forward_features(torch.randn(2, 3, size, size)).shape == (2, 256, 6, 6)


def test_reset_classifier_and_pretrained_refused():
    model = timm.create_model("alexnet_bn")
    model.reset_classifier(10)
    assert model.get_classifier().out_features == 10
    with pytest.raises(ValueError, match="no pretrained"):
        timm.create_model("alexnet_bn", pretrained=True)


def test_image_classifier_trains_it_with_fc_init():
    module = ImageClassifier(
        "alexnet_bn",
        5,
        optimizer=functools.partial(torch.optim.SGD, momentum=0.9),
        lr_schedule=lambda step: 0.01,
        exclusion_rule="none",
        fc_init_std=0.01,
    )
    fc = module.model.get_classifier()
    assert abs(fc.weight.std().item() - 0.01) < 0.002 and fc.bias.abs().sum() == 0
    optimizer = module.configure_optimizers()
    before = module.model.features[0].weight.detach().clone()
    loss = torch.nn.functional.cross_entropy(module(torch.randn(4, 3, 64, 64)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    optimizer.step()
    assert not torch.equal(before, module.model.features[0].weight)
