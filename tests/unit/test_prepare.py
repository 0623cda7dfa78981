"""ImageFolder -> FFCV conversion: labels, counts, bad files, bad trees, atomic output."""

import json
import subprocess
from importlib import metadata

import numpy as np
import pytest
from ffcv.reader import Reader
from PIL import Image

from lightning_lars.core.errors import UserError
from lightning_lars.data import beton_writer
from lightning_lars.data.prepare import convert, main

FAST = {"num_workers": 1, "progress": False, "page_size": 1 << 21}  # 1 process, 2 MiB pages: tiny files


def _write_jpeg(path, size=(20, 12), seed=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)
    return path


def _tree(root, counts, split="train", size=(20, 12)):
    """``counts``: {class name: number of JPEGs}; returns the paths written."""
    paths = []
    for class_index, (name, count) in enumerate(counts.items()):
        for index in range(count):
            paths.append(
                _write_jpeg(root / split / name / f"{index}.JPEG", size, seed=class_index * 100 + index)
            )
    return paths


def _labels(beton):
    reader = Reader(str(beton))
    return reader.metadata[reader.metadata.dtype.names[reader.field_names.index("label")]].tolist()


def _image_meta(beton):
    reader = Reader(str(beton))
    return reader.metadata[reader.metadata.dtype.names[reader.field_names.index("image")]], reader


def test_labels_follow_sorted_train_classes_and_counts_match(tmp_path):
    src = tmp_path / "src"
    _tree(src, {"zebra": 2, "apple": 3, "mango": 1}, size=(40, 24))  # created unsorted on purpose
    _tree(src, {"mango": 2, "zebra": 1}, split="val")  # val may lack a class; labels still from train
    manifest = convert(src, tmp_path / "out", max_resolution=16, write_mode="jpg", **FAST)

    assert manifest["classes"] == ["apple", "mango", "zebra"]
    assert _labels(tmp_path / "out" / "train.beton") == [0, 0, 0, 1, 2, 2]
    assert _labels(tmp_path / "out" / "val.beton") == [1, 1, 2]
    assert manifest["splits"]["train"]["num_images"] == 6 and manifest["splits"]["val"]["num_images"] == 3
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest
    # pip's version, not ffcv.__version__'s 0.0.3rc1
    assert manifest["writer"]["ffcv_version"] == metadata.version("ffcv")
    images, _ = _image_meta(tmp_path / "out" / "train.beton")
    assert images["width"].max() == 16 and images["height"].max() <= 16  # 40x24 shrunk to the 16 px bound
    assert set(images["mode"].tolist()) == {0}  # FFCV mode 0 = jpg


def test_raw_mode_stores_decoded_pixels_exactly(tmp_path):
    src = tmp_path / "src"
    (path,) = _tree(src, {"only": 1}, size=(10, 6))
    convert(src, tmp_path / "out", max_resolution=64, write_mode="raw", splits=("train",), **FAST)
    images, _ = _image_meta(tmp_path / "out" / "train.beton")
    assert (images["mode"][0], images["height"][0], images["width"][0]) == (1, 6, 10)  # 1 = raw, no resize
    stored = np.fromfile(
        tmp_path / "out" / "train.beton", dtype=np.uint8, count=6 * 10 * 3, offset=int(images["data_ptr"][0])
    ).reshape(6, 10, 3)
    np.testing.assert_array_equal(stored, np.asarray(Image.open(path).convert("RGB")))


def test_proportion_mode_choices_repeat_across_runs(tmp_path):
    src = tmp_path / "src"
    _tree(src, {"a": 12, "b": 12})
    modes = []
    for run in range(2):
        convert(src, tmp_path / f"out{run}", splits=("train",), **FAST)
        modes.append(_image_meta(tmp_path / f"out{run}" / "train.beton")[0]["mode"].tolist())
    assert modes[0] == modes[1]
    assert 0 < sum(modes[0]) < 24  # compress_probability 0.5: some raw (1) and some jpg (0)


def _bad_files(src):
    good = _tree(src, {"cat": 2, "dog": 2})
    truncated = src / "train" / "cat" / "truncated.JPEG"
    truncated.write_bytes(good[0].read_bytes()[: good[0].stat().st_size // 2])
    corrupt = src / "train" / "dog" / "corrupt.JPEG"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4)  # JPEG magic, then garbage
    text = src / "train" / "dog" / "notes.txt"
    text.write_text("not an image\n")
    stray = src / "train" / "README"
    stray.write_text("outside any class folder\n")
    (src / "train" / "cat" / ".DS_Store").write_bytes(b"\0\0")  # hidden files are ignored silently
    # any decodable format counts
    Image.new("RGB", (8, 8), (1, 2, 3)).save(src / "train" / "dog" / "fine.png")
    return [truncated, corrupt, text, stray]


def test_undecodable_files_are_skipped_counted_and_listed(tmp_path, capsys):
    src = tmp_path / "src"
    bad = _bad_files(src)
    manifest = convert(src, tmp_path / "out", splits=("train",), **FAST)

    assert manifest["splits"]["train"] == {"num_images": 5, "num_skipped": 4, "empty_classes": []}
    assert sorted(entry["path"] for entry in manifest["skipped"]) == sorted(str(path) for path in bad)
    assert _labels(tmp_path / "out" / "train.beton") == [0, 0, 1, 1, 1]
    err = capsys.readouterr().err
    assert "skipped 4 entries (each with its reason)" in err and all(str(path) in err for path in bad)


def test_strict_fails_on_first_undecodable_file_naming_it(tmp_path):
    src = tmp_path / "src"
    _bad_files(src)
    (src / "train" / "README").unlink()
    with pytest.raises(UserError, match=r"cannot decode .*truncated\.JPEG"):
        convert(src, tmp_path / "out", splits=("train",), strict=True, **FAST)
    assert not (tmp_path / "out" / "train.beton").exists()


def test_empty_class_keeps_its_label_and_is_reported(tmp_path, capsys):
    src = tmp_path / "src"
    _tree(src, {"a": 1, "c": 1})
    (src / "train" / "b").mkdir()
    manifest = convert(src, tmp_path / "out", splits=("train",), **FAST)
    assert manifest["classes"] == ["a", "b", "c"]
    assert _labels(tmp_path / "out" / "train.beton") == [0, 2]
    assert manifest["splits"]["train"]["empty_classes"] == ["b"]
    assert "1 empty class folder(s): b" in capsys.readouterr().err
    with pytest.raises(UserError, match="empty class folder"):
        convert(src, tmp_path / "strict", splits=("train",), strict=True, **FAST)


@pytest.mark.parametrize(
    "layout, message",
    [
        ("missing", "does not exist"),
        ("no_train", "no train/ folder"),
        ("val_only_class", "missing from train/: ghost"),
        ("no_val", "no val/ folder"),
    ],
)
def test_bad_trees_raise_one_line_user_errors(tmp_path, layout, message):
    src = tmp_path / "src"
    if layout == "no_train":
        _tree(src, {"a": 1}, split="val")
    elif layout == "val_only_class":
        _tree(src, {"a": 1})
        _tree(src, {"ghost": 1}, split="val")
    elif layout == "no_val":
        _tree(src, {"a": 1})
    with pytest.raises(UserError, match=message) as caught:
        convert(src, tmp_path / "out", **FAST)
    assert "\n" not in str(caught.value)


def test_cli_prints_one_line_error_and_exits_2(tmp_path, capsys):
    assert main(["--src", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: source folder") and err.count("\n") == 1


def test_invalid_settings_are_user_errors(tmp_path):
    _tree(tmp_path / "src", {"a": 1})
    for bad in (
        {"write_mode": "png"},
        {"write_mode": "smart"},
        {"jpeg_quality": 0},
        {"compress_probability": 1.5},
        {"max_resolution": 2},
    ):
        with pytest.raises(UserError):
            convert(tmp_path / "src", tmp_path / "out", splits=("train",), **{**FAST, **bad})


def test_failed_write_leaves_previous_outputs_untouched_and_no_temporaries(tmp_path, monkeypatch):
    src = tmp_path / "src"
    _tree(src, {"a": 4, "b": 4})
    _tree(src, {"a": 1, "b": 1}, split="val")
    out = tmp_path / "out"
    convert(src, out, **FAST)
    before = {name: (out / name).read_bytes() for name in ("train.beton", "val.beton", "manifest.json")}
    _tree(src, {"a": 8}, size=(30, 30))  # new content, so a finished rewrite would differ

    def fail_midway(self, index):  # runs in FFCV's writer process, as a disk or decode failure would
        if index == 5:
            raise OSError("simulated failure while writing")
        return original(self, index)

    original = beton_writer.LabelledImages.__getitem__
    monkeypatch.setattr(beton_writer.LabelledImages, "__getitem__", fail_midway)
    with pytest.raises(RuntimeError, match="writer process exited"):
        convert(src, out, **FAST)
    assert {name: (out / name).read_bytes() for name in before} == before
    assert list(out.glob("*.tmp-*")) == []


def test_temporaries_of_dead_processes_are_removed(tmp_path):
    _tree(tmp_path / "src", {"a": 1})
    finished = subprocess.Popen(["true"])
    finished.wait()
    stale = tmp_path / "out" / f"train.beton.tmp-{finished.pid}"
    stale.parent.mkdir()
    stale.write_bytes(b"half a file")
    convert(tmp_path / "src", tmp_path / "out", splits=("train",), **FAST)
    assert not stale.exists() and (tmp_path / "out" / "train.beton").exists()


def test_page_grows_to_fit_a_large_raw_image(tmp_path):
    _tree(tmp_path / "src", {"a": 1}, size=(1000, 800))  # 2.4 MB raw > the 2 MiB minimum page
    convert(
        tmp_path / "src", tmp_path / "out", max_resolution=None, write_mode="raw", splits=("train",), **FAST
    )
    images, reader = _image_meta(tmp_path / "out" / "train.beton")
    assert (images["width"][0], images["height"][0]) == (1000, 800) and reader.page_size == 1 << 22
