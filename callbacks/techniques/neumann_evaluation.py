"""Validate the Neumann optimizer's returned weights ``w - mu m``, not the displaced weights it trains at."""

from __future__ import annotations

from contextlib import ExitStack

import lightning as L


class NeumannEvaluationWeights(L.Callback):
    """Around every validation loop, holds the weights Algorithm 2 of arXiv 1712.03298 returns (line 13:
    ``w_T - mu(T) m_T``) in the model, then restores the displaced training weights bit for bit.

    The Neumann optimizer trains at displaced weights ``w + mu m`` (Section 3.2), as Nesterov momentum in
    Sutskever's form does; evaluating those would measure a point the algorithm never returns. The swap is the
    optimizer's own `Neumann.evaluation_weights`; with any other optimizer this callback does nothing.
    Checkpoints keep the training weights: the default ones are written after training batches and epochs,
    never inside the validation loop, where the swap holds.
    """

    def __init__(self):
        self._stack: ExitStack | None = None

    def on_validation_start(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        self._stack = ExitStack()
        for optimizer in trainer.optimizers:
            if hasattr(optimizer, "evaluation_weights"):
                self._stack.enter_context(optimizer.evaluation_weights())

    def on_validation_end(self, trainer, pl_module):
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def on_exception(self, trainer, pl_module, exception):
        self.on_validation_end(trainer, pl_module)
