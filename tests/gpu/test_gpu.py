"""GPU checks (`make test-gpu`, the ``gpu``-marked cases): skipped without CUDA. Where the same check can run on
the CPU it does, in the fast tier, so its test code is proven before it meets a GPU. They run where only a CUDA
torch, lightning, timm, torchmetrics and torchvision are installed plus the GPU kit (no FFCV: the FFCV variant
then says so).

Oracles from outside the code under test: the float64 references of tests/unit (written from the papers'
equations) for the CUDA path of LARS and LAMB; autocast's own output dtype for mixed precision; the process
group torch reports for DDP/FSDP2 on NCCL; the CPU FFCV pipeline for the GPU one.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import (
    NORMALISED_AFTER_COPY,
    NORMALISED_BEFORE_COPY,
    demo_ffcv_module,
    entry_point_env,
    small_mlp,
    steps_with,
)

CPU_AND_CUDA = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"
GPU_TESTS = Path(__file__).resolve().parent  # gpu_probe.py: the probes the recipe tests add as callbacks


def _unit_module(name: str):
    """tests/unit/<name>.py by path (its float64 reference and helpers), whatever pytest's rootdir."""
    spec = importlib.util.spec_from_file_location(f"unit_{name}", UNIT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _classifier(channels_last: bool, num_classes: int = 10):
    from lightning_lars.optim.lars import LARS
    from lightning_lars.training.module import ImageClassifier

    optimizer = functools.partial(LARS, momentum=0.9, weight_decay=5e-5, trust_coefficient=0.001)
    return ImageClassifier("resnet18", num_classes, optimizer, lambda step: 0.5, channels_last=channels_last)


@pytest.mark.parametrize(
    "device, precision",
    [
        # Lightning's CPU autocast is bf16 only; ResNet-18 on a CPU takes ~40 s: the slow tier
        pytest.param("cpu", "bf16-mixed", marks=pytest.mark.slow),
        pytest.param("cuda", "bf16-mixed", marks=pytest.mark.gpu),
        pytest.param("cuda", "16-mixed", marks=pytest.mark.gpu),
    ],
)
@pytest.mark.parametrize("channels_last", [False, True])
def test_mixed_precision_and_channels_last_train_on_the_device(device, precision, channels_last):
    import lightning as L

    from lightning_lars.data.synthetic import SyntheticDataModule

    model = _classifier(channels_last)
    first_conv = model.model.conv1
    seen = {}  # what the first conv saw during training, recorded then: Lightning moves the model back at the end

    def record(module, inputs, output):
        seen.update(
            dtype=output.dtype,
            weight_device=module.weight.device.type,
            weight_dtype=module.weight.dtype,
            weight_channels_last=module.weight.is_contiguous(memory_format=torch.channels_last),
        )

    first_conv.register_forward_hook(record)
    layout = ["channels_last"] if channels_last else ["to_torch_image"]
    data = SyntheticDataModule(
        num_classes=10,
        batch_size=32,
        resolution=64,
        num_train_images=32 * 8,
        num_val_images=32,
        pipeline={"train": layout},
    )
    before = [p.detach().clone() for p in model.parameters()]
    trainer = L.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        precision=precision,
        max_steps=8,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        limit_val_batches=1,
    )
    trainer.fit(model, datamodule=data)

    assert seen["dtype"] == (torch.bfloat16 if precision == "bf16-mixed" else torch.float16)  # autocast ran
    assert seen["weight_device"] == device and seen["weight_dtype"] == torch.float32  # fp32 master weights
    assert seen["weight_channels_last"] == channels_last
    losses = [v for k, v in trainer.callback_metrics.items() if k.startswith("train/loss")]
    assert losses and all(torch.isfinite(v) for v in losses)
    moved = sum(not torch.equal(a.cpu(), b.cpu()) for a, b in zip(before, model.parameters()))
    assert moved >= len(before) // 2  # the optimizer stepped (fp16: GradScaler may skip only the first steps)


@CPU_AND_CUDA
@pytest.mark.parametrize("name", ["lars", "lamb"])
def test_float32_optimizer_step_on_the_device_matches_the_float64_reference(name, device):
    from lightning_lars.optim.lamb import LAMB
    from lightning_lars.optim.lars import LARS
    from lightning_lars.optim.param_groups import param_groups

    unit = _unit_module(f"test_{name}")
    model = small_mlp(dtype=torch.float32)
    start = [p.detach().double() for p in model.parameters()]
    grads = unit._grads(model, len(unit.LRS))
    model = model.to(device)
    adapted = [p.ndim > 1 for p in start]
    if name == "lars":
        optimizer = LARS(
            param_groups(model, 1e-3, "ndim<=1"),
            momentum=0.9,
            trust_coefficient=0.02,
            eps=1e-9,
            nesterov=True,
            form="mlperf",
        )
        expected = unit.reference(
            start,
            grads,
            unit.LRS,
            adapted=adapted,
            decay=[1e-3 if a else 0.0 for a in adapted],
            form="mlperf",
            mu=0.9,
            eta=0.02,
            eps=1e-9,
            nesterov=True,
            clip=False,
        )
    else:
        optimizer = LAMB(param_groups(model, 0.1, "ndim<=1"), betas=(0.9, 0.99), eps=1e-6, max_grad_norm=0.5)
        expected = unit.reference(
            start,
            grads,
            unit.LRS,
            adapted=adapted,
            decay=[0.1 if a else 0.0 for a in adapted],
            b1=0.9,
            b2=0.99,
            eps=1e-6,
            max_grad_norm=0.5,
            bias_correction=True,
        )
    device_grads = [[g.to(device) for g in step] for step in grads]
    got = steps_with(model, optimizer, device_grads, unit.LRS)
    assert all(p.device.type == device for p in model.parameters())
    for value, want, before in zip(got, expected, start):
        assert (want - before).abs().max() > 1e-4  # the step is not empty
        torch.testing.assert_close(value.cpu(), want, rtol=1e-5, atol=1e-6)  # float32 on the device


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["ddp", "ddp_bucketed", "fsdp2"])
def test_recipe_runs_a_few_steps_on_nccl_at_world_size_one(strategy, tmp_path):
    """goyal_8k at toy scale on generated data, bf16, through the entry point, as a user starts it."""
    probe = "+callbacks.gpu_probe._target_=gpu_probe.ProcessGroupProbe"
    command = [
        sys.executable,
        "-m",
        "lightning_lars.train",
        "recipe=goyal_8k",
        "debug=toy",
        "data=synthetic",
        "data.num_classes=1000",
        "data.resolution=64",
        "data.num_train_images=256",
        "data.num_val_images=64",
        "trainer.accelerator=gpu",
        "trainer.precision=bf16-mixed",
        f"strategy={strategy}",
        f"paths.log_dir={tmp_path}",
        probe,
    ]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=entry_point_env(GPU_TESTS),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "probe: backend=nccl world_size=1 device=cuda" in out, out[-3000:]
    assert "Results: recipe goyal_8k" in out


@pytest.mark.gpu
def test_gpu_pipeline_variant_matches_the_cpu_pipeline(tmp_path):
    """FFCV normalising on the GPU after the copy (uint8 over PCIe) gives the CPU-normalised images."""
    pytest.importorskip("ffcv", reason="FFCV is not installed here: pip install 'lightning-lars[ffcv]'")
    batches = {}
    for name, ops in (("cpu", NORMALISED_BEFORE_COPY), ("gpu", NORMALISED_AFTER_COPY)):
        data = demo_ffcv_module(tmp_path, ops, batch_size=8)
        data.device = torch.device("cuda")
        images, labels = next(iter(data.val_dataloader()))
        images, labels = data.on_after_batch_transfer((images.cuda(), labels.cuda()), 0)
        batches[name] = images.float(), labels
    assert batches["gpu"][0].is_cuda and batches["gpu"][0].is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(batches["gpu"][0], batches["cpu"][0], rtol=1e-4, atol=1e-4)
    assert torch.equal(batches["gpu"][1], batches["cpu"][1])


@CPU_AND_CUDA
def test_ffcv_resumes_mid_epoch_with_the_same_images_bit_for_bit_on_the_device(device, tmp_path):
    """FFCV on the node as on a CPU: the seeded random crop and flip on the node's cores, ToDevice, normalised and
    laid out on the GPU; a loader restored mid-epoch yields the uninterrupted epoch's remaining batches, images
    bit for bit, on the device (on a CPU: the same loop, ToDevice a no-op)."""
    pytest.importorskip("ffcv", reason="FFCV is not installed here: pip install 'lightning-lars[ffcv]'")
    ops = [
        "random_resized_crop",
        "flip",
        "to_tensor",
        "to_device",
        "channels_last",
        {"normalize": "imagenet"},
    ]

    def epoch(state: dict, limit: int | None = None) -> tuple[list, dict]:
        data = demo_ffcv_module(tmp_path, ops, batch_size=8, seed=3)
        data.load_state_dict(state)
        data.setup("fit")
        data.device = torch.device(device)
        batches = []
        for images, labels in itertools.islice(data.train_dataloader(), limit):
            images, labels = data.on_after_batch_transfer((images, labels), 0)
            assert images.device.type == device and images.is_contiguous(memory_format=torch.channels_last)
            batches.append((images.clone(), labels.clone()))  # FFCV reuses its batch buffers
        return batches, data.state_dict()

    uninterrupted, _ = epoch({"epoch": 1, "samples_consumed": 0})
    first, state = epoch({"epoch": 1, "samples_consumed": 0}, limit=2)
    assert state == {"epoch": 1, "samples_consumed": 16}
    rest, _ = epoch(state)
    assert len(first) + len(rest) == len(uninterrupted) == 4
    for (got, got_labels), (want, want_labels) in zip(first + rest, uninterrupted, strict=True):
        assert torch.equal(got, want) and torch.equal(got_labels, want_labels)


@pytest.mark.gpu
def test_device_decode_on_cuda_matches_the_pil_path(tmp_path):
    """data.decode=device through nvJPEG against PIL in the workers, same crops and flips: torchvision's own bound
    for nvJPEG against its CPU decoder (mean absolute difference < 2 of 255, test_image.py's
    test_decode_jpegs_cuda) plus the resize's rounding (at most 1, tests/unit/test_device_decode.py)."""
    unit = _unit_module("test_device_decode")
    root = unit.write_jpeg_tree(tmp_path)
    cpu, device = unit.module(root, "cpu"), unit.module(root, "device")
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).view(1, 3, 1, 1)
    for cpu_batches, device_batches in (
        (cpu.train_dataloader(), device.train_dataloader()),
        (cpu.val_dataloader(), device.val_dataloader()),
    ):
        for (cpu_images, cpu_labels), batch in zip(cpu_batches, device_batches, strict=True):
            images, labels = device.transfer_batch_to_device(batch, torch.device("cuda"), 0)
            assert images.is_cuda and images.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(labels.cpu(), cpu_labels)
            levels = ((images.cpu() - cpu_images) * std).abs()  # pixel units (0-255)
            assert float(levels.mean()) < 2 + 1, float(levels.mean())


@pytest.mark.gpu
def test_beton_device_decode_on_cuda_matches_ffcvs_cpu_path(tmp_path):
    """data.decode=device on a .beton (nvJPEG on its stored JPEGs, raw ones copied) against FFCV's CPU path with
    the same boxes and flips: the resize gap measured on the CPU (mean < 1 of 255,
    tests/unit/test_beton_device_decode.py) plus torchvision's nvJPEG bound (mean < 2, test_decode_jpegs_cuda)."""
    pytest.importorskip("ffcv", reason="FFCV is not installed here: pip install 'lightning-lars[ffcv]'")
    unit = _unit_module("test_beton_device_decode")
    beton = unit.write_beton(tmp_path / "images.beton")
    cpu, device = unit.make_module(beton, "cpu"), unit.make_module(beton, "device")
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).view(1, 3, 1, 1)
    for split in ("train", "val"):
        on_gpu = unit.epoch_batches(device, split, device=torch.device("cuda"))
        for (cpu_images, cpu_labels), (images, labels) in zip(
            unit.epoch_batches(cpu, split), on_gpu, strict=True
        ):
            assert images.is_cuda and images.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(labels.cpu(), cpu_labels)
            levels = ((images.cpu() - cpu_images) * std).abs()  # pixel units (0-255)
            assert float(levels.mean()) < 1 + 2, float(levels.mean())


@pytest.mark.gpu
def test_no_host_read_between_log_steps_in_the_timed_recipe_at_16_mixed(tmp_path):
    """The timed recipe (nvidia_mlperf10_3264: 16-mixed, so a GradScaler; LARS; its MLPerf log on) through the
    entry point with CUDA's own sync detector on (set_sync_debug_mode "warn"): no read and no synchronising CUDA
    call on a step that logs nothing, from our code or a library's. Before LARS took the scale in its step,
    GradScaler.step read found_inf back (``.item()``) every step; at bf16 (no scaler) the probe could not see it."""
    out = tmp_path / "syncs.json"
    command = [
        sys.executable,
        "-m",
        "lightning_lars.train",
        "recipe=nvidia_mlperf10_3264",
        "data=synthetic",
        "data.num_classes=1000",
        "data.resolution=64",
        "data.num_train_images=1024",
        "data.num_val_images=64",
        "batch.global_size=64",
        "batch.max_per_device=64",
        "batch.bn_group=null",  # the recipe's 408 is one GPU's batch: BN over the device's batch, as here
        "trainer.accelerator=gpu",
        "trainer.devices=1",
        "trainer.max_steps=24",
        "trainer.log_every_n_steps=8",
        # eager: every call the compiled run makes from Python (callbacks, optimizer, scaler, logging) runs here
        # too, and a read inside the model would break a compiled graph and read there as well; compiling these
        # new shapes would cost the GPU job tens of seconds
        "model.compile=false",
        "evaluation.every_n_epochs=null",
        "evaluation.every_n_steps=24",
        "evaluation.offset_epochs=0",
        "trainer.limit_val_batches=1",
        "~logger",
        "~callbacks.checkpoint",
        "+callbacks.sync_probe._target_=gpu_probe.HostSyncProbe",
        f"paths.log_dir={tmp_path}",
    ]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=entry_point_env(GPU_TESTS, SYNC_PROBE_OUT=str(out)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert list(tmp_path.rglob("mlperf.log")), "the recipe's MLPerf log was not written"
    run = json.loads(out.read_text())
    # the recipe's precision, with a GradScaler
    assert (run["precision"], run["scaler"]) == ("16-mixed", True)
    reads = run["reads"]
    where = [
        f"{'ours' if r['ours'] else 'library'}: {r['kind']} at {r['where']}" for r in reads if r["quiet"]
    ]
    quiet = sorted(set(where))
    assert any(not r["quiet"] for r in reads), "the probe saw no reads at all, not even at log steps"
    assert any(r["quiet"] is False and r["step"] > 8 for r in reads), (
        "the probe stopped before the later log steps"
    )
    assert not quiet, quiet


def test_the_probe_callbacks_import_in_the_entry_points_environment(tmp_path):
    """The recipe tests above name ``gpu_probe.Class`` as a callback of a subprocess; gpu_probe imports the
    shared helpers, so that subprocess needs both folders importable (the H200 run failed with "Error locating
    target 'gpu_probe.ProcessGroupProbe'" when only tests/gpu was)."""
    done = subprocess.run(
        [sys.executable, "-c", "import gpu_probe; gpu_probe.ProcessGroupProbe(); gpu_probe.HostSyncProbe()"],
        cwd=tmp_path,
        env=entry_point_env(GPU_TESTS),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
