"""MLCommons' reference convergence points (RCPs) for ResNet-50, read from the installed mlperf-logging package,
and the reference point at any global batch as MLCommons' RCP checker computes it.

An RCP entry records how many epochs MLCommons' reference hyperparameters at one global batch needed to reach
75.9 % top-1 over many runs. The file is ``mlperf_logging/rcp_checker/training_4.0.0/rcps_resnet.json``, the
newest ruleset that still has ResNet-50 (4.1.0 and later dropped the benchmark). ``recipes/resnet_ref_<B>.yaml``
is one recipe per entry; the recipe card prints an entry, or the point between two entries, beside any LARS
recipe at the same batch.

Statistics and interpolation are the checker's own (``RCP_Checker``: the mean without the fastest and the
slowest run, ``np.std`` of all runs, linear interpolation between the nearest points that survive its pruning,
as ``package_checker`` runs it), called here rather than rewritten, so the card says what the checker would.

``opt_learning_rate_decay_steps`` is steps in this file, but training_1.0.0 wrote five of its entries as
epoch counts (35, 37, 42, 48, 58) that later rulesets converted with N / B; `decay_readings` shows both.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass, field
from functools import cache

from lightning_lars.core.errors import UserError

RULESET = "4.0.0"
RCP_PACKAGE = "mlperf_logging.rcp_checker"
RCP_FILE = f"training_{RULESET}/rcps_resnet.json"
EARLIER_FILE = "training_1.0.0/rcps_resnet.json"  # the first ruleset with RCPs: some decay lengths in epochs
RCP_PASS = "pruned_rcps"  # what package_checker.py passes to check_directory
RECIPE_PREFIX = "resnet_ref_"  # the RCP file's own entry names, used as recipe names
TARGET_TOP1 = 75.9  # MLPerf's ResNet-50 quality target, in % top-1
NUM_TRAIN_IMAGES = (
    1_281_167  # ILSVRC-2012 train: MLPerf's train_samples (a fact of the data, no config default)
)
INSTALL = "pip install mlperf-logging"


def _read(relative: str) -> dict:
    try:
        resource = importlib.resources.files(RCP_PACKAGE) / relative
        return json.loads(resource.read_text())
    except ModuleNotFoundError as error:
        raise UserError(f"MLCommons' reference convergence points need mlperf-logging: {INSTALL}") from error
    except FileNotFoundError as error:
        raise UserError(
            f"the installed mlperf-logging has no {relative}: {INSTALL} (4.1.68 or newer has it)"
        ) from error


@cache
def entries() -> dict[str, dict]:
    """The RCP file's entries, by name (``resnet_ref_3264``), as the package ships them."""
    return _read(RCP_FILE)


@cache
def earlier_entries() -> dict[str, dict]:
    return _read(EARLIER_FILE)


@cache
def checker():
    """MLCommons' ``RCP_Checker`` over the same file (it finds the file from ruleset and benchmark)."""
    try:
        # here, not at the top: mlperf-logging (and scipy, which it imports) is optional; only the card needs it
        from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker
    except ImportError as error:
        raise UserError(f"MLCommons' RCP checker does not import ({error}): {INSTALL}") from error
    return RCP_Checker("training", RULESET, "resnet", verbose=False)


def names() -> list[str]:
    return sorted(entries(), key=lambda name: entries()[name]["BS"])


def unknown_reference(name: str) -> UserError:
    listing = ", ".join(names())
    return UserError(
        f"no MLCommons reference point '{name}' in mlperf_logging {RCP_FILE}; those that exist: {listing}"
        " (the card of any LARS recipe shows the point interpolated at its batch)"
    )


@dataclass(frozen=True)
class ReferencePoint:
    """One entry of the RCP file, or the checker's interpolation between two (``hyperparams`` empty)."""

    name: str
    batch: int
    mean_epochs: float  # the checker's "RCP Mean"
    stdev_epochs: float  # the checker's "RCP Stdev"
    min_epochs: float  # the fastest 5-run mean the checker still accepts ("Min Epochs")
    epochs_to_converge: tuple[int, ...] = ()  # in the file's order; empty when interpolated
    hyperparams: dict = field(default_factory=dict, compare=False)


def _point(name: str, record: dict) -> ReferencePoint:
    return ReferencePoint(
        name=name,
        batch=int(record["BS"]),
        mean_epochs=float(record["RCP Mean"]),
        stdev_epochs=float(record["RCP Stdev"]),
        min_epochs=float(record["Min Epochs"]),
        epochs_to_converge=tuple(entries().get(name, {}).get("Epochs to converge", ())),
        hyperparams=dict(record.get("Hyperparams") or {}),
    )


def _name_of(record: dict) -> str:
    return next(name for name, entry in entries().items() if entry["BS"] == record["BS"])


def reference_point(name: str) -> ReferencePoint:
    """The entry ``name`` with the checker's statistics; a one-line error listing the entries when it is none."""
    if name not in entries():
        raise unknown_reference(name)
    return _point(name, checker().rcp_data[name])


@dataclass(frozen=True)
class ReferenceAtBatch:
    """What the checker compares a submission at ``batch`` with (``check_directory``'s cases, in its order)."""

    batch: int
    how: str  # one line: which point and why
    point: ReferencePoint | None  # None above the largest batch: the checker asks for a new RCP
    neighbours: tuple[ReferencePoint, ...] = ()  # the entries it interpolated between


def pruned_entry_at(batch: int) -> str | None:
    """The entry at ``batch`` that the checker prunes (it converges slower than the line between the entries
    around it, so the checker interpolates instead), or None."""
    name = next((n for n, entry in entries().items() if entry["BS"] == batch), None)
    return name if name is not None and name not in checker().pruned_rcp_data else None


def at_batch(batch: int) -> ReferenceAtBatch:
    rcp = checker()
    found = rcp._find_rcp(batch, RCP_PASS)
    if found is not None:
        name = _name_of(found)
        return ReferenceAtBatch(batch, f"{name}, the entry at this batch", _point(name, found))
    low, high = rcp._find_top_min_rcp(batch, RCP_PASS), rcp._find_bottom_max_rcp(batch, RCP_PASS)
    if low is not None and high is not None:
        name, record = rcp._create_interp_rcp(batch, low, high)
        pair = (_point(_name_of(low), low), _point(_name_of(high), high))
        how = f"interpolated between {pair[0].name} and {pair[1].name}, the nearest the checker keeps"
        if pruned_entry_at(batch):
            how += f" ({pruned_entry_at(batch)} converges slower than that line: the checker prunes it)"
        return ReferenceAtBatch(batch, how, _point(name, record), pair)
    if high is not None:
        smallest = rcp._find_min_rcp(RCP_PASS)
        name = _name_of(smallest)
        how = f"below every entry: the checker holds a run at this batch to {name}"
        return ReferenceAtBatch(batch, how, _point(name, smallest))
    how = "above every entry: the checker asks a submission at this batch for a new RCP"
    return ReferenceAtBatch(batch, how, None)


@dataclass(frozen=True)
class DecayReadings:
    """An entry's ``opt_learning_rate_decay_steps`` as written, and in epochs both ways of counting an epoch."""

    as_written: int  # steps, as the file says
    epochs_of_n_over_b: float  # as_written / (N / B): an epoch count converted with the fractional epoch
    epochs_of_whole_steps: float  # as_written / (N // B): in the reference's drop-remainder epochs
    earlier: int | None  # training_1.0.0's value for the same entry, where it differs (there: epochs)


def decay_readings(name: str) -> DecayReadings:
    entry = reference_point(name)
    written = int(entry.hyperparams["opt_learning_rate_decay_steps"])
    earlier = earlier_entries().get(name, {}).get("Hyperparams", {}).get("opt_learning_rate_decay_steps")
    return DecayReadings(
        as_written=written,
        epochs_of_n_over_b=written / (NUM_TRAIN_IMAGES / entry.batch),
        epochs_of_whole_steps=written / (NUM_TRAIN_IMAGES // entry.batch),
        earlier=None if earlier in (None, written) else int(earlier),
    )
