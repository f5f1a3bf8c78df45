"""Features step: Feast apply, a point-in-time training set, materialisation, a frozen snapshot.

The window is the trailing ``features.window_days`` dates ending at the logical date D. Its
validated days before D form the training set; D itself is the holdout. Only facts known before
departure are used (schedule, carrier, route, distance, weather at the origin, plane specs);
``dep_delay``, ``dep_time``, ``arr_time`` and ``air_time`` never enter the features.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pyarrow as pa

from pipeline_steps.context import RunContext, StepError
from pipeline_steps.lake import MANIFEST, Lake, table_sha256

log = logging.getLogger(__name__)

FEATURE_SERVICE = "flight_delay_features"
LABEL = "delayed"
KEY = "flight_id"
CATEGORICAL = ["carrier", "origin", "dest", "plane_type", "manufacturer", "engine"]
NUMERIC = [
    "distance",
    "sched_dep_hour",
    "sched_dep_minute",
    "sched_arr_hour",
    "day_of_week",
    "temp",
    "dewp",
    "humid",
    "wind_dir",
    "wind_speed",
    "wind_gust",
    "precip",
    "pressure",
    "visib",
    "plane_year",
    "engines",
    "seats",
]
# No month or day of year: within a rolling window of a few weeks they only mark the newest
# days, so a model learns that day's delays as a calendar effect and extrapolates it (+5 sigma
# for a window holding one day of a new month).
# Known only after the flight left: using them would leak the answer into the features.
LEAKY = ("dep_delay", "dep_time", "arr_time", "air_time", "arr_delay")


def window(ctx: RunContext) -> tuple[list[date], list[date]]:
    """Validated training days and the holdout day of this run's window."""
    day, size = ctx.logical_date, ctx.settings.features.window_days
    start = day - timedelta(days=size - 1)
    validated = set(ctx.lake.partition_dates("validated", "flights"))
    if day not in validated:
        raise StepError(
            f"flights partition of {day} is not validated "
            f"({ctx.lake.path(Lake.partition('validated', 'flights', day))} missing); "
            "run the validate step first"
        )
    train_days = sorted(d for d in validated if start <= d < day)
    needed = ctx.settings.features.min_train_days
    if len(train_days) < needed:
        raise StepError(
            f"the window {start}..{day} has {len(train_days)} validated day(s) before {day}, "
            f"fewer than features.min_train_days={needed}; ingest history first, e.g. "
            f"`trainyard seed --start {start} --end {day - timedelta(days=1)}`"
        )
    return train_days, [day]


def flight_rows(flights: pd.DataFrame, settings: Any) -> pd.DataFrame:
    """Entity rows: one per flight, with pre-departure fields, the label and the join keys."""
    arrived = flights["arr_delay"].notna()
    late = flights["arr_delay"] > settings.delay_threshold_min
    if settings.cancelled_as_delayed:
        label = (late | ~arrived).astype("int8")
        keep = pd.Series(True, index=flights.index)
    else:
        label = late.astype("int8")
        keep = arrived
    departure = pd.to_datetime(
        dict(year=flights["year"], month=flights["month"], day=flights["day"])
    )
    rows = pd.DataFrame(
        {
            KEY: departure.dt.strftime("%Y-%m-%d")
            + "_"
            + flights["carrier"]
            + flights["flight"].astype(str)
            + "_"
            + flights["origin"]
            + "_"
            + flights["sched_dep_time"].astype(str).str.zfill(4),
            "flight_date": departure.dt.strftime("%Y-%m-%d"),
            "event_timestamp": flights["time_hour"].astype("datetime64[us, UTC]"),
            "origin": flights["origin"],
            "tailnum": flights["tailnum"].fillna("UNKNOWN"),
            "carrier": flights["carrier"],
            "dest": flights["dest"],
            "distance": flights["distance"].astype("float64"),
            "sched_dep_hour": (flights["sched_dep_time"] // 100).astype("float64"),
            "sched_dep_minute": (flights["sched_dep_time"] % 100).astype("float64"),
            "sched_arr_hour": (flights["sched_arr_time"] // 100).astype("float64"),
            "day_of_week": departure.dt.dayofweek.astype("float64"),
            LABEL: label,
        }
    )
    return rows[keep.to_numpy()].drop_duplicates(KEY).reset_index(drop=True)


def _read_validated(lake: Lake, dataset: str, days: list[date]) -> tuple[pd.DataFrame, dict]:
    frames, hashes = [], {}
    for day in days:
        folder = Lake.partition("validated", dataset, day)
        if not lake.exists(folder, MANIFEST):
            continue
        frames.append(lake.read_table(folder, "data.parquet").to_pandas())
        hashes[day.isoformat()] = lake.read_json(folder, MANIFEST)["sha256"]
    if not frames:
        raise StepError(f"no validated {dataset} partitions for {days[0]}..{days[-1]}")
    return pd.concat(frames, ignore_index=True), hashes


def write_sources(lake: Lake, days: list[date]) -> dict[str, Any]:
    """Write the Feast offline sources for the window; return the partition hashes used."""
    # The day before the window lets the first flights after midnight see recent weather.
    weather, weather_hashes = _read_validated(lake, "weather", [days[0] - timedelta(days=1), *days])
    weather = weather.rename(columns={"time_hour": "event_timestamp"})
    weather = weather.drop(columns=["year", "month", "day", "hour"])
    weather["event_timestamp"] = weather["event_timestamp"].astype("datetime64[us, UTC]")

    planes, plane_hashes = _read_planes_snapshots(lake, days)
    for name, frame in (("weather", weather), ("planes", planes)):
        table = pa.Table.from_pandas(frame, preserve_index=False)
        lake.write_table(table, "features", "sources", f"{name}.parquet")
    return {"weather": weather_hashes, "planes": plane_hashes}


def _read_planes_snapshots(lake: Lake, days: list[date]) -> tuple[pd.DataFrame, dict]:
    """Registry snapshots in the window, each valid from its date; unchanged repeats dropped."""
    frames, hashes, last = [], {}, None
    for day in days:
        folder = Lake.partition("validated", "planes", day)
        if not lake.exists(folder, MANIFEST):
            continue
        digest = lake.read_json(folder, MANIFEST)["sha256"]
        if digest == last:
            continue
        frame = lake.read_table(folder, "data.parquet").to_pandas()
        frame = frame.rename(columns={"year": "plane_year", "type": "plane_type"})
        frame["event_timestamp"] = pd.Timestamp(day, tz="UTC").as_unit("us")
        frames.append(
            frame[
                [
                    "tailnum",
                    "plane_year",
                    "plane_type",
                    "manufacturer",
                    "engines",
                    "seats",
                    "engine",
                    "event_timestamp",
                ]
            ]
        )
        hashes[day.isoformat()], last = digest, digest
    if not frames:
        raise StepError(f"no validated planes snapshot in {days[0]}..{days[-1]}")
    planes = pd.concat(frames, ignore_index=True)
    for column in ("plane_year", "engines", "seats"):
        planes[column] = planes[column].astype("float64")
    return planes, hashes


def load_definitions(repo: Path) -> list[Any]:
    """Every Feast object defined in the repository's Python files, as ``feast apply`` sees."""
    from feast import Entity, FeatureService, FeatureView

    objects: list[Any] = []
    for path in sorted(repo.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"feature_repo_{path.stem}", path)
        if spec is None or spec.loader is None:
            continue
        module: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        objects += [
            v for v in vars(module).values() if isinstance(v, Entity | FeatureView | FeatureService)
        ]
    return objects


def feature_store(ctx: RunContext) -> Any:
    """The Feast store of this lake, with the repository's definitions applied."""
    from feast import FeatureStore

    repo = Path(ctx.settings.features.feature_repo)
    if not (repo / "feature_store.yaml").is_file():
        raise StepError(f"Feast repository {repo} has no feature_store.yaml")
    os.environ["TRAINYARD_FEAST_DIR"] = ctx.lake.url("features")
    ctx.lake.fs.makedirs(ctx.lake.path("features"), exist_ok=True)
    store = FeatureStore(repo_path=str(repo))
    store.apply(load_definitions(repo))
    return store


def _fingerprint(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _repo_fingerprint(repo: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted([*repo.glob("*.py"), *repo.glob("*.yaml")]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def build_features(ctx: RunContext) -> dict[str, Any]:
    """Apply the Feast repo, build and freeze the point-in-time training set and holdout.

    Returns the step manifest: row counts, label rates, hashes and paths of the frozen sets.
    Reports ``cached`` when the same inputs and settings already produced this run's set.
    """
    lake, settings = ctx.lake, ctx.settings.features
    train_days, holdout_days = window(ctx)
    days = [*train_days, *holdout_days]
    flights, flight_hashes = _read_validated(lake, "flights", days)
    out_dir = Lake.training_set_dir(ctx.run_id)

    source_hashes = write_sources(lake, days)
    inputs = {
        "flights": flight_hashes,
        **source_hashes,
        "settings": {
            k: v
            for k, v in ctx.settings.to_dict()["features"].items()
            if k not in ("feature_repo",)
        },
        "feature_repo": _repo_fingerprint(Path(settings.feature_repo)),
    }
    input_hash = _fingerprint(inputs)
    store = feature_store(ctx)
    if lake.exists(out_dir, MANIFEST):
        previous = lake.read_json(out_dir, MANIFEST)
        if previous.get("input_sha256") == input_hash:
            log.info("training set of %s is cached: inputs unchanged", ctx.run_id)
            return ctx.record("features", {**previous, "status": "cached"})

    entity_rows = flight_rows(flights, settings)
    joined = store.get_historical_features(
        entity_df=entity_rows, features=store.get_feature_service(FEATURE_SERVICE)
    ).to_df()
    missing = [c for c in [*CATEGORICAL, *NUMERIC, LABEL] if c not in joined.columns]
    if missing:
        raise StepError(f"Feast returned no column(s) {missing}; check {settings.feature_repo}")
    columns = [KEY, "flight_date", "event_timestamp", *CATEGORICAL, *NUMERIC, LABEL]
    joined = joined[columns].sort_values(KEY).reset_index(drop=True)
    joined["event_timestamp"] = joined["event_timestamp"].astype("datetime64[us, UTC]")
    for column in NUMERIC:
        joined[column] = joined[column].astype("float64")
    for column in CATEGORICAL:
        joined[column] = joined[column].astype("string").fillna("<missing>").astype(object)

    holdout_mask = joined["flight_date"] == holdout_days[0].isoformat()
    sets = {"train": joined[~holdout_mask], "holdout": joined[holdout_mask]}
    summary: dict[str, Any] = {}
    with lake.staged_dir(out_dir) as tmp:
        for name, frame in sets.items():
            table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
            lake.write_parquet(table, tmp, f"{name}.parquet", settings.row_group_rows)
            summary[name] = {
                "path": lake.path(out_dir, f"{name}.parquet"),
                "rows": len(frame),
                "positive_rate": round(float(frame[LABEL].mean()), 4) if len(frame) else None,
                "sha256": table_sha256(table),
            }
        manifest = {
            "step": "features",
            "status": "built",
            "logical_date": ctx.logical_date.isoformat(),
            "train_days": [d.isoformat() for d in train_days],
            "holdout_day": holdout_days[0].isoformat(),
            "categorical": CATEGORICAL,
            "numeric": NUMERIC,
            "label": LABEL,
            "key": KEY,
            "sets": summary,
            "inputs": inputs,
            "input_sha256": input_hash,
            "training_set_sha256": _fingerprint({k: v["sha256"] for k, v in summary.items()}),
        }
        lake.dump_json(manifest, f"{tmp}/{MANIFEST}")

    start = datetime.combine(days[0], datetime.min.time(), UTC)
    end = datetime.combine(ctx.logical_date + timedelta(days=1), datetime.min.time(), UTC)
    store.materialize(start, end)
    manifest["materialized"] = {"start": start.isoformat(), "end": end.isoformat()}
    log.info(
        "training set: %d train rows, %d holdout rows",
        summary["train"]["rows"],
        summary["holdout"]["rows"],
    )
    return ctx.record("features", manifest)
