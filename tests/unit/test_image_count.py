"""The pre-torch count of an image folder's train images, the size the run is planned at, equals what
torchvision's ImageFolder (the datamodule's dataset, the oracle) finds in the same real files."""

from __future__ import annotations

from omegaconf import OmegaConf
from PIL import Image
from torchvision import datasets

from lightning_lars.data.image_count import count_train_images


def test_an_image_folder_is_counted_as_imagefolder_counts_it(tmp_path):
    layout = {"a": ["1.jpg", "2.PNG", "notes.txt"], "b": ["deep/3.jpeg", "4.webp"], "c": []}
    for label, names in layout.items():
        (tmp_path / "train" / label).mkdir(parents=True)
        for name in names:
            path = tmp_path / "train" / label / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".txt"):
                path.write_text("not an image")
            else:
                Image.new("RGB", (4, 4)).save(path, format="PNG")
    cfg = OmegaConf.create({"data": {"_target_": "x.TorchvisionDataModule", "root": str(tmp_path)}})
    found = len(datasets.ImageFolder(str(tmp_path / "train"), allow_empty=True))
    assert count_train_images(cfg) == found == 4


def test_synthetic_data_is_planned_at_the_size_it_stands_for():
    cfg = OmegaConf.create({"data": {"_target_": "x.SyntheticDataModule", "num_train_images": 5000}})
    assert count_train_images(cfg) == 5000
    assert count_train_images(OmegaConf.create({"data": {"_target_": "x.Mine"}})) is None
