"""The champion alias over time: its moves, its daily score, and the rollback that moves it back.

Every move of the alias is read back from the registry, never from a separate log:

- a promotion: a version whose promote step moved the alias (decision ``promoted`` or
  ``forced``, not a backfill), with when (``trainyard.moved_at``) and from which version
  (``trainyard.moved_from``) it moved;
- a rollback: a record ``trainyard.rollbacks.<n>`` on the version the alias went back to (one per
  rollback to it), written by ``rollback`` under the promotion lock.

The champion's daily score is the drift monitor's: one run per monitored day in the monitoring
experiment (``steps/monitor.log_champion_day``). No Airflow here: ``trainyard rollback`` and
``trainyard report --champion`` call these functions.
"""

from __future__ import annotations

import getpass
import json
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, date, datetime
from typing import Any, Literal

from pipeline_steps.core import pipeline_gauges
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.locks import exclusive
from pipeline_steps.core.manifests import HoldoutMetrics
from pipeline_steps.core.settings import MlflowSettings, Settings
from pipeline_steps.core.stages import stage_records

log = logging.getLogger(__name__)

ROLLBACK_FROM_TAG = "trainyard.rollback_from"
ROLLBACK_REASON_TAG = "trainyard.rollback_reason"
ROLLBACK_BY_TAG = "trainyard.rollback_by"
ROLLBACK_AT_TAG = "trainyard.rollback_at"
"""The latest rollback to a version, readable at a glance on its page in the MLflow UI."""
ROLLBACK_RECORD_PREFIX = "trainyard.rollbacks."
"""``trainyard.rollbacks.<n>``: the n-th rollback to the version, as JSON (``from``,
``reason``, ``by``, ``at``); the flat tags above keep only the latest."""
DESCRIPTION_LIMIT = 5000
"""The longest model-version description MLflow's SQL stores keep."""

MoveKind = Literal["promotion", "release", "rollback"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Move:
    """One move of the champion alias."""

    kind: MoveKind
    at: str
    """Wall time, UTC, ISO."""
    to_version: str
    from_version: str | None
    """None when there was no champion before."""
    decision: str
    """The version's promote decision (``promoted``, ``forced``), or ``rollback``."""
    reasons: list[str]
    by: str
    """A promotion's trigger (``manual by ada``), a rollback's user."""
    logical_date: str | None = None
    """The logical date of the run that promoted; None for a rollback (no run, no date)."""
    run_id: str | None = None
    """The trainyard run that promoted (None for a rollback)."""
    mlflow_run_id: str | None = None
    """The MLflow training run of the version the alias moved to."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MonitoredDay:
    """The champion's score on one monitored day (a run of the monitoring experiment)."""

    day: str
    version: str
    """The champion version the monitor scored that day."""
    metrics: HoldoutMetrics
    """On the day's labelled rows; a metric the monitor could not compute is NaN."""
    mean_score: float
    drift_detected: bool
    crossed: list[str] = field(default_factory=list)
    """The drift signals that crossed on the window ending that day."""
    mlflow_run_id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChampionHistory:
    """The registered model's champion and challenger now, the alias's moves (oldest first) and
    the champion's daily score (oldest first)."""

    registered_model: str
    champion: str | None
    challenger: str | None
    moves: list[Move]
    staging: str | None = None
    """The staged candidate shadowing the champion (``release.mode: staged``)."""
    days: list[MonitoredDay]


def _iso(millis: int | None) -> str:
    if not millis:
        return ""
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")


def now_utc() -> str:
    """The wall time as recorded on model versions: UTC, ISO, to the millisecond (moves in
    the same second still sort in the order they happened)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _rollback_records(tags: dict[str, str]) -> list[tuple[int, dict[str, Any]]]:
    """The version's rollback records, by their number; an unreadable one is left out with a
    warning naming its tag."""
    records = []
    for key, value in tags.items():
        if not key.startswith(ROLLBACK_RECORD_PREFIX):
            continue
        try:
            number, record = int(key.removeprefix(ROLLBACK_RECORD_PREFIX)), json.loads(value)
        except (ValueError, json.JSONDecodeError):
            record = None
        if not isinstance(record, dict):
            log.warning("tag %s is not a rollback record; left out", key)
            continue
        records.append((number, record))
    return sorted(records, key=lambda pair: pair[0])


def _release_records(tags: dict[str, str]) -> list[tuple[int, dict[str, Any]]]:
    """The version's stage records that moved the champion alias to it from staging."""
    return [
        (n, record)
        for n, record in enumerate(stage_records(tags), start=1)
        if record.get("stage") == "champion" and record.get("kind") == "release"
    ]


def _recorded_move(kind: MoveKind, record: dict[str, Any], to: str, run_id: str | None) -> Move:
    """A release (a stage record) or a rollback (a rollback record) to version ``to``."""
    origin = str(record.get("from") or "none")
    return Move(
        kind=kind,
        at=str(record.get("at", "")),
        to_version=to,
        from_version=None if origin == "none" else origin,
        decision="released" if kind == "release" else "rollback",
        reasons=[str(record.get("reason", ""))],
        by=str(record.get("by", "unknown")),
        logical_date=record.get("day") if kind == "release" else None,
        mlflow_run_id=run_id,
    )


def versions_moves(versions: Iterable[Any]) -> list[Move]:
    """The alias's moves recorded on ``versions`` (MLflow ``ModelVersion`` objects of one
    registered model), oldest first. A move whose origin was not recorded (a promotion made
    before ``trainyard.moved_from`` existed) takes the previous move's target."""
    from pipeline_steps.core.manifests import PROMOTED
    from pipeline_steps.core.tracking import (
        DATE_TAG,
        DECISION_TAG,
        KIND_TAG,
        MOVED_AT_TAG,
        MOVED_FROM_TAG,
        RUN_TAG,
        recorded_reasons,
    )

    # (when, version, rollback number, the move, whether its origin was recorded)
    found: list[tuple[str, int, int, Move, bool]] = []
    for version in versions:
        tags = dict(version.tags or {})
        number = int(version.version)
        if tags.get(DECISION_TAG) in PROMOTED and tags.get(KIND_TAG) != "backfill":
            moved_from = tags.get(MOVED_FROM_TAG)
            move = Move(
                kind="promotion",
                at=tags.get(MOVED_AT_TAG) or _iso(version.creation_timestamp),
                to_version=str(number),
                from_version=None if moved_from in (None, "none") else moved_from,
                decision=tags[DECISION_TAG],
                reasons=recorded_reasons(tags),
                by=tags.get("trainyard.trigger", "unknown trigger"),
                logical_date=tags.get(DATE_TAG),
                run_id=tags.get(RUN_TAG),
                mlflow_run_id=version.run_id,
            )
            found.append((move.at, number, 0, move, moved_from is not None))
        records: list[tuple[MoveKind, int, dict[str, Any]]] = [
            ("release", n, r) for n, r in _release_records(tags)
        ]
        records += [("rollback", n, r) for n, r in _rollback_records(tags)]
        for kind, n, record in records:
            move = _recorded_move(kind, record, str(number), version.run_id)
            found.append((move.at, number, n, move, True))
    moves: list[Move] = []
    for *_, move, recorded in sorted(found, key=lambda entry: entry[:3]):
        if not recorded:
            move = replace(move, from_version=moves[-1].to_version if moves else None)
        moves.append(move)
    return moves


def replaced_version(moves: list[Move], version: str) -> tuple[str | None, str]:
    """The version that ``version`` replaced as the champion (what the rollback check compares
    it with and goes back to) and when it last became the champion. A version back by a
    rollback is not compared with the one it was rolled back from (that one was retired): it
    counts as what its own promotion or release replaced."""
    mine = [m for m in moves if m.to_version == version]
    if not mine:
        return None, ""
    entered = [m for m in mine if m.kind != "rollback"]
    return (entered[-1].from_version if entered else None), mine[-1].at


def champion_moves(client: Any, settings: MlflowSettings) -> list[Move]:
    """Every move of the champion alias of ``settings.registered_model``, oldest first."""
    versions = client.search_model_versions(f"name = '{settings.registered_model}'")
    return versions_moves(versions)


def _metric(run: Any, name: str) -> float:
    return float(run.data.metrics.get(name, math.nan))


def _day_metrics(run: Any) -> HoldoutMetrics:
    """The champion's metrics of a monitored day as the monitor logged them (``champion_<field>``
    for every number of ``HoldoutMetrics``), of the task its ``trainyard.task`` tag names; a day
    monitored before the tag was written is a ``binary`` one."""
    numbers: dict[str, Any] = {
        f.name: _metric(run, f"champion_{f.name}")
        for f in fields(HoldoutMetrics)
        if f.type in ("float", float)
    }
    rows = _metric(run, "champion_rows")
    return HoldoutMetrics(
        **numbers,
        rows=int(rows) if rows == rows else 0,
        task=run.data.tags.get("trainyard.task", "binary"),
    )


def champion_days(
    client: Any, settings: MlflowSettings, start: date | None = None, end: date | None = None
) -> list[MonitoredDay]:
    """The champion's score per monitored day in [``start``, ``end``] (either bound open when
    None), oldest first, from the monitoring experiment; empty when the monitor never ran.
    A metric the monitor could not compute (AUC on a day of one class) is NaN."""
    experiment = client.get_experiment_by_name(settings.monitoring_experiment)
    if experiment is None:
        return []
    first, last = (start or date.min).isoformat(), (end or date.max).isoformat()
    days: dict[str, MonitoredDay] = {}
    token = None
    while True:
        page = client.search_runs(
            [experiment.experiment_id],
            max_results=1000,
            page_token=token,
        )
        for run in page:
            tags = run.data.tags
            day = tags.get("trainyard.logical_date", "")
            if not day or not first <= day <= last:
                continue
            days[day] = MonitoredDay(
                day=day,
                version=tags.get("trainyard.champion_version", "?"),
                metrics=_day_metrics(run),
                mean_score=_metric(run, "champion_mean_score"),
                drift_detected=tags.get("trainyard.drift_detected") == "true",
                crossed=[c for c in tags.get("trainyard.drift_crossed", "").split(",") if c],
                mlflow_run_id=run.info.run_id,
            )
        token = page.token
        if not token:
            break
    return [days[day] for day in sorted(days)]


def _alias(client: Any, settings: MlflowSettings, alias: str) -> str | None:
    from pipeline_steps.core.tracking import aliased_version

    version = aliased_version(client, settings, alias)
    return str(version.version) if version is not None else None


def champion_history(
    settings: Settings, start: date | None = None, end: date | None = None
) -> ChampionHistory:
    """The champion's history in the registry and the monitoring experiment; the daily score
    limited to monitored days in [``start``, ``end``]. Raises what MLflow raises when the store
    cannot be reached."""
    from pipeline_steps.core.tracking import connect

    cfg = settings.mlflow
    client = connect(cfg)
    return ChampionHistory(
        registered_model=cfg.registered_model,
        champion=_alias(client, cfg, cfg.champion_alias),
        challenger=_alias(client, cfg, cfg.challenger_alias),
        moves=champion_moves(client, cfg),
        days=champion_days(client, cfg, start, end),
        staging=_alias(client, cfg, cfg.staging_alias),
    )


def decision_description(
    *,
    decision: str,
    reasons: list[str],
    logical_date: str,
    run_id: str,
    trigger: str,
    compared_with: str | None,
) -> str:
    """The text shown on the model version's page in the MLflow UI (Markdown): the promote
    step's decision, the version it was compared with, the trigger and one reason per line."""
    lines = [
        f"Decision: **{decision}** (run {run_id}, logical date {logical_date})",
        "",
        f"Compared with: {f'version {compared_with}' if compared_with else 'no champion'}",
        "",
        f"Trigger: {trigger}",
        "",
        "Reasons:",
        *[f"- {reason}" for reason in reasons],
    ]
    return fit_description("\n".join(lines))


def fit_description(text: str, line: str = "") -> str:
    """``text`` with the paragraph ``line`` after it, within ``DESCRIPTION_LIMIT`` characters:
    the start of ``text`` is cut, never ``line`` (the newest entry)."""
    tail = f"\n\n{line}" if line else ""
    if len(text) + len(tail) <= DESCRIPTION_LIMIT:
        return text + tail
    return text[: DESCRIPTION_LIMIT - len(tail) - 1] + "…" + tail


def current_user() -> str:
    """The operating-system user, as a rollback's author by default."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container running as an arbitrary uid)
        return os.environ.get("USER") or "unknown"


def _version_number(text: str) -> str:
    if not text.strip().isdigit() or int(text) < 1:
        raise StepError(f"--to-version {text!r}: a model version is a number from 1")
    return str(int(text))


_ANY = "any"


def rollback(
    settings: Settings, to_version: str, reason: str, user: str, *, expect_from: str | None = _ANY
) -> Move:
    """Move the champion alias back to ``to_version``, with an audit record on that version.

    Inputs: the settings (the registered model, the aliases, ``promotion.lock``), the version,
    why, and who. The champion is read, checked and moved under the promotion lock, so a
    promotion deciding at the same time sees the rollback, or the rollback sees the promotion
    (and records it as what it rolled back from). Returns the move. Raises ``StepError`` naming
    the parameter, with nothing changed, when the reason is empty, the version is not a
    version of the registered model, is not ready, was not registered by a promote step (no
    decision recorded: nothing says its run passed validation and evaluation), or is already
    the champion. With ``expect_from``, the alias moves only from that version (None: from no
    champion); otherwise nothing changes and ``StepError`` says what the champion is now."""
    from mlflow.exceptions import MlflowException

    from pipeline_steps.core import tracking

    cfg = settings.mlflow
    if not reason.strip():
        raise StepError("--reason is empty: say why the champion goes back")
    if not user.strip():
        raise StepError("--user is empty: say who rolls the champion back")
    number = _version_number(to_version)
    client = tracking.connect(cfg)
    try:
        target = client.get_model_version(cfg.registered_model, number)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise StepError(
            f"--to-version {number}: registered model {cfg.registered_model!r} has no version "
            f"{number}"
        ) from exc
    if target.status != "READY":
        raise StepError(f"--to-version {number}: the version is {target.status}, not READY")
    tags = dict(target.tags or {})
    if tracking.DECISION_TAG not in tags:
        raise StepError(
            f"--to-version {number}: no promote decision is recorded on it (it was not "
            "registered by a trainyard run), so nothing says it passed validation and evaluation"
        )
    with exclusive(
        settings.promotion.lock, f"promotion.{cfg.registered_model}", setting="promotion.lock"
    ):
        current = tracking.champion_version(client, cfg)
        current_version = str(current.version) if current else None
        if current_version == number:
            raise StepError(f"--to-version {number}: version {number} is already the champion")
        if expect_from != _ANY and current_version != expect_from:
            raise StepError(
                f"the champion changed from version {expect_from or 'none'} to "
                f"{current_version or 'none'} meanwhile; not rolling back over a model that "
                "was not judged"
            )
        move = Move(
            kind="rollback",
            at=now_utc(),
            to_version=number,
            from_version=current_version,
            decision="rollback",
            reasons=[reason.strip()],
            by=user.strip(),
            mlflow_run_id=target.run_id,
        )
        _record_rollback(client, cfg, target, move)
    log.info("champion moved back from version %s to %s", current_version or "none", number)
    pipeline_gauges.champion_rollback(settings)
    return move


def _record_rollback(client: Any, cfg: MlflowSettings, target: Any, move: Move) -> None:
    """Write the audit (tags, description), then move the alias; if moving it fails, put the
    audit back as it was, so no rollback is recorded that did not happen."""
    name, version = cfg.registered_model, move.to_version
    tags = dict(target.tags or {})
    count = len(_rollback_records(tags))
    origin = move.from_version or "none"
    record = {"from": origin, "reason": move.reasons[0], "by": move.by, "at": move.at}
    written = {
        ROLLBACK_FROM_TAG: origin,
        ROLLBACK_REASON_TAG: move.reasons[0],
        ROLLBACK_BY_TAG: move.by,
        ROLLBACK_AT_TAG: move.at,
        f"{ROLLBACK_RECORD_PREFIX}{count + 1}": json.dumps(record, sort_keys=True),
    }
    line = (
        f"Rollback: on {move.at} {move.by} moved the champion back to this version from "
        f"{f'version {origin}' if move.from_version else 'no champion'}: {move.reasons[0]}"
    )
    description = target.description or ""
    try:
        for key, value in written.items():
            client.set_model_version_tag(name, version, key, value)
        client.update_model_version(name, version, description=fit_description(description, line))
        client.set_registered_model_alias(name, cfg.champion_alias, version)
    except Exception:
        for key in written:
            try:
                if key in tags:
                    client.set_model_version_tag(name, version, key, tags[key])
                else:
                    client.delete_model_version_tag(name, version, key)
            except Exception as exc:  # the original error is the one to report
                log.warning("rollback audit tag %s of version %s not undone: %s", key, version, exc)
        try:
            client.update_model_version(name, version, description=description)
        except Exception as exc:
            log.warning("description of version %s not restored: %s", version, exc)
        raise
