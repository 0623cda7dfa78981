"""Per-layer LARS/LAMB statistics: ``||w||``, ``||g||`` and the trust ratio of every adapted tensor."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from lightning_lars.report.record import TrustRecord

QUANTILES = {"min": 0.0, "p25": 0.25, "median": 0.5, "p75": 0.75, "max": 1.0}


class TrustRatioMonitor(L.Callback):
    """Every ``every_n_steps`` optimizer steps, logs the optimizer's per-tensor statistics.

    The optimizer does the measuring (`lightning_lars.optim.lars.LARS`: ``track_stats = True`` makes the next
    ``step()`` store ``last_stats`` = ``names``, ``w_norm``, ``g_norm``, ``trust_ratio``, whole-tensor norms
    even under FSDP sharding). This callback switches tracking on only for the steps it samples, so other steps
    pay nothing, and maps the vectors to parameter names (``param_names`` of each group, as in
    ``model.named_parameters()`` of the timm model).

    Logged (rank 0): ``trust/ratio/<name>``, ``trust/w_norm/<name>``, ``trust/g_norm/<name>`` when
    ``per_layer`` and, always, ``trust/ratio_<q>`` for q in min, p25, median, p75, max over the layers.
    ``history`` keeps ``(step, {q: value})``, ``layer_history`` ``(step, [ratio per layer])`` (names in
    ``last``) and ``last`` the last per-layer snapshot, for the run report.

    An optimizer without ``track_stats`` (SGD) gets a one-line notice and nothing is logged.

    No host reads between log steps: a sample stays on the device (three vectors of one float per tensor)
    until the next step that logs (``trainer.log_every_n_steps``), the end of the epoch or of training, and
    only then is copied to the host, so an ``every_n_steps`` off the logging interval costs no device wait.

    Args:
        every_n_steps: sampling interval in optimizer steps (default 50, the config's; None: the trainer's
            ``log_every_n_steps``).
        per_layer: also log one series per tensor (161 tensors x 3 series for ResNet-50).
        max_history: most quantile records kept for the report (older ones are thinned by half).
    """

    def __init__(self, every_n_steps: int | None = 50, per_layer: bool = True, max_history: int = 2000):
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps={every_n_steps} must be >= 1")
        self.every_n_steps = every_n_steps
        self.per_layer = per_layer
        self.max_history = max_history
        self.history: list[tuple[int, dict[str, float]]] = []
        self.layer_history: list[tuple[int, list[float]]] = []  # per-layer trust ratios over training
        self.last: dict | None = None  # {"step", "names", "w_norm", "g_norm", "trust_ratio"} as Python lists
        self._tracked: list = []
        self._pending: list[tuple[int, dict]] = []  # (step, stats) still on the device
        self._trainer = None

    def on_fit_start(self, trainer, pl_module):
        if self.every_n_steps is None:
            self.every_n_steps = max(1, trainer.log_every_n_steps)

    def on_train_start(self, trainer, pl_module):
        self._trainer = trainer
        self._tracked = [opt for opt in trainer.optimizers if hasattr(opt, "track_stats")]
        if not self._tracked:
            names = ", ".join(type(opt).__name__ for opt in trainer.optimizers)
            # Info, not a warning: the default callback set includes this monitor for SGD recipes too.
            rank_zero_info(
                f"TrustRatioMonitor: {names} has no per-layer trust ratios (no `track_stats`);"
                " nothing to log (remove it with ~callbacks.trust_ratio)"
            )

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        due = trainer.global_step % self.every_n_steps == 0
        for opt in self._tracked:
            opt.track_stats = due
            opt.last_stats = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step - 1  # the optimizer step just taken
        for opt in self._tracked:
            stats, opt.last_stats, opt.track_stats = opt.last_stats, None, False
            if stats is not None and trainer.is_global_zero:
                self._pending.append((step, stats))
        if trainer.global_step % max(1, trainer.log_every_n_steps) == 0:
            self._flush(trainer)

    def on_train_epoch_end(self, trainer, pl_module):
        self._flush(trainer)

    def on_train_end(self, trainer, pl_module):
        self._flush(trainer)

    def _flush(self, trainer) -> None:
        pending, self._pending = self._pending, []
        for step, stats in pending:
            self._log(trainer, step, stats)

    def _log(self, trainer, step: int, stats: dict) -> None:
        # One device->host copy for all three vectors (no per-tensor .item() syncs).
        vectors = torch.stack([stats["w_norm"], stats["g_norm"], stats["trust_ratio"]]).cpu()
        w_norm, g_norm, ratio = vectors.tolist()
        quantile_values = torch.quantile(vectors[2], torch.tensor(list(QUANTILES.values()))).tolist()
        summary = dict(zip(QUANTILES, quantile_values))
        metrics = {f"trust/ratio_{q}": v for q, v in summary.items()}
        if self.per_layer:
            for name, w, g, r in zip(stats["names"], w_norm, g_norm, ratio):
                metrics[f"trust/ratio/{name}"] = r
                metrics[f"trust/w_norm/{name}"] = w
                metrics[f"trust/g_norm/{name}"] = g
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        self.last = {
            "step": step,
            "names": list(stats["names"]),
            "w_norm": w_norm,
            "g_norm": g_norm,
            "trust_ratio": ratio,
        }
        if self.history and self.history[-1][0] >= step:
            return
        self.history.append((step, summary))
        self.layer_history.append((step, ratio))
        if len(self.history) > self.max_history:
            self.history = self.history[::2]
        if len(self.layer_history) > self.max_history // 10:  # 161 floats each for ResNet-50: keep fewer
            self.layer_history = self.layer_history[::2]

    def record(self) -> TrustRecord:
        """The quantiles, the per-layer ratios and the newest snapshot, as the run report reads them."""
        return TrustRecord(
            quantiles=tuple(self.history),
            per_layer=tuple(self.layer_history),
            last=dict(self.last) if self.last is not None else None,
        )

    def state_dict(self):
        if self._pending:  # Lightning asks before on_save_checkpoint: the saved history holds every sample
            self._flush(self._trainer)
        return {
            "history": list(self.history),
            "layer_history": list(self.layer_history),
            "names": list(self.last["names"]) if self.last else None,
        }

    def load_state_dict(self, state_dict):
        self.history = [(step, dict(summary)) for step, summary in state_dict["history"]]
        self.layer_history = [(step, list(r)) for step, r in state_dict.get("layer_history", [])]
        if state_dict.get("names") and self.last is None:
            self.last = {
                "step": -1,
                "names": list(state_dict["names"]),
                "w_norm": [],
                "g_norm": [],
                "trust_ratio": [],
            }
