"""Records every device-to-host read during training: ``python sync_runs.py DATA OUT``.

``ours``: the demo recipe built by ``lightning_lars.training.run.build`` (every callback train.py adds plus
conf/callbacks/default.yaml's, the BN groups, the plugins), on 2 gloo ranks, once with the plain log lines
(what a SLURM log gets) and once with the tqdm bar (what a terminal gets). ``bare``: the same module and data
under a plain ``L.Trainer`` (no callbacks, no progress bar, no checkpoints): Lightning's own reads. All run the
same steps with the same logging interval, one after the other in the same two processes (bare first).
``host_reads.HostReadRecorder`` (first in the callbacks) writes ``OUT/<mode>-rank<r>.json``: each read, its
optimizer step, whether it fell between log steps, and whether our code made it. The trust-ratio monitor
samples every 3 steps, off the logging interval of 4, so its statistics are taken on steps that log nothing.
Lightning's ``ddp`` launcher starts rank 1 by running this script again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # host_reads.py, for rank 1 too (started with this script's sys.path)

from host_reads import HostReadRecorder  # noqa: E402

from lightning_lars.config.jobs import compose_job  # noqa: E402
from lightning_lars.training import run  # noqa: E402

LOG_EVERY, MAX_STEPS, TRUST_EVERY = 4, 12, 3
OUR_CODE = (ROOT / "lightning_lars", ROOT / "callbacks")


def demo_config(data_dir: str, out_dir: str, progress: str):
    overrides = [
        "recipe=demo",
        "model.arch=test_resnet",
        f"paths.data_dir={data_dir}",
        f"paths.log_dir={out_dir}",
        f"paths.output_dir={out_dir}/run-{progress}",
        "batch.global_size=32",
        "batch.max_per_device=8",
        "trainer.devices=2",
        "strategy=ddp",
        f"trainer.max_steps={MAX_STEPS}",
        f"trainer.log_every_n_steps={LOG_EVERY}",
        "trainer.limit_val_batches=0",
        "data.num_workers=1",
        f"+callbacks.progress.force={progress}",
        f"callbacks.trust_ratio.every_n_steps={TRUST_EVERY}",
        "callbacks.checkpoint.every_n_epochs=null",
        "~logger",
    ]  # checkpoint saves may sync: not steady state
    return compose_job(overrides)


def main(data_dir: str, out_dir: str) -> None:
    for mode in ("bare", "lines", "bar"):
        L.seed_everything(0, verbose=False)
        trainer, module, datamodule, plan = run.build(
            demo_config(data_dir, out_dir, "lines" if mode == "bare" else mode)
        )
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
        recorder = HostReadRecorder(OUR_CODE, LOG_EVERY)
        trainer.callbacks.insert(0, recorder)
        trainer.fit(module, datamodule=datamodule)
        out = Path(out_dir) / f"{mode}-rank{trainer.global_rank}.json"
        out.write_text(json.dumps(recorder.reads))


if __name__ == "__main__":
    main(*sys.argv[1:3])
