"""MLPerf result logs (``mlperf.log``) judged by the ``mlperf-logging`` package, unchanged: its compliance checker
with the ruleset of the run's round, and its RCP checker (reference convergence points: olympic mean,
interpolation between batch sizes, the p-value rule) on the epochs to converge of several runs.

``mlperf-logging`` is the optional extra ``lightning-lars[mlperf]`` (make installs it); without it the callers
say so in one line (`MISSING`). Two limits of the package, met here:

* its 0.6.0 ruleset parses only v0.6's line format (``:::MLL <seconds> <key>: {"value": ..., "metadata": ...}``,
  the retired ``mlperf_compliance`` package's), which ``mllog`` does not write: a v0.6 round's log is written in
  that format (`V06Logger`), so the package's 0.6.0 checker judges it unchanged. A v0.6 log that an earlier
  version wrote with ``mllog`` is judged as before: the v0.6 rules on the lines as the 0.7.0 parser reads them,
  the time converted from milliseconds to the seconds v0.6 counted (its 20-minute init limit is ``20 * 60``);
* RCPs start with v1.0 (``rcp_checker`` refuses 0.6.0 and 0.7.0): runs of earlier rounds are judged against
  the v1.0 RCPs, and the verdict says so; the RCP checker reads only ``mllog`` lines, so it gets a v0.6 log's
  events rewritten in that format (the same keys, values, metadata and times).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from lightning_lars.core.errors import UserError

try:  # the optional extra
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser
    from mlperf_logging.rcp_checker import rcp_checker
except ImportError:
    mlp_compliance = mlp_parser = rcp_checker = None

TOKEN = ":::MLLOG "
TOKEN_V06 = ":::MLL "  # mlperf_compliance's line, the 0.6.0 parser's: ":::MLL <seconds> <key>: <json>"
MISSING = "mlperf-logging is not installed: pip install 'lightning-lars[mlperf]' (make installs it)"
FIRST_RCP_ROUND = "1.0.0"  # rcp_checker's oldest ruleset


def available() -> bool:
    return rcp_checker is not None


def optimizer_name(optimizer) -> str:
    """MLPerf's ``opt_name``: ``lars`` for our LARS (every form), ``sgd`` for torch's SGD, else the class name."""
    name = type(optimizer).__name__.lower()
    return "lars" if name == "lars" else name


def lars_keys(optimizer, schedule, round_: str) -> dict[str, float]:
    """The ``lars_*`` keys from the running optimizer's adapted param group and the LR schedule object (its
    peak, warmup and decay end in steps, the LR where the decay ends). v0.6 named the base LR and the warmup
    ``opt_*``."""
    group = next((g for g in optimizer.param_groups if g.get("trust_adaptation")), optimizer.param_groups[0])
    keys = {
        "lars_opt_momentum": float(group["momentum"]),
        "lars_opt_weight_decay": float(group["weight_decay"]),
        "lars_epsilon": float(group["eps"]),
    }
    if not all(
        hasattr(schedule, a) for a in ("peak_lr", "warmup_steps", "decay_end_step", "steps_per_epoch")
    ):
        return keys  # a schedule without warmup and decay phases (e.g. batch growth's wrapper): no LR keys
    prefix = "opt" if round_.startswith("0.6") else "lars_opt"
    keys |= {
        f"{prefix}_base_learning_rate": float(schedule.peak_lr),
        # TF's schedule (Google's recipes) states its warmup in its own epochs of N / B images
        f"{prefix}_learning_rate_warmup_epochs": getattr(
            schedule, "warmup_epochs", schedule.warmup_steps / schedule.steps_per_epoch
        ),
        "lars_opt_end_learning_rate": float(schedule(schedule.decay_end_step)),
        "lars_opt_learning_rate_decay_steps": int(schedule.decay_end_step - schedule.warmup_steps),
    }
    if hasattr(schedule, "power"):
        keys["lars_opt_learning_rate_decay_poly_power"] = float(schedule.power)
    return keys


def _require() -> None:
    if not available():
        raise UserError(f"judging an MLPerf log needs the MLPerf checkers; {MISSING}")


class V06Logger:
    """``mllog.MLLogger``'s ``start``/``end``/``event`` for a v0.6 round: each event one line of v0.6's format,
    ``:::MLL <seconds, 3 decimals> <key>: {"value": ..., "metadata": {...}}``, into ``logger``."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def _line(self, key: str, value=None, metadata=None, time_ms: float | None = None) -> None:
        seconds = (time.time() * 1e3 if time_ms is None else time_ms) / 1e3
        self.logger.info(
            f"{TOKEN_V06}{seconds:.3f} {key}: {json.dumps({'value': value, 'metadata': metadata or {}})}"
        )

    start = end = event = _line


def parse_line(line: str) -> dict | None:
    """The event of one log line, ``mllog``'s or v0.6's (its event type from the key: ``*_start``, ``*_stop``);
    None for a line that is not an event; raises ValueError, KeyError, TypeError or IndexError for a damaged one."""
    if TOKEN.strip() in line:
        event = json.loads(line.split(TOKEN, 1)[1])
        event["key"], event["metadata"]  # noqa: B018  (both are what the checkers read)
        return event
    if TOKEN_V06 not in line:
        return None
    seconds, rest = line.split(TOKEN_V06, 1)[1].split(" ", 1)
    key, _, payload = rest.partition(": ")
    body = json.loads(payload)
    kind = (
        "INTERVAL_START"
        if key.endswith("_start")
        else "INTERVAL_END"
        if key.endswith("_stop")
        else "POINT_IN_TIME"
    )
    return {"namespace": "", "time_ms": round(float(seconds) * 1e3), "event_type": kind, "key": key,
            "value": body["value"], "metadata": dict(body["metadata"])}  # fmt: skip


def is_v06_log(path: Path) -> bool:
    return any(TOKEN_V06 in line for line in Path(path).read_text(encoding="latin-1").splitlines())


def read_events(path: Path) -> list[dict]:
    """The events of an mllog or v0.6 log; a line that starts an event but is not one stops with its file:line."""
    events = []
    for number, line in enumerate(Path(path).read_text(encoding="latin-1").splitlines(), start=1):
        try:
            event = parse_line(line)
        except (IndexError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise UserError(
                f"{path}:{number}: not an MLPerf log line ({type(error).__name__}: {error}): {line[:100]!r};"
                " remove or repair that line (the checkers cannot read the log past it)"
            ) from None
        if event is not None:
            events.append(event)
    return events


def compliance_messages(path: Path, round_: str) -> list[str]:
    """What the package's compliance checker reports for ``path`` under training ruleset ``round_``; empty: it
    passes. For 0.6.0, see the module docstring."""
    _require()
    read_events(path)  # a damaged line: one error naming it, before the checker's own parse
    checker = mlp_compliance.make_checker("training", round_, quiet=False, werror=False)
    if round_ == "0.6.0" and not is_v06_log(path):  # written with mllog by an earlier version
        lines, errors = mlp_parser.parse_file(str(path), ruleset="0.7.0")
        lines = [line._replace(timestamp=line.timestamp / 1e3) for line in lines]  # ms -> v0.6's seconds
        if errors:
            checker.put_message(f"Log lines had parsing errors: {errors[0]}")
        checker.check_loglines(lines, "training_0.6.0/common.yaml")
    else:
        checker.check_file(str(path), f"training_{round_}/common.yaml")
    return [*checker.warnings.values(), *checker.overwritable.values(), *checker.not_overwritable]


@dataclass
class RcpVerdict:
    """The RCP checker's answer for a set of runs."""

    ruleset: str
    passed: bool
    message: str  # the checker's: "RCP found", "RCP Interpolation", "Insufficient convergence", ...
    epochs: list[float]  # epochs to converge per run as the checker read them (1e9: did not converge)
    global_batch: int
    # the RCP record it compared with (RCP Mean, Min Epochs, BS)
    reference: dict = field(default_factory=dict)
    submission_mean: float | None = None  # the olympic mean of ``epochs``
    note: str = ""

    def lines(self) -> list[str]:
        shown = ", ".join("not converged" if e >= 1e9 else f"{e:g}" for e in self.epochs)
        out = [
            f"rcp      mlperf_logging rcp_checker, training {self.ruleset} RCPs (pruned), global batch"
            f" {self.global_batch}: epochs to converge {shown} (each run's mlperf.log)"
        ]
        if self.reference:
            mean, low = self.reference.get("RCP Mean"), self.reference.get("Min Epochs")
            out.append(
                f"         reference mean {mean:.2f} epochs at batch {self.reference.get('BS')}, fastest"
                f" accepted mean {low:.2f}; ours (olympic mean) {self.submission_mean:.2f}"
            )
        out.append(f"         {self.message}: RCP test {'PASSED' if self.passed else 'FAILED'}")
        return out + ([f"         {self.note}"] if self.note else [])


def rcp_ruleset(round_: str) -> tuple[str, str]:
    """(the RCP ruleset for a run of ``round_``, a note when it is not the round's own)."""
    if tuple(int(x) for x in round_.split(".")) >= (1, 0, 0):
        return round_, ""
    return FIRST_RCP_ROUND, f"MLPerf v{round_} had no RCPs (they start with v1.0): judged against v1.0's"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def rcp_verdict(logs: list[Path], round_: str, workdir: Path) -> RcpVerdict:
    """Hand the runs' logs to the package's RCP checker (``check_directory``, which reads ``result_*.txt``:
    the logs are copied into ``workdir`` under those names) and collect its verdict."""
    _require()
    ruleset, note = rcp_ruleset(round_)
    workdir.mkdir(parents=True, exist_ok=True)
    for old in workdir.glob("result_*.txt"):
        old.unlink()
    copies = [workdir / f"result_{index}.txt" for index in range(len(logs))]
    for log, copy in zip(logs, copies):
        # names a damaged line; the checker's own reader would stop with a traceback
        events = read_events(log)
        if is_v06_log(log):  # the RCP checker reads mllog's lines only
            copy.write_text("".join(f"{TOKEN}{json.dumps(e)}\n" for e in events))
        else:
            shutil.copyfile(log, copy)
    if len(logs) < 3:
        note = "; ".join(
            filter(
                None, [note, "the olympic mean drops the fastest and the slowest run: it needs >= 3 seeds"]
            )
        )
    handler, root = _Records(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:  # the checker logs through the root logger: its lines are collected here, not printed
        read = [rcp_checker.read_submission_file(str(copy), ruleset, False) for copy in copies]
        epochs, batch = [r[1] for r in read], (read[0][2] if read else -1)
        passed, message, _ = rcp_checker.check_directory(
            str(workdir), "training", ruleset, False, False, rcp_pass="pruned_rcps"
        )
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    verdict = RcpVerdict(ruleset, bool(passed), message, epochs, int(batch), note=note)
    for record in handler.records:
        if record.msg.strip().startswith("RCP Record"):  # logging keeps a lone dict argument as the args
            verdict.reference = dict(record.args if isinstance(record.args, dict) else record.args[0])
        # not its "... faster" line
        if record.msg.strip().startswith("Submission mean epochs:") and record.args:
            verdict.submission_mean = float(record.args[0])
    return verdict


def rcp_report(round_: str, run_dirs: list[Path], workdir: Path) -> list[str]:
    """`make check`'s RCP lines for the runs in ``run_dirs`` (each with its ``mlperf.log``): the verdict, or
    one line saying why there is none."""
    if not available():
        return [f"rcp      not judged: {MISSING}"]
    logs = [Path(d) / "mlperf.log" for d in run_dirs]
    absent = [str(log) for log in logs if not log.exists()]
    if absent:
        return [f"rcp      not judged: no MLPerf log at {absent[0]} (the run wrote none)"]
    try:
        return rcp_verdict(logs, round_, Path(workdir)).lines()
    except UserError as error:
        return [f"rcp      not judged: {error}"]
