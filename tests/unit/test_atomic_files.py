"""``write_text_atomic``: the file is the new text whole or the old text whole, never a mix, and no temporary
file stays behind. The faults are real ones raised by Python and the kernel: a text the UTF-8 encoder refuses,
a file-size limit (``RLIMIT_FSIZE``) hit midway through the write, a rename onto a directory."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_lars.core.atomic_files import write_text_atomic

OLD = "old: a complete manifest\n" * 100
LONG = "n" * (1 << 20)  # 1 MiB: more than one buffered write
UNENCODABLE = "\udc80"  # a lone surrogate: UTF-8 refuses it


def folder_with_old_file(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    (folder / "manifest.txt").write_text(OLD)
    return folder / "manifest.txt"


def test_a_new_file_and_an_overwrite_hold_exactly_the_text_and_nothing_else_is_left(tmp_path):
    path = tmp_path / "config.yaml"
    write_text_atomic(path, "first\n")
    assert path.read_text() == "first\n"
    write_text_atomic(str(path), LONG)  # a str path too
    assert path.read_text() == LONG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_reader_that_opened_the_old_file_reads_it_whole(tmp_path):
    """A rename, not a rewrite in place: the old inode keeps the old text for whoever holds it open."""
    path = folder_with_old_file(tmp_path)
    with path.open() as reader:
        before = os.stat(path).st_ino
        write_text_atomic(path, LONG)
        assert reader.read() == OLD
    assert os.stat(path).st_ino != before
    assert path.read_text() == LONG


def test_a_text_the_encoder_refuses_leaves_the_old_file_and_no_temporary(tmp_path):
    text = LONG + UNENCODABLE
    # the control: Python's plain write_text opens (truncates) the file first, so the same fault empties it
    control = folder_with_old_file(tmp_path / "control")
    with pytest.raises(UnicodeEncodeError):
        control.write_text(text)
    assert control.read_text() != OLD

    path = folder_with_old_file(tmp_path)
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, text)
    assert path.read_text() == OLD
    assert [p.name for p in path.parent.iterdir()] == ["manifest.txt"]


def test_a_file_size_limit_hit_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    """In a child process with ``RLIMIT_FSIZE`` at 64 KiB (SIGXFSZ ignored, so write() fails with EFBIG).
    The control, a plain write of the same text under the same limit, shows the fault comes midway: 64 KiB
    on disk."""
    path = folder_with_old_file(tmp_path)
    control = tmp_path / "control.txt"
    child = f"""
import errno, resource, signal, sys
from pathlib import Path
from lightning_lars.core.atomic_files import write_text_atomic
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
try:
    Path({str(control)!r}).write_text("x" * (1 << 20))
except OSError as error:
    assert error.errno == errno.EFBIG, error
try:
    write_text_atomic({str(path)!r}, "x" * (1 << 20))
except OSError as error:
    sys.exit(error.errno)
"""
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == errno.EFBIG, done.stderr[-2000:]
    assert control.stat().st_size == 64 * 1024
    assert path.read_text() == OLD
    assert [p.name for p in path.parent.iterdir()] == ["manifest.txt"]


def test_a_rename_that_fails_removes_the_temporary(tmp_path):
    """The target is a directory: the kernel refuses to rename a file over it, after the text was written."""
    target = tmp_path / "outputs"
    target.mkdir()
    (target / "kept").write_text("inside")
    with pytest.raises(IsADirectoryError):
        write_text_atomic(target, "would replace a folder")
    assert target.is_dir() and (target / "kept").read_text() == "inside"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs"]


def test_a_missing_folder_fails_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_text_atomic(tmp_path / "absent" / "file.txt", "text")
    assert list(tmp_path.iterdir()) == []
