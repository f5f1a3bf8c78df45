"""Serving: the champion scores rows with features read from the Feast online store.

``trainyard predict --logical-date D`` takes the path a serving system takes, not the training
set's: the day's validated sources are written as Feast offline sources of a store of its own,
its online store is filled with ``materialize_incremental`` as the day goes on, and each row is
scored with the features ``get_online_features`` returns for the domain's feature service (the
one the features step joins point in time), with the champion the registry's alias names.

The contract (docs/serving.md): a row with event timestamp ``t`` is read right after the online
store was materialised up to ``t`` (inclusive), so the store holds, per entity, the latest source
row stamped at or before ``t``. A value older than its view's ttl at ``t`` is served as missing,
as the point-in-time join leaves it. Read this way, every row's online features equal its
point-in-time features of the same sources, and the champion's probability equals the one the
evaluate step computes for the same row. Rows are therefore served hour by hour in event-time
order; a store read later (at the end of the day) holds newer values and no longer agrees.

The champion's feature columns and their order come from its training run: the model version's
``trainyard.run_id`` tag names the run, whose features manifest (``runs/<run>/features.json``)
lists them. The service's fields must still be those columns: a feature repository changed
since the champion trained is an error, not a silent mismatch.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from pipeline_steps.core.domain import Domain, FeatureColumns, cast_features, feature_columns
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_store import earliest_event, materialize_online, scratch_store
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import FeaturesManifest, ManifestError, load_manifest
from pipeline_steps.core.settings import Settings
from pipeline_steps.core.tasks import task_spec

log = logging.getLogger(__name__)
PROBABILITY = "probability"
"""Column of a binary task's predictions: the champion's probability of the positive label."""
PREDICTION = "prediction"
"""Column of the predicted value (regression) or the predicted class's name (multiclass,
ordinal: beside a ``probability_<class>`` column per class)."""
OUTPUT_FORMATS = (".parquet", ".csv")


# -- online features ----------------------------------------------------------------------------


def read_online(store: Any, service: Any, rows: pd.DataFrame, at: datetime) -> pd.DataFrame:
    """The feature service's values in the online store for ``rows`` (their join keys), one row
    each in their order, as a request at ``at`` sees them: a value stamped before ``at`` minus
    its view's ttl is missing (None), as in the point-in-time join."""
    views = {p.name: store.get_feature_view(p.name) for p in service.feature_view_projections}
    keys = sorted({key for view in views.values() for key in view.join_keys})
    response = store.get_online_features(
        features=service, entity_rows={key: rows[key].tolist() for key in keys}
    ).to_dict(include_event_timestamps=True)
    values: dict[str, list[Any]] = {}
    for projection in service.feature_view_projections:
        ttl = views[projection.name].ttl or timedelta(0)
        oldest = (at - ttl).timestamp() if ttl > timedelta(0) else None
        for feature in projection.features:
            stamps = response[f"{feature.name}__ts"]
            values[feature.name] = [
                value if oldest is None or stamp >= oldest else None
                for value, stamp in zip(response[feature.name], stamps, strict=True)
            ]
    return pd.DataFrame(values, index=rows.index, dtype=object)  # typed by cast_features


def serve_rows(store: Any, service: Any, rows: pd.DataFrame, start: datetime) -> pd.DataFrame:
    """``rows`` (at least one) with the service's online features, each read right after the
    online store was materialised up to its ``event_timestamp`` (hour by hour in event-time
    order, as a serving system lives the day); the first materialisation loads the sources from
    ``start``."""
    served = []
    for at, group in rows.groupby("event_timestamp", sort=True):
        moment = pd.Timestamp(at).to_pydatetime()
        materialize_online(store, service, start, moment)
        served.append(group.join(read_online(store, service, group, moment)))
    return pd.concat(served).loc[rows.index]


# -- requests ------------------------------------------------------------------------------------


def read_request(path: str, domain: Domain) -> pd.DataFrame:
    """Rows to score from a parquet or CSV file (by extension), with the labelled dataset's
    column types; raises ``StepError`` naming the file when it cannot be read or lacks one of
    ``domain.request_columns``."""
    schema = domain.schemas[domain.labelled_dataset]
    suffix = Path(path).suffix.lower()
    if not os.path.isfile(path):
        raise StepError(f"--rows {path}: no such file")
    try:
        if suffix == ".parquet":
            frame = pq.read_table(path).to_pandas()
        elif suffix == ".csv":
            from pipeline_steps.domain.sources import csv_options

            frame = pcsv.read_csv(path, convert_options=csv_options(schema)).to_pandas()
        else:
            raise StepError(f"--rows {path}: not a .parquet or .csv file")
    except (pa.ArrowInvalid, OSError) as exc:
        raise StepError(f"--rows {path} cannot be read: {exc}") from exc
    required = domain.request_columns or tuple(schema.names)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise StepError(
            f"--rows {path} lacks column(s) {', '.join(missing)}; a row to score needs "
            f"{', '.join(required)}"
        )
    for name in required:
        if name in schema.names and pa.types.is_timestamp(schema.field(name).type):
            frame[name] = pd.to_datetime(frame[name], utc=True)
    return frame


def request_rows(
    settings: Settings, lake: Lake, domain: Domain, day: date, path: str | None
) -> pd.DataFrame:
    """Entity rows to score on ``day``: of the file at ``path``, else of the day's validated
    labelled partition. Raises ``StepError`` when the day lacks a validated partition the
    request needs, there is no row, or a row of the file has no event time or is dated another
    day."""
    needed = [d for d in domain.datasets if path is None or d != domain.labelled_dataset]
    missing = [d for d in needed if lake.validated_partition(d, day) is None]
    if missing:
        raise StepError(
            f"--logical-date {day}: no validated {', '.join(missing)} partition of that day "
            f"({lake.path(Lake.partition('validated', missing[0], day))} missing); ingest and "
            f"validate it first, e.g. `trainyard seed --start {day} --end {day}`"
        )
    if path is None:
        folder = lake.validated_partition(domain.labelled_dataset, day)
        assert folder is not None
        labelled = lake.read_table(folder, "data.parquet").to_pandas()
        rows = domain.request_rows(labelled, settings.features)
        if rows.empty:
            raise StepError(f"--logical-date {day}: {lake.path(folder)} has no rows to score")
        return rows
    rows = domain.request_rows(read_request(path, domain), settings.features)
    if rows.empty:
        raise StepError(f"--rows {path}: no rows to score")
    if rows["event_timestamp"].isna().any():
        raise StepError(
            f"--rows {path}: {int(rows['event_timestamp'].isna().sum())} row(s) without an "
            "event time, so no moment to read their features at"
        )
    elsewhere = rows[rows[domain.date_column] != day.isoformat()]
    if len(elsewhere):
        raise StepError(
            f"--rows {path}: {len(elsewhere)} row(s) dated other than --logical-date {day} "
            f"(e.g. {elsewhere[domain.date_column].iloc[0]}); score one day at a time"
        )
    return rows


def online_rows(
    settings: Settings, lake: Lake, domain: Domain, day: date, rows: pd.DataFrame
) -> tuple[pd.DataFrame, FeatureColumns]:
    """Entity ``rows`` of ``day`` with their features read from the online store at their event
    timestamps (``serve_rows`` over the day's sources), typed as in training, in the rows' order;
    and the service's feature columns. Raises ``StepError`` when a source of the day is missing."""
    try:
        sources, _ = domain.feature_sources(lake, [day])
    except StepError as exc:
        raise StepError(f"--logical-date {day}: {exc}") from exc
    with scratch_store(settings.features, sources, domain=domain) as store:
        service = store.get_feature_service(domain.feature_service)
        columns = feature_columns(domain, service)
        served = serve_rows(store, service, rows, earliest_event(store, service))
    return cast_features(served.reset_index(drop=True), columns), columns


# -- the champion --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingModel:
    """The model that serves: the champion's registry version, the URI that loads it, the
    pipeline run that trained it, and that run's feature columns in the model's order."""

    version: str
    model_uri: str
    run_id: str
    features: list[str]
    task: str = "binary"
    classes: list[str] = field(default_factory=list)


def champion(settings: Settings, lake: Lake) -> ServingModel:
    """The champion and its training run's feature columns. Raises ``StepError`` when no
    version holds the alias, the version has no run tag, or the run's features manifest is
    missing from the lake."""
    from pipeline_steps.core.tracking import RUN_TAG, champion_version, connect

    cfg = settings.mlflow
    version = champion_version(connect(cfg), cfg)
    if version is None:
        raise StepError(
            f"no champion: registered model {cfg.registered_model!r} has no version with alias "
            f"{cfg.champion_alias!r} (mlflow.tracking_uri {cfg.tracking_uri}); a run must "
            "promote a model first"
        )
    run_id = (version.tags or {}).get(RUN_TAG)
    if not run_id:
        raise StepError(
            f"champion {cfg.registered_model} version {version.version} has no {RUN_TAG} tag: "
            "its training run, and so its feature columns, are unknown"
        )
    folder = Lake.run_dir(run_id)
    where = lake.path(folder, "features.json")
    if not lake.exists(folder, "features.json"):
        raise StepError(
            f"champion {cfg.registered_model} version {version.version} was trained by run "
            f"{run_id!r}, whose features manifest {where} is missing from lake.root"
        )
    try:
        manifest = load_manifest(FeaturesManifest, lake.read_json(folder, "features.json"), where)
    except ManifestError as exc:
        raise StepError(str(exc)) from exc
    return ServingModel(
        version=str(version.version),
        model_uri=f"models:/{cfg.registered_model}/{version.version}",
        run_id=run_id,
        features=manifest.feature_columns,
        task=manifest.task,
        classes=list(manifest.classes),
    )


# -- predict -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Predictions:
    """What ``predict`` scored: one row per entity (key, event timestamp, probability) in the
    request's order, and the model that scored them."""

    rows: pd.DataFrame
    model: ServingModel


def predict(settings: Settings, day: date, path: str | None = None) -> Predictions:
    """Score the rows of ``day`` (the validated labelled partition, or the file at ``path``)
    with the champion, from features read in the online store (``online_rows``): the day's
    request is checked first, then the registry asked.

    Raises ``StepError`` naming the parameter or file: the day is not validated, the file lacks
    columns or holds rows of other days, there is no champion, or the feature service no longer
    has the champion's columns."""
    from pipeline_steps.core.domain import load_domain
    from pipeline_steps.steps.evaluate import score

    lake = Lake(settings.lake_root, settings.ingest.pins)
    domain = load_domain(settings.domain.module)
    requested = request_rows(settings, lake, domain, day, path)  # before the registry is asked
    model = champion(settings, lake)
    rows, columns = online_rows(settings, lake, domain, day, requested)
    served = [*columns.categorical, *columns.numeric]
    if sorted(served) != sorted(model.features):
        raise StepError(
            f"feature service {domain.feature_service!r} in features.feature_repo serves "
            f"{served}, but the champion (version {model.version}, run {model.run_id}) was "
            f"trained on {model.features}: serve it with the feature repository it trained with"
        )
    scored = rows[[domain.key, "event_timestamp"]].copy()
    predicted = score(model.model_uri, rows, model.features, model.task, model.classes)
    for column, values in prediction_columns(model, predicted).items():
        scored[column] = values
    log.info(
        "scored %d row(s) of %s with %s (version %s, run %s)",
        len(scored),
        day,
        model.model_uri,
        model.version,
        model.run_id,
    )
    return Predictions(rows=scored, model=model)


def prediction_columns(model: ServingModel, predicted: np.ndarray) -> dict[str, Any]:
    """The output columns for the model's task (``Task.serving_columns``): ``probability``
    (binary), ``prediction`` (regression), or ``prediction`` (the predicted class: the most
    probable, or for ordinal classes the median) and ``probability_<class>`` per class
    (multiclass, ordinal)."""
    return dict(task_spec(model.task).serving_columns(predicted, model.classes))


def check_output(output: str) -> None:
    """Raise ``StepError`` naming ``--output`` unless it ends in ``.parquet`` or ``.csv``."""
    suffix = Path(output).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise StepError(f"--output {output}: write .parquet or .csv, not {suffix or 'no suffix'}")


def write_predictions(rows: pd.DataFrame, output: str) -> None:
    """Write the predictions to ``output``, parquet or CSV by its extension (``check_output``)."""
    check_output(output)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(rows, preserve_index=False)
    if output.lower().endswith(".parquet"):
        pq.write_table(table, output)
    else:
        pcsv.write_csv(table, output)


def json_lines(rows: pd.DataFrame) -> Iterator[str]:
    """One JSON object per prediction: the key, the event timestamp (ISO, UTC) the features
    were read at, and the probability."""
    for record in rows.to_dict("records"):
        yield json.dumps(
            {
                name: value.isoformat() if isinstance(value, pd.Timestamp) else value
                for name, value in record.items()
            }
        )
