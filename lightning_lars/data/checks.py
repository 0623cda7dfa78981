"""Input files checked before Hydra, Lightning or W&B start, so a bad one is the only line the user sees."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from lightning_lars.core.errors import UserError
from lightning_lars.core.extras import needs_ffcv, require_ffcv

# not from ffcv_datamodule: importing FFCV takes ~10 s, and these checks run before anything heavy
from lightning_lars.data import integrity
from lightning_lars.data.beton_header import read_num_samples

FFCV_DATA = (
    "the FFCV DataModule (this recipe's data)",
    "train from image folders with data=imagefolder data.root=DIR, or time the model alone with data=synthetic",
)


def check_dataset(cfg: DictConfig) -> None:
    """FFCV installed when the data config needs it; a missing, truncated or foreign ``.beton`` named by the data
    config (a changed region: `lightning_lars.data.integrity`): one-line `UserError` naming the command that makes
    it (the data config's ``prepare_command``); a
    ``data.num_classes`` that disagrees with the prepared data's ``manifest.json``: one line naming the value to
    set. An image-folder config (``data.root``): both split folders there, and as many class folders as
    ``data.num_classes``. Other data configs (synthetic) pass."""
    data = cfg.get("data") or {}
    if not needs_ffcv(data.get("_target_")) and plain_value(data, "root"):
        if plain_value(data, "no_aug_from_epoch") is not None:
            raise UserError(no_aug_message(data.no_aug_from_epoch))
        command = command_for(Path(data.root), plain_value(data, "prepare_command"))
        check_image_folder(Path(data.root), data.get("num_classes"), command)
        return
    ffcv_data = needs_ffcv(data.get("_target_"))
    if ffcv_data and not _installed("ffcv"):  # not installed: said first, as `make prepare` needs FFCV too
        require_ffcv(*FFCV_DATA)
    paths = [plain_value(data, key) for key in ("train_path", "val_path")]
    betons = [path for path in paths if isinstance(path, str) and path.endswith(".beton")]
    prepare_command = plain_value(data, "prepare_command")
    rebuild = {}
    for path in betons:
        command = command_for(Path(path).parent, prepare_command)
        rebuild[Path(path)] = command or PREPARE.format(out=Path(path).parent)
        read_num_samples(path, rebuild[Path(path)])
    # same-size damage (a bad block, a torn copy): the sizes and checksums recorded when the files were written
    for warning in integrity.start_check(list(rebuild), rebuild):
        print(warning, file=sys.stderr, flush=True)
    if betons and isinstance(num_classes := plain_value(data, "num_classes"), int):
        check_num_classes(Path(betons[0]).parent / integrity.MANIFEST_NAME, num_classes)
    # Installed but broken (a missing libturbojpeg, say) shows only on import, which costs ~9 s on 2 cores with
    # numba: after the file checks, which need no FFCV.
    if ffcv_data:
        require_ffcv(*FFCV_DATA)


PREPARE = "make prepare src=<imagefolder> out={out}"


def command_for(folder: Path, command: str | None) -> str | None:
    """The data config's ``prepare_command`` where it writes ``folder`` (its ``out=``, or a folder inside it);
    None for a path of the user's own elsewhere, which that command (`make demo-data`, say) would never fill."""
    out = re.search(r"\bout=(\S+)", command or "")
    if out and Path(os.path.abspath(folder)).is_relative_to(os.path.abspath(out.group(1))):
        return command
    return None


def plain_value(data, key: str):
    """``data[key]`` when it resolves without Hydra's runtime (else None: the DataModule checks it later)."""
    try:
        return data.get(key)
    except OmegaConfBaseException:
        return None


def no_aug_message(epoch) -> str:
    return (
        f"data.no_aug_from_epoch={epoch} (train without crop and flip from that epoch) needs the FFCV loader:"
        " use data=imagenet, or set data.no_aug_from_epoch=null"
    )


def missing_folder_message(folder: Path, prepare_command: str | None) -> str:
    fix = f"prepare it with {prepare_command}" if prepare_command else f"expected {folder}/<class>/<image>"
    return f"image folder {folder} not found: {fix}"


def classes_message(folder: Path, found: int, num_classes: int) -> str:
    return f"data.num_classes={num_classes} but {folder} has {found} classes: set data.num_classes={found}"


def check_image_folder(root: Path, num_classes, prepare_command: str | None) -> None:
    """``root/train`` and ``root/val`` exist, and ``root/train`` has ``num_classes`` class folders (as ImageFolder
    counts them: every sub-folder). Before any import, so the mistake is the only line the user sees."""
    for split in ("train", "val"):
        if not (root / split).is_dir():
            raise UserError(missing_folder_message(root / split, prepare_command))
    found = sum(1 for entry in os.scandir(root / "train") if entry.is_dir())
    if isinstance(num_classes, int) and found != num_classes:
        raise UserError(classes_message(root / "train", found, num_classes))


# what PIL raises for a truncated, corrupt or foreign file (UnidentifiedImageError is an OSError)
PIL_DECODE_ERRORS = (OSError, SyntaxError, ValueError)


class UnreadableImage(UserError):
    """An image file of the image folder that does not decode, met while training: its path and the fix in one
    line (``make prepare`` decodes every image before a run; a loader that reads the folder meets one only when
    it gets there). Raised in a DataLoader worker, it comes back through torch's ``ExceptionWrapper.reraise``,
    which builds it again from the worker's whole traceback: only that text's last line, its own, is kept."""

    def __init__(self, message: str):
        # torch's "Caught UnreadableImage in DataLoader worker ...\nOriginal Traceback ...": the last line is ours
        if "\nOriginal Traceback" in message:
            message = message.rstrip().splitlines()[-1].split(": ", 1)[-1]
        super().__init__(message)


def unreadable_image(path: str, reason: object) -> UnreadableImage:
    return UnreadableImage(
        f"{path} does not decode ({reason}): replace or remove it, then resume with run.ckpt_path=last"
        " (make prepare decodes every image before a run)"
    )


def _installed(name: str) -> bool:
    """Whether an import system finds the package, without importing it (an import hook may raise instead)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def check_num_classes(manifest_path: Path, num_classes: int) -> None:
    """Labels beyond ``num_classes`` would be an IndexError deep in the loss; a narrower label set wastes logits
    silently. Both are a one-line error here. No manifest (a .beton made elsewhere): nothing to compare."""
    try:
        prepared = json.loads(manifest_path.read_text()).get("num_classes")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(prepared, int) and prepared != num_classes:
        raise UserError(
            f"data.num_classes={num_classes} but the prepared data in {manifest_path.parent} has"
            f" {prepared} classes ({manifest_path.name}): set data.num_classes={prepared}"
        )
