"""Counts host-device synchronisations per optimizer step: ``python sync_runs.py DATA OUT``.

``ours``: the demo recipe built by ``lightning_lars.training.run.build`` (every callback train.py adds plus
conf/callbacks/default.yaml's, the BN groups, the plugins), on 2 gloo ranks. ``bare``: the same module and data
under a plain ``L.Trainer`` (no callbacks, no progress bar, no checkpoints). Both run the same steps with the
same logging interval, one after the other in the same two processes (bare first); `SyncCounter` (added last)
writes ``OUT/<mode>-rank<r>.json``: for each optimizer step,
how many ``aten::_local_scalar_dense`` ran (the op behind ``.item()``, ``float(t)``, ``bool(t)``: on a GPU each
one waits for the device) since the previous step ended. Lightning's ``ddp`` launcher starts rank 1 by running
this script again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
from torch.profiler import ProfilerAction, ProfilerActivity, profile

from lightning_lars.config import compose as config
from lightning_lars.training import run as train

LOG_EVERY, MAX_STEPS = 4, 12


class SyncCounter(L.Callback):
    """One profiler window per optimizer step; counts ``aten::_local_scalar_dense`` in each."""

    def __init__(self, out: Path):
        self.out, self.counts, self._profiler, self._step_seen = out, [], None, 0

    def on_train_start(self, trainer, pl_module):
        self._profiler = profile(
            activities=[ProfilerActivity.CPU],
            on_trace_ready=self._count,
            schedule=lambda step: ProfilerAction.RECORD_AND_SAVE,
        )
        self._profiler.start()

    def _count(self, prof) -> None:
        self.counts.append(sum(event.name == "aten::_local_scalar_dense" for event in prof.events()))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self._step_seen:  # an optimizer step ended: close its window
            self._step_seen = trainer.global_step
            self._profiler.step()

    def on_train_end(self, trainer, pl_module):
        self._profiler.stop()
        self.out.write_text(json.dumps({"counts": self.counts[:MAX_STEPS], "log_every": LOG_EVERY}))


def demo_config(data_dir: str, out_dir: str):
    overrides = [
        "recipe=demo",
        "model.arch=test_resnet",
        f"paths.data_dir={data_dir}",
        f"paths.log_dir={out_dir}",
        f"paths.output_dir={out_dir}/run",
        "batch.global_size=32",
        "batch.max_per_device=8",
        "trainer.devices=2",
        "strategy=ddp",
        f"+trainer.max_steps={MAX_STEPS}",
        f"trainer.log_every_n_steps={LOG_EVERY}",
        "+trainer.limit_val_batches=0",
        "data.num_workers=1",
        "+callbacks.progress.force=lines",
        "callbacks.checkpoint.every_n_epochs=null",
        "~logger",
    ]  # checkpoint saves may sync: not steady state
    return config.compose_job(overrides)


def main(data_dir: str, out_dir: str) -> None:
    for mode in ("bare", "ours"):
        L.seed_everything(0, verbose=False)
        trainer, module, datamodule, plan = train.build(demo_config(data_dir, out_dir))
        if mode == "bare":
            trainer = L.Trainer(
                accelerator="cpu",
                devices=2,
                strategy="ddp",
                max_steps=MAX_STEPS,
                log_every_n_steps=LOG_EVERY,
                limit_val_batches=0,
                logger=False,
                accumulate_grad_batches=plan.accumulation,
                enable_progress_bar=False,
                enable_checkpointing=False,
                enable_model_summary=False,
            )
        trainer.callbacks.append(SyncCounter(Path(out_dir) / f"{mode}-rank{trainer.global_rank}.json"))
        trainer.fit(module, datamodule=datamodule)


if __name__ == "__main__":
    main(*sys.argv[1:3])
