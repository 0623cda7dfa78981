"""Values that only a `_target_` can judge, checked before any of them is built (so before a W&B run opens):
the timm model name, the accelerator, the optimizer's hyperparameters and CUDA graphs on a run without CUDA. Hydra
would report each as "Error in call to target" with the library's traceback text; here each is one line naming the
fix. The precision, like every Trainer argument, is Lightning's ``Trainer(...)`` to judge, built before W&B opens."""

from __future__ import annotations

import difflib
import re

import timm
import torch
from hydra.utils import instantiate
from lightning.pytorch.accelerators import AcceleratorRegistry
from omegaconf import DictConfig

import lightning_lars.models  # noqa: F401  (registers alexnet_bn with timm)
from lightning_lars.config.rules import compile_mode
from lightning_lars.core.errors import UserError

GPU_NAMES = {"gpu", "cuda"}  # Lightning maps "gpu" to CUDA


def check(cfg: DictConfig) -> None:
    check_arch(cfg.model.get("arch"))
    check_accelerator(cfg.trainer.get("accelerator"))
    check_optimizer(cfg.get("optimizer"))
    check_compile(cfg.model.get("compile"), cfg.trainer.get("accelerator"))


def check_compile(mode, accelerator) -> None:
    """CUDA graphs on a run without CUDA, before anything is built."""
    on_gpu = accelerator in GPU_NAMES or (accelerator in (None, "auto") and torch.cuda.is_available())
    compile_mode(mode, "cuda" if on_gpu else "cpu" if accelerator in (None, "auto") else str(accelerator))


def check_optimizer(optimizer: DictConfig | None) -> None:
    """Our optimizers judge their own hyperparameters when they are built (``ValueError`` / ``TypeError``, as
    torch's do), which Lightning does late, in ``configure_optimizers``, after the data and the trainer: build
    one here on a stand-in parameter so a bad value is reported in seconds, as a one-line `UserError` naming
    the key. Any other failure is left to the real build, which reports it with its context."""
    if not optimizer or "_target_" not in optimizer:
        return
    try:  # a function of the parameters (`_partial_`), given a matrix and a vector
        instantiate(optimizer, _partial_=True)(
            [torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(2))]
        )
    except (ValueError, TypeError) as error:
        key = key_named_in(str(error), [str(k) for k in optimizer if not str(k).startswith("_")])
        if key is None:
            return  # not a judgement of one of our keys (e.g. an unknown keyword): the real build reports it
        message = str(error).strip().splitlines()[0]
        raise UserError(
            message if f"optimizer.{key}" in message else f"optimizer.{key}={optimizer[key]}: {message}"
        ) from None
    except Exception:  # noqa: BLE001  (not ours to judge here: the real build says what is wrong, in context)
        return


def key_named_in(message: str, keys: list[str]) -> str | None:
    """The first of ``keys`` that ``message`` names as ``key=value`` (``LARS momentum=1.0 is ...``)."""
    found = [
        (match.start(), key) for key in keys if (match := re.search(rf"(?<![\w.]){re.escape(key)}=", message))
    ]
    return min(found)[1] if found else None


def check_arch(arch: str | None) -> None:
    if arch is None or timm.is_model(arch):
        return
    close = difflib.get_close_matches(str(arch), timm.list_models(), n=5, cutoff=0.6)
    hint = (
        f"close names: {', '.join(close)}"
        if close
        else "list them with: python -c \"import timm; print(timm.list_models('resnet*'))\""
    )
    raise UserError(f"model.arch={arch}: timm has no such model; {hint}")


def available_accelerators() -> list[str]:
    """Accelerator names Lightning knows that work on this machine (always ``cpu``)."""
    return sorted(
        name
        for name in AcceleratorRegistry.available_accelerators()
        if AcceleratorRegistry[name]["accelerator"].is_available()
    )


def check_accelerator(accelerator: str | None) -> None:
    if accelerator is None or not isinstance(accelerator, str) or accelerator == "auto":
        return  # an Accelerator object: Lightning checks it
    here = available_accelerators()
    name = "cuda" if accelerator in GPU_NAMES else accelerator
    if name not in AcceleratorRegistry.available_accelerators():
        raise UserError(
            f"trainer.accelerator={accelerator} is not an accelerator Lightning knows; on this machine:"
            f" {', '.join(['auto', *here])}"
        )
    if name not in here:
        raise UserError(
            f"trainer.accelerator={accelerator}, but this machine has no {name.upper()} device"
            f" (available here: {', '.join(here)}); use trainer.accelerator=auto or"
            f" trainer.accelerator={here[0]}"
        )
