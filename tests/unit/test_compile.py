"""``model.compile``: the model compiled in place, so compiled and eager runs share checkpoints; bad values and
impossible combinations are one-line errors. Oracles: the eager module's own state_dict keys and logits, the
modes torch's inductor lists, and torch's own version string."""

from __future__ import annotations

import functools
from pathlib import Path

import lightning as L
import pytest
import torch

from lightning_lars.config import rules
from lightning_lars.config.schema import COMPILE_MODES
from lightning_lars.core.errors import UserError
from lightning_lars.recipe.plan import check_command_line
from lightning_lars.training import target_checks
from lightning_lars.training.module import ImageClassifier

ROOT = Path(__file__).resolve().parents[2]
ARCH = "test_resnet"  # timm's smallest ResNet: compiles in seconds on a CPU


def classifier(compile=False) -> ImageClassifier:
    optimizer = functools.partial(torch.optim.SGD, momentum=0.9)
    return ImageClassifier(ARCH, 10, optimizer, lambda step: 0.1, compile=compile)


def load(path, compile) -> ImageClassifier:
    optimizer = functools.partial(torch.optim.SGD, momentum=0.9)
    return ImageClassifier.load_from_checkpoint(
        path, optimizer=optimizer, lr_schedule=lambda step: 0.1, compile=compile, weights_only=False
    )


def fit(module: ImageClassifier, steps: int = 1, accelerator: str = "cpu") -> L.Trainer:
    """``steps`` steps on one seeded batch of 8 images of 32 px."""
    generator = torch.Generator().manual_seed(0)
    images, labels = (
        torch.randn(8, 3, 32, 32, generator=generator),
        torch.randint(10, (8,), generator=generator),
    )
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=8)
    trainer = L.Trainer(
        accelerator=accelerator,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, train_dataloaders=loader)
    return trainer


def fit_one_step_and_save(module: ImageClassifier, path) -> None:
    fit(module).save_checkpoint(path)


def logits(module: ImageClassifier) -> torch.Tensor:
    module.eval()
    with torch.no_grad():
        out = module(torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1)))
    module.train()  # as the Trainer expects to find it
    return out


def test_the_modes_offered_are_torch_compiles_own():
    from torch._inductor import list_mode_options

    assert set(COMPILE_MODES) <= set(list_mode_options())


def test_a_compiled_module_has_the_eager_modules_state_dict_keys():
    compiled = classifier("default")
    assert compiled.model._compiled_call_impl is not None  # compiled in place
    logits(compiled)  # traced and compiled now, not only marked
    assert list(compiled.state_dict()) == list(classifier().state_dict())


def test_checkpoints_load_across_compiled_and_eager_with_the_same_logits(tmp_path):
    eager = classifier()
    fit_one_step_and_save(eager, tmp_path / "eager.ckpt")
    compiled = load(tmp_path / "eager.ckpt", "default")
    assert compiled.model._compiled_call_impl is not None
    torch.testing.assert_close(logits(compiled), logits(eager))

    # a compiled training step, then its checkpoint
    fit_one_step_and_save(compiled, tmp_path / "compiled.ckpt")
    saved = torch.load(tmp_path / "compiled.ckpt", weights_only=False)["state_dict"]
    assert list(saved) == list(eager.state_dict())  # no _orig_mod. prefix
    back = load(tmp_path / "compiled.ckpt", False)
    assert back.model._compiled_call_impl is None
    torch.testing.assert_close(logits(back), logits(compiled))


def test_an_unknown_mode_is_one_line_listing_the_modes():
    with pytest.raises(UserError) as raised:
        check_command_line(["recipe=demo", "model.compile=fast"])
    message = str(raised.value)
    assert "\n" not in message and message.startswith("model.compile=fast: expected false")
    assert all(mode in message for mode in COMPILE_MODES)
    with pytest.raises(UserError, match="model.compile=fast: expected false"):
        classifier("fast")


def test_compile_false_and_a_mode_compose():
    cfg = check_command_line(["recipe=demo"])
    assert cfg.model.compile is False
    cfg = check_command_line(["recipe=demo", "model.compile=max-autotune-no-cudagraphs"])
    assert cfg.model.compile == "max-autotune-no-cudagraphs"


def test_cuda_graphs_on_a_cpu_run_are_one_line():
    with pytest.raises(UserError) as raised:
        target_checks.check_compile("reduce-overhead", "cpu")
    assert "\n" not in str(raised.value) and "CUDA graphs" in str(raised.value)
    assert "model.compile=default" in str(raised.value)
    target_checks.check_compile("default", "cpu")  # the other modes run on a CPU
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    module = classifier("reduce-overhead")
    module.trainer = trainer
    with pytest.raises(UserError, match="CUDA graphs"):
        module.setup("fit")  # a module built outside the config is checked when the Trainer sets it up


def test_the_published_recipes_compile_on_cuda_and_the_cpu_runs_stay_eager():
    """Every published run was a GPU/TPU run: compiled where the run is on CUDA (``auto``). The demo (its
    bench-speed numbers on a CPU) and any ``debug=toy`` run (seconds, on a CPU) stay eager anywhere."""
    recipes = sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml"))
    assert "demo" in recipes and len(recipes) > 10
    for recipe in recipes:
        cfg = check_command_line([f"recipe={recipe}"])
        assert cfg.model.compile == (False if recipe == "demo" else "auto"), recipe
    for recipe in ("goyal_8k", "you_alexnet_bn_8k"):  # a ResNet and the AlexNet-BN model config
        cfg = check_command_line([f"recipe={recipe}", "debug=toy"])
        assert cfg.model.compile is False, recipe


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_auto_compiles_on_cuda_and_stays_eager_elsewhere(device, tmp_path):
    """``model.compile=auto`` through a real fit: dynamo's own counter of compiled frames is the oracle."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    module = classifier("auto")
    assert rules.compile_mode("auto", "cuda") == "default" and rules.compile_mode("auto", "cpu") is None
    fit(module, steps=2, accelerator="gpu" if device == "cuda" else "cpu")
    compiled = counters["stats"]["unique_graphs"] > 0
    assert compiled == (device == "cuda"), dict(counters["stats"])
