"""NLCG's diagonal BFGS preconditioner step by step, in one run of the fair set-up ("Runs of ours").

Why two of NLCG's seeds at 2.5 % of the data fell to 22 % top-1 in their last epoch: this runs one such run
(`bench_largebatch.run_overrides`, as the bench does, without writing a row) and prints one JSON line per
optimizer step and one per evaluation::

    .venv/bin/python benchmarks/probe_nlcg.py --data /path/to/tin10 --seed 0 > steps.jsonl
    .venv/bin/python benchmarks/probe_nlcg.py --data /path/to/tin10 --seed 0 --control > control.jsonl

Per step: the LR, ``ys`` = <y, s> and ``shs`` = <s, H s> of the BFGS update, H's smallest and largest entries
and how many are below 1e-3, the largest entries of the direction d and of the weights, and the training loss.
``--control``: the same run with the 1e-8 that the authors add to each element's numerators set to 0
(`NLCG.numerator_eps`), the one change that tells whether those terms cause the fall.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import bench_largebatch as bench
import torch
from lightning import Callback

from lightning_lars.config.jobs import compose_job
from lightning_lars.optim.nlcg import NLCG


class Probe(Callback):
    """Reads the NLCG state after each step (one host sync per step: a probe, not for timing)."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        optimizer = trainer.optimizers[0]
        params = [p for group in optimizer.param_groups for p in group["params"] if p in optimizer.state]
        state = [optimizer.state[p] for p in params]
        h = torch.cat([s["h_diag"].flatten() for s in state])
        direction = torch.cat([s["direction"].flatten() for s in state])
        ys, shs = (float(x) for x in getattr(optimizer, "curvature", (math.nan, math.nan)))
        row = {
            "step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "lr": optimizer.param_groups[0]["lr"],
            "ys": ys,
            "shs": shs,
            "h_min": h.min().item(),
            "h_max": h.max().item(),
            "h_below_1e-3": int((h < 1e-3).sum()),
            "d_absmax": direction.abs().max().item(),
            "w_absmax": max(p.detach().abs().max().item() for p in params),
            "loss": float(outputs["loss"]),
        }
        print(json.dumps(row), flush=True)

    def on_validation_end(self, trainer, module):
        if not trainer.sanity_checking:
            top1 = 100 * float(trainer.callback_metrics["val/top1"])
            print(json.dumps({"epoch": trainer.current_epoch, "top1": round(top1, 2)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a folder made by make prepare")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ratio", type=float, default=0.025, help="large batch as a share of the images")
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--resolution", type=int, default=32, help="px")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the bench's runs: 1)")
    parser.add_argument("--control", action="store_true", help="NLCG.numerator_eps = 0")
    args = parser.parse_args(argv)
    bench.quiet()
    torch.set_num_threads(args.threads)
    if args.control:
        NLCG.numerator_eps = 0.0
    arm = next(a for a in bench.ARMS if a.name == "nlcg")
    sizes = bench.manifest_images(args.data)
    overrides = bench.run_overrides(
        arm, compose_job([f"recipe={arm.recipe}"]), bench.large_batch(sizes["train"], args.ratio),
        args.epochs, args.data, sizes["classes"], args.seed, bench.ROOT / "logs" / "probe_nlcg",
        args.resolution, {"width": "full", "lr_rule": "sqrt", "ratio": args.ratio},
    )  # fmt: skip
    bench.train_once(overrides, args.seed, callbacks=[Probe()])


if __name__ == "__main__":
    main()
