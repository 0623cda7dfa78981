"""Pipeline configs: MLPerf aug is expressible; orders on which FFCV hangs are refused with the fix."""

import numpy as np
import pytest
import torch
from ffcv.fields.rgb_image import CenterCropRGBImageDecoder, RandomResizedCropRGBImageDecoder
from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToDevice, ToTensor, ToTorchImage

from lightning_lars.core.errors import UserError
from lightning_lars.data import ffcv_ops, pipelines

CPU = torch.device("cpu")
MLPERF_TRAIN = [
    {"random_resized_crop": {"scale": [0.05, 1.0], "ratio": [0.75, 1.33]}},
    "flip",
    {"normalize": "imagenet"},
    "to_tensor",
    "to_device",
    "channels_last",
]
MLPERF_EVAL = [{"center_crop": {"ratio": 224 / 256}}, {"normalize": "imagenet"}, "to_tensor", "channels_last"]
GPU_LAYOUT = [
    {"random_resized_crop": None},
    "flip",
    "to_tensor",
    "to_device",
    "channels_last",
    {"normalize": "imagenet"},
]


def test_mlperf_train_aug_builds_the_ffcv_ops():
    ops = ffcv_ops.build_image_ops(pipelines.parse_pipeline("train", MLPERF_TRAIN), 224, CPU)
    decoder, flip, normalize, to_tensor, to_image = ops  # to_device: nothing to do on CPU
    assert isinstance(decoder, RandomResizedCropRGBImageDecoder)
    assert decoder.output_size == (224, 224)
    assert decoder.scale == (0.05, 1.0) and decoder.ratio == (0.75, 1.33)
    assert isinstance(flip, RandomHorizontalFlip) and isinstance(normalize, NormalizeImage)
    assert isinstance(to_tensor, ToTensor) and isinstance(to_image, ToTorchImage) and to_image.channels_last


def test_mlperf_eval_is_resize_256_center_224():
    ops = ffcv_ops.build_image_ops(pipelines.parse_pipeline("val", MLPERF_EVAL), 224, CPU)
    assert isinstance(ops[0], CenterCropRGBImageDecoder)
    assert ops[0].ratio == pytest.approx(0.875) and ops[0].output_size == (224, 224)


def test_cuda_variant_copies_uint8_without_blocking_and_normalises_after_transfer():
    ops = pipelines.parse_pipeline("train", GPU_LAYOUT)
    built = ffcv_ops.build_image_ops(ops, 176, torch.device("cuda", 0))  # building needs no GPU
    assert [type(op) for op in built] == [
        RandomResizedCropRGBImageDecoder,
        RandomHorizontalFlip,
        ToTensor,
        ToDevice,
        ToTorchImage,
    ]
    assert built[3].non_blocking and built[3].device == torch.device("cuda", 0)
    assert isinstance(pipelines.post_transfer_normalize(ops), pipelines.TorchNormalize)
    assert pipelines.post_transfer_normalize(pipelines.parse_pipeline("train", MLPERF_TRAIN)) is None


def test_torch_normalize_matches_imagenet_stats_and_keeps_channels_last():
    images = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8).contiguous(
        memory_format=torch.channels_last
    )
    normalized = pipelines.TorchNormalize(pipelines.IMAGENET_MEAN, pipelines.IMAGENET_STD)(images)
    expected = (images.float() / 255 - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor(
        [0.229, 0.224, 0.225]
    ).view(1, 3, 1, 1)
    assert torch.allclose(normalized, expected, atol=1e-5)
    assert normalized.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        # FFCV 1.0.2 loops forever in Graph.group_operations: a jitted op after ToTensor on a CPU pipeline
        (["center_crop", "to_tensor", "flip", {"normalize": "imagenet"}, "channels_last"], "hangs"),
        (["center_crop", "to_tensor", {"normalize": "imagenet"}, "channels_last"], "hangs"),
        (["center_crop", {"normalize": "imagenet"}, "to_tensor", "channels_last", "flip"], "hangs"),
    ],
)
def test_orders_that_would_hang_ffcv_are_refused_with_the_order_to_use(entries, message):
    with pytest.raises(UserError, match=message) as error:
        pipelines.parse_pipeline("train", entries)
    assert "before to_tensor" in str(error.value)


def test_built_op_guard_refuses_normalize_image_after_to_tensor():
    # NormalizeImage after ToTensor/ToTorchImage (FFCV 1.0.2 hangs on it), as a caller outside the config path
    # could build it.
    ops = [
        CenterCropRGBImageDecoder((32, 32), 0.875),
        ToTensor(),
        ToTorchImage(),
        NormalizeImage(np.zeros(3), np.ones(3), np.float32),
    ]
    with pytest.raises(UserError, match="NormalizeImage .* after ToTensor"):
        ffcv_ops.check_ffcv_op_order(ops)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            ["flip", "center_crop", {"normalize": "imagenet"}, "to_tensor", "channels_last"],
            "start with a decoder",
        ),
        (["center_crop", "to_tensor", "channels_last"], "no normalize"),
        (["center_crop", {"normalize": "imagenet"}, "to_tensor"], "channels_last"),
        (["center_crop", {"normalize": "imagenet"}, "channels_last", "to_tensor"], "needs a tensor"),
        (
            ["center_crop", {"normalize": "imagenet"}, "to_tensor", "channels_last", "to_device"],
            "only normalize",
        ),
        (["center_crop", "rotate", {"normalize": "imagenet"}, "to_tensor", "channels_last"], "unknown op"),
        ([{"center_crop": {"size": 3}}, {"normalize": "imagenet"}, "to_tensor", "channels_last"], "takes"),
        (["center_crop", {"normalize": "cifar"}, "to_tensor", "channels_last"], "stats"),
        ([], "non-empty"),
    ],
)
def test_bad_configs_name_the_fix(entries, message):
    with pytest.raises(UserError, match=message):
        pipelines.parse_pipeline("train", entries)


def test_without_augmentation_uses_the_val_crop_and_drops_flip():
    train = pipelines.parse_pipeline("train", MLPERF_TRAIN)
    plain = pipelines.without_augmentation(train, pipelines.parse_pipeline("val", MLPERF_EVAL))
    assert [op.name for op in plain] == [
        "center_crop",
        "normalize",
        "to_tensor",
        "to_device",
        "channels_last",
    ]
    assert plain[0].args["ratio"] == pytest.approx(0.875)
    pipelines.parse_pipeline("train", [{op.name: dict(op.args)} for op in plain])  # still a valid pipeline


def write_image_folder(root, num_classes=2, per_class=3):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label in range(num_classes):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True)
            for index in range(per_class):
                pixels = rng.integers(0, 256, size=(int(rng.integers(40, 70)), int(rng.integers(40, 70)), 3))
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{index}.png")
    return root


def test_torchvision_baseline_applies_the_same_ops(tmp_path):
    from torchvision import transforms

    from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule, torchvision_transform

    train = torchvision_transform(pipelines.parse_pipeline("train", MLPERF_TRAIN), 176).transforms
    crop = train[0]
    assert isinstance(crop, transforms.RandomResizedCrop) and crop.size == (176, 176)
    assert crop.scale == (0.05, 1.0) and crop.ratio == (0.75, 1.33)
    assert isinstance(train[1], transforms.RandomHorizontalFlip)
    val = torchvision_transform(pipelines.parse_pipeline("val", MLPERF_EVAL), 224).transforms
    assert val[0].size == 256 and val[1].size == (224, 224)  # resize 256, centre crop 224

    module = TorchvisionDataModule(
        write_image_folder(tmp_path),
        num_classes=2,
        batch_size=4,
        num_workers=0,
        resolution=32,
        val_resolution=24,
        pipeline={"train": MLPERF_TRAIN, "val": MLPERF_EVAL},
    )
    assert (module.num_train_images, module.num_val_images) == (6, 6)
    images, labels = next(iter(module.train_dataloader()))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32 and labels.dtype == torch.int64
    assert len(module.train_dataloader()) == 1  # drop-last, as the FFCV train loader
    val_batches = list(module.val_dataloader())
    assert [tuple(batch[0].shape) for batch in val_batches] == [(4, 3, 24, 24), (2, 3, 24, 24)]
    # uniform noise normalised with ImageNet stats: mean near (127.5 - 124) / 58, far from raw 0-255 pixels
    assert abs(float(images.mean())) < 0.5 and float(images.abs().max()) < 3


def test_torchvision_baseline_refusals(tmp_path):
    from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule

    with pytest.raises(UserError, match="progressive resizing needs the FFCV loader"):
        TorchvisionDataModule(
            tmp_path, 2, resolution={"start": 160, "end": 192, "start_ramp_epoch": 0, "end_ramp_epoch": 3}
        )
    with pytest.raises(UserError, match="not found"):
        _ = TorchvisionDataModule(tmp_path, 2).num_train_images
    write_image_folder(tmp_path / "tree")
    with pytest.raises(UserError, match="has 2 classes: set data.num_classes=2"):
        _ = TorchvisionDataModule(tmp_path / "tree", 5).num_train_images
    with pytest.raises(UserError, match="no_aug_from_epoch=85 .* needs the FFCV loader"):
        TorchvisionDataModule(tmp_path / "tree", 2, no_aug_from_epoch=85)
    with pytest.raises(UserError, match="not found: prepare it with make demo-data out=x"):
        _ = TorchvisionDataModule(
            tmp_path / "none", 2, prepare_command="make demo-data out=x"
        ).num_train_images


def test_torch_normalize_copies_its_statistics_to_a_device_once():
    """A copy of mean/std from pageable host memory at every batch makes the host wait for the GPU.
    The meta device stands in for a GPU: a copy to it is a real ``aten::_to_copy``, seen by the profiler."""
    normalize = pipelines.TorchNormalize(pipelines.IMAGENET_MEAN, pipelines.IMAGENET_STD)
    images = torch.zeros((2, 3, 4, 4), dtype=torch.uint8, device="meta")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            assert normalize(images).device.type == "meta"
    copies = sum(
        event.name == "aten::_to_copy" and event.input_shapes[0] == [1, 3, 1, 1] for event in prof.events()
    )
    assert copies == 2  # mean and std, for the first batch only


def test_an_op_without_arguments_gets_torchvisions_defaults_in_every_loader():
    """The one table of defaults is torchvision's own (RandomResizedCrop's scale and ratio, RandomHorizontalFlip's
    p), and parsing fills it in, so the FFCV, torchvision and device-decode loaders read the same values; a given
    argument wins."""
    import inspect

    from torchvision import transforms

    crop = inspect.signature(transforms.RandomResizedCrop).parameters
    flip = inspect.signature(transforms.RandomHorizontalFlip).parameters
    default = pipelines.DEFAULT_PIPELINE
    assert default["train"][:2] == ["random_resized_crop", "flip"] and default["val"][0] == "center_crop"
    train = pipelines.parse_pipeline("train", default["train"])
    assert train[0].args == {"scale": crop["scale"].default, "ratio": crop["ratio"].default}
    assert train[1].args == {"prob": flip["p"].default}
    centre = pipelines.parse_pipeline("val", default["val"])[0]
    assert centre.args == {"ratio": 224 / 256}  # ffcv-imagenet's DEFAULT_CROP_RATIO
    given = [{"random_resized_crop": {"scale": [0.05, 1.0]}}, *default["train"][1:]]
    assert pipelines.parse_pipeline("train", given)[0].args == {
        "scale": [0.05, 1.0],
        "ratio": crop["ratio"].default,
    }
    ops = ffcv_ops.build_image_ops(train, 32, CPU, seed=None)
    assert (tuple(ops[0].scale), tuple(ops[0].ratio)) == (crop["scale"].default, crop["ratio"].default)
