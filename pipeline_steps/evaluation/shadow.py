"""A monitored day's scores, kept for the release: the champion's and the staged model's
predictions on the same labelled rows (and the predictions of the version the champion replaced),
with the rows' slices.

The drift monitor writes one file per day (``reports/monitor/date=D/scores.parquet``) when there
is a champion; the release step pools the days on which the staged model was scored beside the
current champion, and the rollback check compares the champion with the version it replaced on
its days. Predictions are stored
as the task gives them: one column per model for ``binary`` and ``regression``, one per class
(``<model>.<k>``) for ``multiclass``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline_steps.core.lake import Lake

SCORES_FILE = "scores.parquet"
LABEL = "label"
SLICE_PREFIX = "slice."
METADATA_KEY = b"trainyard.shadow"


def scores_folder(day: str) -> str:
    """The lake folder of a monitored day's report and scores."""
    return f"reports/monitor/date={day}"


@dataclass(frozen=True, slots=True)
class DayScores:
    """One monitored day: the labels, each model's predictions on the same rows, the slices."""

    day: str
    champion_version: str
    staging_version: str | None
    labels: np.ndarray
    champion: np.ndarray
    staging: np.ndarray | None
    slices: pd.DataFrame
    previous_version: str | None = None
    """The version the champion replaced (what a rollback goes back to), scored on the same
    rows: the rollback check compares the champion with it."""
    previous: np.ndarray | None = None
    scored_at: str = ""
    """When the monitor scored the day (UTC, ISO): the rollback check counts a champion's days
    from the time it became the champion."""

    def to_table(self) -> pa.Table:
        columns: dict[str, object] = {LABEL: self.labels}
        models = (("champion", self.champion), ("staging", self.staging))
        for name, values in (*models, ("previous", self.previous)):
            if values is None:
                continue
            if values.ndim == 2:
                columns |= {f"{name}.{k}": values[:, k] for k in range(values.shape[1])}
            else:
                columns[name] = values
        for column in self.slices.columns:
            columns[f"{SLICE_PREFIX}{column}"] = self.slices[column].astype("string").to_numpy()
        table = pa.Table.from_pandas(pd.DataFrame(columns), preserve_index=False)
        meta = {
            "day": self.day,
            "champion_version": self.champion_version,
            "staging_version": self.staging_version,
            "previous_version": self.previous_version,
            "scored_at": self.scored_at,
        }
        return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})

    @classmethod
    def from_table(cls, table: pa.Table) -> DayScores:
        meta = json.loads((table.schema.metadata or {})[METADATA_KEY])
        frame = table.to_pandas()

        def predictions(name: str) -> np.ndarray | None:
            if name in frame.columns:
                return frame[name].to_numpy(dtype=np.float64)
            wide = sorted(
                (c for c in frame.columns if c.startswith(f"{name}.")),
                key=lambda c: int(c.rsplit(".", 1)[1]),
            )
            return frame[wide].to_numpy(dtype=np.float64) if wide else None

        champion = predictions("champion")
        assert champion is not None, "a day's scores always hold the champion's"
        slices = frame[[c for c in frame.columns if c.startswith(SLICE_PREFIX)]]
        return cls(
            day=meta["day"],
            champion_version=str(meta["champion_version"]),
            staging_version=meta.get("staging_version"),
            labels=frame[LABEL].to_numpy(),
            champion=champion,
            staging=predictions("staging"),
            slices=slices.rename(columns=lambda c: c.removeprefix(SLICE_PREFIX)),
            previous_version=meta.get("previous_version"),
            previous=predictions("previous"),
            scored_at=str(meta.get("scored_at", "")),
        )


def write_day(lake: Lake, scores: DayScores) -> str:
    """Write (replace) the day's scores; returns their lake path."""
    return lake.write_table(scores.to_table(), scores_folder(scores.day), SCORES_FILE)


def read_days(lake: Lake, days: list[str], champion: str | None = None) -> list[DayScores]:
    """The recorded scores of ``days`` that have them, in the order given; with ``champion``,
    only the days that version was scored on as the champion (told by each file's footer, so
    the other days' rows are never read)."""
    import pyarrow.parquet as pq

    found = []
    for day in days:
        if not lake.exists(scores_folder(day), SCORES_FILE):
            continue
        path = lake.path(scores_folder(day), SCORES_FILE)
        if champion is not None:
            meta = (pq.read_schema(path, filesystem=lake.fs).metadata or {})[METADATA_KEY]
            if str(json.loads(meta)["champion_version"]) != champion:
                continue
        found.append(DayScores.from_table(lake.read_table_at(path)))
    return found


def monitored_days(lake: Lake, until: str) -> list[str]:
    """Days up to ``until`` (inclusive) with recorded scores, oldest first."""
    root = "reports/monitor"
    if not lake.exists(root):
        return []
    days = []
    for entry in lake.fs.ls(lake.path(root), detail=False):
        name = str(entry).rstrip("/").rsplit("/", 1)[-1]
        if name.startswith("date=") and name[5:] <= until and lake.exists(root, name, SCORES_FILE):
            days.append(name[5:])
    return sorted(days)


def pooled(days: list[DayScores]) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.DataFrame]:
    """The shadow days' rows as one holdout: labels, the staged model's and the champion's
    predictions, slices (each day's rows in order, days in the order given)."""
    staged = [d.staging for d in days]
    if any(s is None for s in staged):
        raise ValueError("a pooled shadow day lacks the staged model's predictions")
    return (
        np.concatenate([d.labels for d in days]),
        np.concatenate(staged),  # type: ignore[arg-type]
        np.concatenate([d.champion for d in days]),
        pd.concat([d.slices for d in days], ignore_index=True),
    )
