"""The typed config schema and its rules, in process: each mistake is one `UserError` line naming the full key.
A type, choice or key the schema refuses is reported in Hydra's and OmegaConf's own words (the oracle: OmegaConf's
message when the same value is assigned to the schema's field); a rule only we know names the fix. For the
schema's defaults and field order, the oracle is conf/train.yaml as a user reads it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import yaml
from helpers import unset_keys
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from lightning_lars.config import groups, schema
from lightning_lars.config.jobs import compose_job
from lightning_lars.config.paths import CONF_DIR
from lightning_lars.core.errors import UserError
from lightning_lars.recipe.plan import check_command_line


def one_line_error(*overrides: str) -> str:
    with pytest.raises(UserError) as raised:
        check_command_line(["recipe=demo", *overrides])
    message = str(raised.value)
    assert "\n" not in message, message
    return message


def omegaconf_reason(dotted_key: str, value) -> str:
    """What OmegaConf says when ``value`` is assigned to the schema's field: its first line."""
    node = OmegaConf.structured(schema.TrainConfig)
    parent, _, name = dotted_key.rpartition(".")
    with pytest.raises(ValidationError) as raised:
        setattr(OmegaConf.select(node, parent) if parent else node, name, value)
    return str(raised.value).splitlines()[0]


def test_train_yaml_sets_every_schema_key_in_the_schema_order_and_is_their_one_home():
    train = yaml.safe_load((CONF_DIR / "train.yaml").read_text())
    own = {key: value for key, value in train.items() if key != "defaults"}
    fields = [f.name for f in dataclasses.fields(schema.TrainConfig)]
    assert list(own) == fields[: len(own)]  # --cfg job prints the schema's order
    # the schema gives each key its type and no value: every leaf left ??? until train.yaml sets it
    node = OmegaConf.structured(schema.TrainConfig)
    sections = {key: value for key, value in own.items() if isinstance(value, dict) and value}
    assert unset_keys(node) == {key for key in own if key not in sections} | {
        f"{key}.{name}" for key, value in sections.items() for name in value
    }
    merged = OmegaConf.merge(node, OmegaConf.masked_copy(OmegaConf.create(train), list(own)))
    assert unset_keys(merged) == {"batch.global_size"}  # the recipe's to give
    assert train["defaults"][0] == schema.SCHEMA_NAME  # composed first: every YAML file merges into its types


@pytest.mark.parametrize(
    "override, value",
    [
        ("batch.global_size=abc", "abc"),
        ("batch.global_size=1.5", 1.5),
        ("batch.max_per_device=big", "big"),
        ("seed=abc", "abc"),
        ("run.validate_at_end=maybe", "maybe"),
        ("evaluation.offset_epochs=one", "one"),
        ("epoch_length.num_train_images=all", "all"),
        ("batch.global_size=null", None),
    ],
)
def test_a_wrong_type_is_one_line_in_omegaconfs_words_naming_the_key(override, value):
    key = override.partition("=")[0]
    message = one_line_error(override)
    assert f"Error merging override {override}" in message and omegaconf_reason(key, value) in message, (
        message
    )
    assert f"full_key: {key}" in message, message


def test_an_unknown_mode_names_the_modes_of_the_enum():
    message = one_line_error("epoch_length.mode=ragged")
    assert omegaconf_reason("epoch_length.mode", "ragged") in message
    assert "expected one of [" + ", ".join(mode.name for mode in schema.EpochMode) + "]" in message


@pytest.mark.parametrize(
    "overrides, key, fields",
    [
        (["+run.resume=true"], "run.resume", schema.RunConfig),
        (["+batch.size=64"], "batch.size", schema.BatchConfig),
        (["+evaluation.every=2"], "evaluation.every", schema.EvaluationConfig),
        (["+epochs=3"], "epochs", schema.TrainConfig),
    ],
)
def test_a_key_hydras_plus_adds_past_the_schema_is_one_line_listing_the_keys_it_has(overrides, key, fields):
    message = one_line_error(*overrides)
    names = ", ".join(f.name for f in dataclasses.fields(fields))
    assert message.startswith(f"unknown config key '{key}': nothing reads it") and message.endswith(
        f"(its keys: {names})"
    )


@pytest.mark.parametrize(
    "override, name, kind",
    [
        ("run.resume=true", "resume", "RunConfig"),
        (
            "+deviations=[{technique: BN, published: '32', ours: '16', why: ok, source: x}]",
            "source",
            "Deviation",
        ),
        ("callbacks.checkpoint.every_n_train_step=5", "every_n_train_step", "CheckpointCallback"),
    ],
)
def test_a_key_the_schema_lacks_is_refused_in_omegaconfs_words(override, name, kind):
    node = OmegaConf.structured(getattr(schema, kind, None) or groups_kind(kind))
    with pytest.raises(Exception) as raised:  # the oracle: OmegaConf setting the key on the schema itself
        setattr(node, name, 1)
    assert str(raised.value).splitlines()[0] in one_line_error(override)


def groups_kind(name: str) -> type:
    return next(
        kind for schemas in groups.SCHEMAS.values() for kind in schemas.values() if kind.__name__ == name
    )


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["+deviations=[{technique: BN, published: '32', ours: '16'}]"], "deviations[0].why"),
        (["batch.global_size=???"], "batch.global_size"),
    ],
)
def test_a_missing_value_is_one_line_naming_the_key(overrides, key):
    assert one_line_error(*overrides).startswith(f"{key} is not set: give it a value ({key}=VALUE")


@pytest.mark.parametrize(
    "overrides, start",
    [
        (["batch.max_per_device=0"], "batch.max_per_device=0: expected an integer >= 1"),
        (["batch.bn_group=-2"], "batch.bn_group=-2: expected an integer >= 1"),
        (["trainer.max_epochs=0"], "trainer.max_epochs=0: expected an integer >= 1 (or -1: no limit)"),
        (["seed=-3"], "seed=-3: expected an integer in 0..4294967295"),
        (["seed=4294967296"], "seed=4294967296: expected an integer in 0..4294967295"),
        (["scheduler.base_lr=0"], "scheduler.base_lr=0: a learning rate must be > 0; set scheduler.base_lr"),
        (["scheduler.start_lr=-1"], "scheduler.start_lr=-1: a learning rate must be >= 0"),
        (["optimizer.momentum=1.0"], "optimizer.momentum=1.0: momentum must be in [0, 1)"),
        (["epoch_length.num_train_images=0"], "epoch_length.num_train_images=0: expected an integer >= 1"),
        (["epoch_length.mode=padded"], "epoch_length.workers is not set: mode padded needs it"),
        (["epoch_length.mode=fixed"], "epoch_length.steps is not set: mode fixed needs it"),
        (["epoch_length.steps=40"], "epoch_length.steps is only read in mode fixed (mode is drop_last)"),
        (["epoch_length.workers=8"], "epoch_length.workers is only read in mode padded (mode is drop_last)"),
        (
            ["epoch_length.mode=fixed", "epoch_length.steps=0"],
            "epoch_length.steps=0: expected an integer >= 1",
        ),
        (
            ["evaluation.every_n_steps=10"],
            "evaluation.every_n_epochs and evaluation.every_n_steps: set exactly one",
        ),
        (
            ["evaluation.every_n_epochs=null"],
            "evaluation.every_n_epochs and evaluation.every_n_steps: set exactly one",
        ),
        (["evaluation.every_n_epochs=0"], "evaluation.every_n_epochs=0: expected an integer >= 1"),
        (["evaluation.offset_epochs=-1"], "evaluation.offset_epochs=-1: expected an integer >= 0"),
        (["evaluation.offset_steps=5"], "evaluation.offset_steps goes with every_n_steps"),
        (
            ["evaluation.every_n_epochs=null", "evaluation.every_n_steps=10", "evaluation.offset_epochs=1"],
            "evaluation.offset_epochs goes with every_n_epochs",
        ),
        (
            ["+trainer.check_val_every_n_epoch=4", "evaluation.offset_epochs=1"],
            "trainer.check_val_every_n_epoch is not read",
        ),
        (["+trainer.val_check_interval=4"], "trainer.val_check_interval is not read"),
        (
            ["deviations=[{technique: BN, published: '32', ours: '16', why: ' '}]"],
            "deviations[0].why is empty",
        ),
    ],
)
def test_a_rule_between_values_is_one_line_naming_the_key(overrides, start):
    message = one_line_error(*overrides)
    assert message.startswith(start), message


@pytest.mark.parametrize(
    "override, value",
    [
        ("scheduler.base_lr=abc", "abc"),
        ("optimizer.weight_decay=true", True),
        ("callbacks.checkpoint.save_last=maybe", "maybe"),
        ("callbacks.trust_ratio.every_n_steps=abc", "abc"),
        ("data.resolution=big", "big"),
    ],
)
def test_values_under_the_typed_groups_are_refused_in_omegaconfs_words(override, value):
    key = override.partition("=")[0]
    group, _, name = key.partition(".")
    cfg = compose_job(["recipe=demo"])  # the oracle: OmegaConf assigning the value to the composed node
    parent, _, leaf = key.rpartition(".")
    with pytest.raises(ValidationError) as raised:
        setattr(OmegaConf.select(cfg, parent), leaf, value)
    message = one_line_error(override)
    assert str(raised.value).splitlines()[0] in message and f"full_key: {key}" in message, message


def test_the_trainer_counts_the_plan_reads_are_integers():
    assert one_line_error("trainer.max_epochs=abc").startswith(
        "trainer.max_epochs=abc: expected an integer >= 1 (or -1: no limit)"
    )


def test_a_key_an_open_group_does_not_set_names_the_plus_that_adds_it():
    message = one_line_error("model.model_kwargs={drop_rate: 0.1}")
    assert "To append to your config use +model.model_kwargs={drop_rate: 0.1}" in message, message


def test_numbers_print_as_written_and_the_mode_as_its_name():
    """``--cfg job`` is unchanged by the schema: an int stays an int in the open groups, the Enum prints its name."""
    cfg = compose_job(
        [
            "recipe=demo",
            "scheduler.base_lr=10",
            "epoch_length.mode=padded",
            "epoch_length.workers=4",
            "seed=7",
        ]
    )
    text = OmegaConf.to_yaml(cfg)  # what Hydra's --cfg job prints
    assert "  base_lr: 10\n" in text and "  mode: padded\n" in text and "seed: 7\n" in text
    assert cfg.epoch_length.mode is schema.EpochMode.padded
    assert text.count("mode: padded") == 1


@pytest.mark.parametrize("model_schema", [schema.ModelConfig, schema.ResNetModelConfig])
def test_the_model_schema_is_the_image_classifiers_signature(model_schema):
    """Fields plus ALSO_TAKES: every argument of the class the configs build, except the two the run passes."""
    from hydra.utils import get_object

    model = {schema.ModelConfig: "alexnet_bn", schema.ResNetModelConfig: "resnet"}[model_schema]
    target = get_object(yaml.safe_load((CONF_DIR / "model" / f"{model}.yaml").read_text())["_target_"])
    arguments = set(inspect.signature(target).parameters) - {"optimizer", "lr_schedule"}
    fields = {f.name for f in dataclasses.fields(model_schema)} - {"_target_"}
    assert fields | set(model_schema.ALSO_TAKES) == arguments and not fields & set(model_schema.ALSO_TAKES)


@pytest.mark.parametrize(
    "model, model_schema", [("resnet", schema.ResNetModelConfig), ("alexnet_bn", schema.ModelConfig)]
)
def test_each_model_file_sets_its_schemas_fields_in_order(model, model_schema):
    text = yaml.safe_load((CONF_DIR / "model" / f"{model}.yaml").read_text())
    assert text["defaults"] == [f"/{model}_model_schema@_here_", "_self_"]
    assert [key for key in text if key != "defaults"] == [f.name for f in dataclasses.fields(model_schema)]


def test_a_model_key_is_typed_and_its_other_arguments_need_no_plus():
    node = OmegaConf.structured(schema.ResNetModelConfig)
    with pytest.raises(ValidationError) as raised:
        node.label_smoothing = "abc"
    assert str(raised.value).splitlines()[0] in one_line_error("model.label_smoothing=abc")
    assert one_line_error("+model.dropout=0.1").startswith(
        "unknown config key 'model.dropout': nothing reads it"
    )
    cfg = check_command_line(["recipe=demo", "+model.model_kwargs={drop_rate: 0.1}"])
    assert cfg.model.model_kwargs.drop_rate == 0.1


@pytest.mark.parametrize(
    "body, start",
    [
        ("batch:\n  global_size: abc\n", "Value 'abc' of type 'str' could not be converted to Integer"),
        ("epoch_length:\n  foo: 1\n", "Key 'foo' not in 'EpochLengthConfig'"),
        (
            "deviations:\n  - {technique: a, published: b, ours: c, whyy: d}\n",
            "Key 'whyy' not in 'Deviation'",
        ),
        ("model:\n  dropout: 0.1\n", "Key 'dropout' not in 'ResNetModelConfig'"),
    ],
)
def test_a_mistake_in_a_users_recipe_file_names_the_file(body, start, tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(
        f"# @package _global_\ndefaults:\n  - demo\n  - _self_\n{body}"
    )
    with pytest.raises(UserError) as raised:
        check_command_line(["recipe=mine", f"hydra.searchpath=[file://{tmp_path}]"])
    message = str(raised.value)
    assert message.startswith("In 'recipe/mine'") and start in message and "\n" not in message, message


def test_a_users_recipe_with_its_package_line_composes_at_the_top(tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - demo\n  - _self_\nseed: 3\n"
    )
    cfg = check_command_line(["recipe=mine", f"hydra.searchpath=[file://{tmp_path}]"])
    assert cfg.seed == 3 and cfg.model.arch == "resnet10t" and "recipe" not in cfg  # its keys at the top


def test_a_searchpath_folder_that_is_not_there_is_one_line(tmp_path):
    """Hydra passes over a missing searchpath folder without a word: the user's recipes there never load."""
    missing = tmp_path / "my-conf"
    with pytest.raises(UserError) as raised:
        check_command_line(["recipe=demo", f"hydra.searchpath=[file://{missing}]"])
    message = str(raised.value)
    assert f"{missing} is no folder" in message and "\n" not in message
    missing.mkdir()
    assert check_command_line(["recipe=demo", f"hydra.searchpath=[file://{missing}]"]).seed == 0


def test_a_users_recipe_that_sets_its_published_top1_moves_its_target_with_it(tmp_path):
    """A recipe of one's own on goyal_8k with another result: the time to target and make check's test read it
    (the recipe's target is ``${published.top1}``, not a second copy of 76.26)."""
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - goyal_8k\n  - _self_\npublished:\n  top1: 75.0\n"
    )
    cfg = check_command_line(["recipe=mine", f"hydra.searchpath=[file://{tmp_path}]"])
    assert cfg.published.top1 == 75.0 and cfg.callbacks.time_to_target.target_top1 == 75.0


@pytest.mark.parametrize("first_line", ["", "# @package recipe\n"])
def test_a_users_recipe_without_the_global_package_line_is_told_the_line(first_line, tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(f"{first_line}seed: 3\n")
    with pytest.raises(UserError, match="start the file with the line # @package _global_"):
        check_command_line(["recipe=mine", f"hydra.searchpath=[file://{tmp_path}]"])


# Arguments the run passes itself, not the config: the parameters and the LR, the schedule's clock and peak LR,
# the per-device batch and the seed, a process group.
PASSED_BY_THE_RUN = {"params", "lr", "shard_group", "loss_group", "clock", "peak_lr", "batch_size", "seed"}
GROUP_FILES = [
    (group, name, kind)
    for group, schemas in groups.SCHEMAS.items()
    for name, kind in schemas.items()
    if group != "callback"
]


@pytest.mark.parametrize("group, name, kind", GROUP_FILES, ids=lambda v: getattr(v, "__name__", v))
def test_each_group_file_sets_its_schemas_fields_in_order(group, name, kind):
    text = yaml.safe_load((CONF_DIR / group / f"{name}.yaml").read_text())
    assert text["defaults"] == [f"/{groups.schema_name(group, name)}@_here_", "_self_"]
    assert [key for key in text if key != "defaults"] == [f.name for f in dataclasses.fields(kind)]


def test_each_default_callback_entry_sets_its_schemas_fields_in_order():
    text = yaml.safe_load((CONF_DIR / "callbacks" / "default.yaml").read_text())
    entries = {key: value for key, value in text.items() if key != "defaults"}
    assert text["defaults"] == [f"/{groups.schema_name('callback', n)}@{n}" for n in entries] + ["_self_"]
    for entry, keys in entries.items():
        assert list(keys) == [f.name for f in dataclasses.fields(groups.SCHEMAS["callback"][entry])], entry


@pytest.mark.parametrize(
    "kind",
    # sorted: pytest-xdist's workers must each collect the same list (a set's order differs between processes)
    sorted(
        {kind for schemas in groups.SCHEMAS.values() for kind in schemas.values()}, key=lambda k: k.__name__
    ),
    ids=lambda k: k.__name__,
)
def test_each_group_schema_is_its_targets_signature(kind):
    """Fields plus ALSO_TAKES: the ``_target_``'s arguments that a config may set (the oracle: ``inspect`` on the
    class or function the config files name). ``**``: further keys are the user's own, added with ``+``."""
    from hydra.utils import get_object

    targets = {
        text["_target_"]
        for group, name, k in GROUP_FILES
        if k is kind
        and "_target_" in (text := yaml.safe_load((CONF_DIR / group / f"{name}.yaml").read_text()))
    } | {
        entry["_target_"]
        for name, entry in yaml.safe_load((CONF_DIR / "callbacks" / "default.yaml").read_text()).items()
        if name != "defaults" and groups.SCHEMAS["callback"][name] is kind
    }
    fields = {f.name for f in dataclasses.fields(kind)} - {"_target_", "_partial_", "base_lr", "base_batch"}
    also = set(kind.ALSO_TAKES) if hasattr(kind, "ALSO_TAKES") else set()
    for target in targets:
        parameters = inspect.signature(get_object(target)).parameters
        takes_more = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        named = (
            set(parameters)
            - PASSED_BY_THE_RUN
            - {p for p in parameters if parameters[p].kind.name.startswith("VAR")}
        )
        if "**" in also:
            assert fields <= named or takes_more, target
        else:
            assert fields | also == named and not fields & also, target


def test_a_choice_reaches_its_target_as_text_not_as_the_schemas_enum():
    """An optimizer's ``form`` goes into its state dict, so into every checkpoint: as our Enum it would need our
    class to unpickle, which ``torch.load(weights_only=True)`` refuses; the run instantiates from `plain`."""
    import io

    import torch
    from hydra.utils import instantiate

    cfg = compose_job(["recipe=demo", "optimizer.form=you2017", "optimizer.implementation=eager"])
    assert isinstance(cfg.optimizer.form, groups.LarsForm)  # typed in the composed config
    optimizer = instantiate(schema.plain(cfg.optimizer))([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    assert type(optimizer.defaults["form"]) is str and optimizer.defaults["form"] == "you2017"
    saved = io.BytesIO()
    torch.save(optimizer.state_dict(), saved)
    saved.seek(0)
    assert torch.load(saved, weights_only=True)["param_groups"][0]["form"] == "you2017"
