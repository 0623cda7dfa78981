"""End to end: generate demo JPEGs -> prepare (FFCV writer) -> read back with an FFCV Loader."""

import numpy as np
import pytest
import torch
from PIL import Image

from lightning_lars.data.demo import prepare_demo
from lightning_lars.data.prepare import convert

pytestmark = pytest.mark.slow


def _read_all(beton):
    from ffcv.fields.decoders import IntDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import Squeeze, ToTensor

    loader = Loader(
        str(beton),
        batch_size=16,
        num_workers=1,
        order=OrderOption.SEQUENTIAL,
        drop_last=False,
        pipelines={
            "image": [SimpleRGBImageDecoder(), ToTensor()],
            "label": [IntDecoder(), ToTensor(), Squeeze()],
        },
    )
    images, labels = zip(*((x.clone(), y.clone()) for x, y in loader))
    return torch.cat(images).numpy(), torch.cat(labels).numpy()


def _source_pixels(jpeg_root, split, manifest):
    """Source images in the order ``prepare`` writes them: sorted classes, sorted file names."""
    pixels = []
    for name in manifest["classes"]:
        for path in sorted((jpeg_root / split / name).iterdir()):
            pixels.append(np.asarray(Image.open(path).convert("RGB")))
    return np.stack(pixels)


def test_demo_generate_prepare_and_load_back(tmp_path):
    manifest = prepare_demo(
        tmp_path, num_classes=10, train_per_class=8, val_per_class=3, size=32, num_workers=2, progress=False
    )
    for split, per_class in (("train", 8), ("val", 3)):
        images, labels = _read_all(tmp_path / f"{split}.beton")
        assert images.shape == (10 * per_class, 32, 32, 3) and images.dtype == np.uint8
        np.testing.assert_array_equal(labels, np.repeat(np.arange(10), per_class))
        # The demo stores raw pixels: what the Loader returns is exactly what PIL decodes from the JPEGs.
        np.testing.assert_array_equal(images, _source_pixels(tmp_path / "jpeg", split, manifest))


def test_jpeg_stored_images_decode_close_to_source(tmp_path):
    prepare_demo(
        tmp_path / "demo",
        num_classes=3,
        train_per_class=5,
        val_per_class=1,
        size=32,
        num_workers=1,
        progress=False,
    )
    manifest = convert(
        tmp_path / "demo" / "jpeg",
        tmp_path / "jpg",
        max_resolution=32,
        write_mode="jpg",
        jpeg_quality=95,
        num_workers=1,
        progress=False,
        page_size=1 << 21,
        splits=("train",),
    )
    images, labels = _read_all(tmp_path / "jpg" / "train.beton")
    source = _source_pixels(tmp_path / "demo" / "jpeg", "train", manifest)
    np.testing.assert_array_equal(labels, np.repeat(np.arange(3), 5))
    # Re-encoded at quality 95 and decoded by FFCV's libjpeg-turbo: close, not equal (8-bit grey levels).
    assert np.abs(images.astype(int) - source.astype(int)).mean() < 4.0
