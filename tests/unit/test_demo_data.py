"""The demo dataset: deterministic bytes, balanced classes, no shortcut through colour, idempotent prepare."""

import numpy as np
import pytest
from PIL import Image

from lightning_lars.core.errors import UserError
from lightning_lars.data.demo import make_demo_images, prepare_demo
from lightning_lars.data.demo_shapes import MAX_CLASSES, class_names, draw_image


def _all_bytes(root):
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*.JPEG"))}


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        make_demo_images(
            tmp_path / name, num_classes=3, train_per_class=2, val_per_class=1, size=24, seed=seed
        )
    first, again, other = (_all_bytes(tmp_path / name) for name in "abc")
    assert len(first) == 9 and first == again
    assert first.keys() == other.keys() and all(first[key] != other[key] for key in first)


def test_classes_balanced_real_jpegs_of_requested_size(tmp_path):
    names = make_demo_images(tmp_path, num_classes=4, train_per_class=3, val_per_class=2, size=40)
    assert names == class_names(4)
    for split, count in (("train", 3), ("val", 2)):
        assert sorted(p.name for p in (tmp_path / split).iterdir()) == sorted(names)
        for name in names:
            files = sorted((tmp_path / split / name).iterdir())
            assert len(files) == count
            with Image.open(files[0]) as image:
                assert (image.format, image.mode, image.size) == ("JPEG", "RGB", (40, 40))


def test_class_is_not_given_by_mean_colour():
    """A nearest-class-mean classifier on mean RGB must stay near chance (10%) on fresh images."""
    names = class_names(10)

    def mean_colours(first_index):
        return np.array(
            [
                [
                    draw_image(name, 32, np.random.default_rng([9, c, first_index + i])).mean((0, 1))
                    for i in range(30)
                ]
                for c, name in enumerate(names)
            ]
        )  # (class, image, rgb)

    class_means = mean_colours(0).mean(1)
    test = mean_colours(1000)
    distances = ((test[:, :, None, :] - class_means[None, None]) ** 2).sum(-1)
    accuracy = (distances.argmin(-1) == np.arange(10)[:, None]).mean()
    assert accuracy < 0.3


def test_shapes_differ_between_classes_with_same_nuisances():
    """Same RNG stream (colour, size, pose) but another class: the pixels must change."""
    images = [draw_image(name, 32, np.random.default_rng(7)) for name in class_names(MAX_CLASSES)]
    for i in range(len(images)):
        for j in range(i + 1, len(images)):
            assert np.abs(images[i].astype(int) - images[j].astype(int)).mean() > 1.0


@pytest.mark.parametrize("num_classes", [1, MAX_CLASSES + 1])
def test_num_classes_out_of_range_is_a_user_error(num_classes):
    with pytest.raises(UserError, match="num_classes"):
        class_names(num_classes)


def test_prepare_demo_converts_once_then_is_a_no_op(tmp_path, capsys):
    settings = {
        "num_classes": 3,
        "train_per_class": 4,
        "val_per_class": 2,
        "size": 24,
        "num_workers": 1,
        "progress": False,
    }
    manifest = prepare_demo(tmp_path, **settings)
    assert manifest["splits"]["train"]["num_images"] == 12 and manifest["splits"]["val"]["num_images"] == 6
    beton_bytes = (tmp_path / "train.beton").read_bytes()

    assert prepare_demo(tmp_path, **settings) is None
    assert "already complete" in capsys.readouterr().out

    changed = prepare_demo(tmp_path, **{**settings, "train_per_class": 5})  # other parameters: redone
    assert changed["splits"]["train"]["num_images"] == 15 and changed["demo"]["train_per_class"] == 5
    assert prepare_demo(tmp_path, **{**settings, "train_per_class": 5}, force=True) is not None
    assert (tmp_path / "train.beton").read_bytes() != beton_bytes
