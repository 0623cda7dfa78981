"""An image folder with a bad file, as ImageNet trees met on clusters have them: a class folder without an image
is one line when the run starts (torchvision's own words), and a JPEG cut short, found only when a loader worker
reaches it, stops the run with one line naming the file and how to go on, on both decode paths. The oracles:
PIL and libjpeg-turbo refusing the truncated file, torch's DataLoader re-raising from a real worker process."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from lightning_lars.core.errors import UserError
from lightning_lars.data import pipelines
from lightning_lars.data.checks import UnreadableImage
from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule


def image_tree(root, per_class: int = 4):
    """``root/{train,val}/{a,b}/<n>.JPEG``: plain 40 x 32 px JPEGs, a colour a class."""
    for split in ("train", "val"):
        for label, colour in (("a", (200, 40, 40)), ("b", (40, 40, 200))):
            (root / split / label).mkdir(parents=True)
            for index in range(per_class):
                shade = tuple(min(255, c + 10 * index) for c in colour)
                Image.new("RGB", (40, 32), shade).save(root / split / label / f"{index}.JPEG", quality=90)
    return root


def cut_short(path) -> None:
    """The file's first half only, as a copy that died leaves it: the header reads, the pixels do not."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def module(root, decode: str, workers: int) -> TorchvisionDataModule:
    return TorchvisionDataModule(
        root,
        num_classes=2,
        batch_size=8,  # the whole train split: every file is read in the first batch
        num_workers=workers,
        resolution=24,
        val_resolution=24,
        seed=0,
        decode=decode,
        pipeline=pipelines.DEFAULT_PIPELINE,
        pin_memory=False,
    )


def test_a_class_folder_without_an_image_is_one_line_naming_it(tmp_path):
    root = image_tree(tmp_path)
    (root / "train" / "c_empty").mkdir()
    with pytest.raises(UserError) as raised:
        module(root, "cpu", 0).num_train_images  # noqa: B018 -- what build asks first
    message = str(raised.value)
    assert "c_empty" in message and "add images there or remove the folder" in message
    assert "\n" not in message


@pytest.mark.parametrize("decode", ["cpu", "device"])
@pytest.mark.parametrize("workers", [0, 1])  # 1: raised in a worker process, re-raised by torch's DataLoader
def test_a_truncated_jpeg_stops_the_run_with_one_line_naming_the_file(tmp_path, decode, workers):
    root = image_tree(tmp_path)
    bad = root / "train" / "b" / "2.JPEG"
    cut_short(bad)
    with pytest.raises(OSError), Image.open(bad) as image:  # PIL's own verdict on the file
        image.load()
    datamodule = module(root, decode, workers)
    with pytest.raises(UnreadableImage) as raised:
        for batch in datamodule.train_dataloader():
            datamodule.transfer_batch_to_device(batch, torch.device("cpu"), 0)
    message = str(raised.value)
    assert message.startswith(f"{bad} does not decode (") and "\n" not in message, message
    assert message.endswith(
        "then resume with run.ckpt_path=last (make prepare decodes every image before a run)"
    )
