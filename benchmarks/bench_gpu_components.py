"""bench_gpu.py's parts 2 and 3, each timed alone on the GPU: the optimizer step on ResNet-50's parameters (our
LARS and LAMB, eager and compiled, against torch's fused SGD and AdamW and timm's Lars) and the images/s the loaders
feed at 224 px (torchvision's DataLoader on generated JPEGs, FFCV's where it is installed). Also the LARS the bare
loop of part 1 steps with. Imported by bench_gpu.py from beside it; needs CUDA.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch


def lars(params, implementation: str = "eager", form: str = "mlperf"):
    from lightning_lars.optim.lars import LARS

    return LARS(params, lr=1.0, momentum=0.9, weight_decay=5e-5, form=form, implementation=implementation)


def optimizer_step_ms(steps: int) -> Iterator[tuple[str, float | str]]:
    """(optimizer, median ms per step) on ResNet-50's parameters (fp32, random gradients), same param groups for
    all, one row at a time."""
    import timm
    from timm.optim import Lars as TimmLars

    from lightning_lars.optim.lamb import LAMB
    from lightning_lars.optim.param_groups import param_groups

    model = timm.create_model("resnet50").cuda()
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    groups = functools.partial(param_groups, model, 5e-5)
    table = {  # the compiled rows last: compiling them takes the longest, and a part cut at its limit keeps the rest
        "ours LARS (mlperf form)": lambda: lars(groups()),
        "torch SGD (fused=True)": lambda: torch.optim.SGD(groups(), lr=1.0, momentum=0.9, fused=True),
        "ours LAMB": lambda: LAMB(groups(), lr=1e-3),
        "torch AdamW (fused=True)": lambda: torch.optim.AdamW(groups(), lr=1e-3, fused=True),
        "timm Lars (foreach=True)": lambda: TimmLars(groups(), lr=1.0, momentum=0.9, foreach=True),
        # timm 1.0.29 (the H200 node's) has no foreach argument: its per-tensor loop is what its users get
        "timm Lars (per tensor)": lambda: TimmLars(groups(), lr=1.0, momentum=0.9),
        "ours LARS (mlperf form, compiled)": lambda: lars(groups(), implementation="compiled"),
        "ours LAMB (compiled)": lambda: LAMB(groups(), lr=1e-3, implementation="compiled"),
    }
    for name, make in table.items():
        try:
            optimizer = make()
        except TypeError as error:  # an older timm without foreach
            yield name, f"n/a ({error})"
            continue
        optimizer.step()  # creates the state (and compiles the compiled rows)
        times = []
        for _ in range(steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            optimizer.step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        yield name, statistics.median(times)


def loader_images_per_s(batch_size: int, batches: int, root: Path) -> dict[str, float | str]:
    """Images/s into the GPU at 224 px from generated 300-500 px JPEGs, in steady state: the batches the workers
    made ahead while the first one was awaited (``workers x prefetch_factor``) are taken untimed first. Timing
    only those (two warm-up batches, then ten, on 16 workers) read 91,078 images/s on the H200, the queue's
    drain; the recipe on the same JPEGs trained at 4,123."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_data import make_jpegs

    from lightning_lars.core.extras import ffcv_available
    from lightning_lars.data.pipelines import DEFAULT_PIPELINE
    from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule

    workers = len(os.sched_getaffinity(0))
    ahead = workers * 2 + 1  # DataLoader's default prefetch_factor is 2 batches per worker
    make_jpegs(root / "jpeg", batch_size * (batches + ahead))

    def rate(loader) -> float:
        iterator = iter(loader)
        for _ in range(ahead):  # FFCV's own read-ahead (batches_ahead, 3 by default) is shorter
            next(iterator)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(batches):
            images, _labels = next(iterator)
            images = images.cuda(non_blocking=True)
        torch.cuda.synchronize()
        return batch_size * batches / (time.perf_counter() - start)

    data = TorchvisionDataModule(
        str(root / "jpeg"),
        num_classes=10,
        batch_size=batch_size,
        num_workers=workers,
        resolution=224,
        val_resolution=224,
        pipeline=DEFAULT_PIPELINE,
    )
    results: dict[str, float | str] = {
        f"torchvision DataLoader ({workers} workers)": rate(data.train_dataloader())
    }
    name = f"FFCV ({workers} workers, max side 256)"
    if not ffcv_available():
        results[name] = "n/a (FFCV not installed)"
        return results
    from lightning_lars.data.ffcv_datamodule import FFCVDataModule
    from lightning_lars.data.prepare import convert

    convert(root / "jpeg", root / "ffcv", max_resolution=256, num_workers=workers, progress=False)
    data = FFCVDataModule(
        str(root / "ffcv" / "train.beton"),
        str(root / "ffcv" / "val.beton"),
        num_classes=10,
        batch_size=batch_size,
        num_workers=workers,
        resolution=224,
        pipeline=DEFAULT_PIPELINE,
    )
    data.device = torch.device("cuda")
    results[name] = rate(data.train_dataloader())
    return results
