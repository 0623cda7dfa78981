"""Ghost BN memory: our fused ghost BN vs torch's BatchNorm2d vs the Python ghost BN it replaced, one run.

ResNet-50 (timm), fp32, 224 px, training mode, one forward + backward per variant. Two numbers per image:

- saved: bytes autograd keeps for backward after the forward (distinct storages seen by
  ``torch.autograd.graph.saved_tensors_hooks``, parameters and the input batch left out): the activation
  memory, deterministic and allocator-independent.
- peak: growth of the process's peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs``)
  over one cold forward + backward, in a fresh process per variant: activations plus transients (Linux only;
  glibc may reuse freed blocks inside the pass, so this is what the allocator really needed).

Ratios to torch's BN are the numbers to read; on a GPU the per-image activation memory is the same.

    python benchmarks/bench_bn.py                      # batch 4, ghost groups of 2 (~6 min on 2 busy cores)
    python benchmarks/bench_bn.py --batch 16 --groups 2 4 8
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import timm
import torch

from lightning_lars.models.batch_norm import GroupBatchNorm, convert_batch_norm

MIB = 2**20


class PythonGhostBatchNorm(GroupBatchNorm):
    """The ghost BN this project shipped before (statistics and normalisation as separate Python ops), kept
    here only as the baseline: it saves the input and several full-size intermediates for backward."""

    def forward(self, x):
        grouped, mean, var, count = self._statistics(x)
        shape = (1, 1, -1) + (1,) * (x.dim() - 2)
        y = (grouped - mean) * torch.rsqrt(var + self.eps)
        y = y * self.weight.view(shape) + self.bias.view(shape)
        self._update_running(mean, var, count)
        return y.reshape(x.shape)


def build(variant: str, group: int) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model("resnet50", num_classes=1000)
    if variant == "ours fused ghost BN":
        convert_batch_norm(model, group)
    elif variant == "Python ghost BN (before)":
        convert_batch_norm(model, group)
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, GroupBatchNorm):
                    old = PythonGhostBatchNorm(child.num_features, group_size=group)
                    old.load_state_dict(child.state_dict())
                    setattr(parent, name, old)
    return model.train()


def saved_bytes(model: torch.nn.Module, images: torch.Tensor) -> tuple[int, torch.Tensor]:
    storages: dict[int, int] = {}
    not_activations = {t.untyped_storage().data_ptr() for t in [images, *model.parameters()]}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in not_activations:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(images).logsumexp(1).mean()
    return sum(storages.values()), loss


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(variant: str, batch: int, group: int) -> dict:
    """One variant in this process: saved bytes, peak RSS growth and time of one forward + backward."""
    model = build(variant, group)
    images = torch.randn(batch, 3, 224, 224)
    for p in model.parameters():  # gradients exist before the measured pass, as in every step after the first
        p.grad = torch.zeros_like(p)
    # One cold pass: a warm-up would leave freed activations resident (glibc keeps them), hiding the peak.
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = status_kib("VmRSS")
    started = time.perf_counter()
    saved, loss = saved_bytes(model, images)
    loss.backward()
    seconds = time.perf_counter() - started
    peak = status_kib("VmHWM") - before
    return {
        "saved_mib_per_image": saved / MIB / batch,
        "peak_mib_per_image": peak / 1024 / batch,
        "ms_per_image": 1000 * seconds / batch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=4, help="device batch (images)")
    parser.add_argument("--groups", type=int, nargs="+", default=[2], help="ghost BN group sizes (images)")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "GROUP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.batch, int(args.child[1]))))
        return
    print(
        f"# {platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; ResNet-50 fp32 224 px, "
        f"batch {args.batch}"
    )
    print(
        "| BN | group (images) | saved for backward (MiB/image) | peak growth (MiB/image) | saved / torch BN"
        " | peak / torch BN | ms/image (CPU) |"
    )
    print("|---|---|---|---|---|---|---|")
    runs = [("torch BatchNorm2d", args.batch)]
    runs += [(v, g) for g in args.groups for v in ("ours fused ghost BN", "Python ghost BN (before)")]
    reference = None
    for variant, group in runs:
        out = subprocess.run(
            [sys.executable, __file__, "--batch", str(args.batch), "--child", variant, str(group)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = json.loads(out.strip().splitlines()[-1])
        reference = reference or row
        print(
            f"| {variant} | {group} | {row['saved_mib_per_image']:.1f} | {row['peak_mib_per_image']:.1f} | "
            f"{row['saved_mib_per_image'] / reference['saved_mib_per_image']:.2f} | "
            f"{row['peak_mib_per_image'] / reference['peak_mib_per_image']:.2f} | {row['ms_per_image']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
