"""Installing where users train: declared version ranges against the tested sets, FFCV optional, the recorded
set, the wheelhouse's platform tags, the synthetic DataModule."""

from __future__ import annotations

import platform
import subprocess
import sys
import tomllib

import packaging.tags
import pytest
import torch
from helpers import ROOT, benchmark_script, run
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from lightning_lars.data.synthetic import SyntheticDataModule
from lightning_lars.report import provenance

# benchmarks/wheelhouse.py: a script of the clone (make wheelhouse), not a module of the package
wheelhouse = benchmark_script("wheelhouse")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = [*PROJECT["optional-dependencies"]["ffcv"], *PROJECT["optional-dependencies"]["mlperf"]]
DECLARED = [Requirement(r) for r in [*PROJECT["dependencies"], *EXTRAS]]
OLDEST = provenance.read_pins(ROOT / "lightning_lars" / "requirements" / "oldest.txt")
NEWEST = provenance.read_pins(ROOT / "lightning_lars" / "requirements" / "lock-newest.txt")

# Hides FFCV from the import system, as in an environment where it never built.
BLOCK_FFCV = """
import sys
class NoFFCV:
    def find_spec(self, name, path=None, target=None):
        if name == "ffcv" or name.startswith("ffcv."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoFFCV())
"""


@pytest.mark.parametrize("requirement", DECLARED, ids=str)
def test_oldest_set_pins_each_lower_bound_and_the_lock_lies_in_range(requirement):
    name = canonicalize_name(requirement.name)
    lower = [s.version for s in requirement.specifier if s.operator == ">="]
    assert lower and not [s for s in requirement.specifier if s.operator in ("<", "<=", "==")], requirement
    assert Version(OLDEST[name]) == Version(lower[0]), (
        f"lightning_lars/requirements/oldest.txt pins {name}=={OLDEST[name]}, pyproject says {lower}"
    )
    assert requirement.specifier.contains(NEWEST[name], prereleases=True), (name, NEWEST[name])


def test_run_records_which_tested_set_its_libraries_match():
    versions = {name: None for name in provenance.LIBRARIES}
    newest = {**versions, **{n: v for n, v in NEWEST.items() if n in versions}}
    oldest = {**versions, **{n: v for n, v in OLDEST.items() if n in versions}}
    assert provenance.requirement_set(newest) == {"name": "newest", "differs": {}}
    assert provenance.requirement_set(oldest) == {"name": "oldest", "differs": {}}
    cluster = {**newest, "torch": "2.12.0+cu130"}
    assert provenance.requirement_set(cluster) == {
        "name": "untested",
        "differs": {"torch": ["2.12.0+cu130", NEWEST["torch"]]},
    }
    assert "requirement_set" in provenance.provenance()


def run_without_ffcv(code: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-c", BLOCK_FFCV + code], timeout=300)


def test_without_ffcv_the_package_imports_and_an_ffcv_recipe_names_the_install_command():
    imports = run_without_ffcv(
        "import lightning_lars.train, lightning_lars.data.torchvision_datamodule, lightning_lars.data.synthetic\n"
        "from lightning_lars.data import pipelines\n"
        "pipelines.parse_pipeline('train', ['center_crop', 'flip', {'normalize': 'imagenet'},"
        " 'to_tensor', 'channels_last'])\n"
        "print('ffcv' in sys.modules)"
    )
    assert imports.returncode == 0 and imports.stdout.strip() == "False", imports.stderr[-2000:]

    entry = run_without_ffcv(
        "sys.argv = ['lightning-lars', 'recipe=goyal_8k']\nfrom lightning_lars.train import main\nmain()"
    )
    assert entry.returncode == 2, entry.stderr[-2000:]
    assert entry.stderr.count("\n") == 1 and entry.stderr.startswith("error: "), entry.stderr
    assert "needs FFCV, which is not installed: pip install 'lightning-lars[ffcv]'" in entry.stderr
    assert "libturbojpeg0-dev libopencv-dev pkg-config" in entry.stderr and "data=synthetic" in entry.stderr

    printed = run_without_ffcv(
        "sys.argv = ['lightning-lars', 'recipe=goyal_8k', '--cfg', 'job']\n"
        "from lightning_lars.train import main\nmain()"
    )
    assert printed.returncode == 0 and "global_size: 8192" in printed.stdout, printed.stderr[-2000:]


def test_wheelhouse_names_the_platform_tags_a_target_interpreter_accepts():
    """pip takes --platform literally, while an interpreter on glibc 2.X accepts every older manylinux wheel.
    Oracle: packaging's own tag list for this machine (the list pip installs by), for this machine's glibc."""
    glibc = platform.libc_ver()[1]
    arch = platform.machine()
    machine_tags = set(packaging.tags.platform_tags()) - {f"linux_{arch}"}
    assert set(wheelhouse.compatible_platforms(f"manylinux_{glibc.replace('.', '_')}_{arch}")) == machine_tags
    assert "manylinux_2_17_x86_64" in wheelhouse.compatible_platforms("manylinux_2_28_x86_64")
    assert "manylinux_2_29_x86_64" not in wheelhouse.compatible_platforms("manylinux_2_28_x86_64")
    assert wheelhouse.compatible_platforms(None) == []


def test_synthetic_data_has_the_recipes_shape_and_layout():
    data = SyntheticDataModule(
        num_classes=7,
        batch_size=4,
        seed=3,
        num_train_images=18,
        num_val_images=9,
        resolution=16,
        val_resolution=8,
        pool_size=2,
        pipeline={"train": ["center_crop", "to_tensor", "channels_last"]},
    )
    train, val = data.train_dataloader(), data.val_dataloader()
    assert (len(train), len(val), data.num_train_images) == (4, 3, 18)  # drop-last for train, not for val
    batches = list(train)
    images, labels = batches[0]
    assert images.shape == (4, 3, 16, 16) and images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64 and 0 <= labels.min() and labels.max() < 7
    # a pool of 2, cycled
    assert torch.equal(batches[2][0], images) and not torch.equal(batches[1][0], images)
    assert next(iter(val))[0].shape == (4, 3, 8, 8)
    again = SyntheticDataModule(
        num_classes=7, batch_size=4, seed=3, num_train_images=18, resolution=16, pool_size=2
    )
    assert torch.equal(next(iter(again.train_dataloader()))[0], images)  # same seed and rank: same tensors
    with pytest.warns(UserWarning, match="keeps the first resolution"):
        SyntheticDataModule(
            resolution={"start": 128, "end": 192, "start_ramp_epoch": 0, "end_ramp_epoch": 10}
        )
