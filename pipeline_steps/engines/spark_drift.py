"""The drift monitor's window on Spark: its rows scored and counted on the executors.

``SparkWindow`` holds the window's joined rows as a cached DataFrame, with the champion's
prediction signal scored on the executors in pandas batches (:func:`with_prediction`); only the
counts, the sensitivity sample and day D's rows reach the driver.
``SparkCounts`` is the Spark engine's ``WindowCounts`` (:mod:`pipeline_steps.quality.calibration`):
the rows of both windows stay in Spark, and only the per-day counts reach the driver. The bins
are the local engine's: a numeric column's edges are the exact quantiles of its present reference
values (Spark's ``percentile``, which interpolates linearly as numpy does; NaN counts as
missing), deduplicated; a value's bin is the number of edges at or below it, a missing value the
last bin; categories are the values as strings, missing as ``<missing>``, sorted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np
import pandas as pd

from pipeline_steps.core.domain import Domain, FeatureColumns
from pipeline_steps.core.scoring import predicted_signal, scorer
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.quality.calibration import PREDICTION


class SparkCounts:
    """Per-day counts of a Spark DataFrame holding the reference and current windows' rows,
    ``day_column`` telling each row's day (ISO)."""

    def __init__(
        self,
        rows: Any,
        day_column: str,
        reference_days: Sequence[date],
        current_days: Sequence[date],
    ) -> None:
        from pyspark.sql import functions as F

        self.rows = rows
        self.days = [d.isoformat() for d in reference_days]
        self.position = {d: i for i, d in enumerate(self.days)}
        current = [d.isoformat() for d in current_days]
        self.reference = rows.where(F.col(day_column).isin(self.days))
        self.current = rows.where(F.col(day_column).isin(current))
        self.day_column = day_column

    def columns(self) -> set[str]:
        return set(self.rows.columns)

    def _missing(self, column: str) -> Any:
        from pyspark.sql import functions as F

        value = F.col(column).cast("double")
        return value.isNull() | F.isnan(value)

    def _edges(self, column: str, bins: int) -> np.ndarray:
        from pyspark.sql import functions as F

        quantiles = [float(q) for q in np.linspace(0, 1, bins + 1)[1:-1]]
        present = self.reference.where(~self._missing(column))
        found = present.agg(
            F.percentile(F.col(column).cast("double"), F.array(*map(F.lit, quantiles)))
        ).first()
        values = found[0] if found is not None else None
        if not values:
            return np.array([0.0])
        return np.unique(np.asarray(values, dtype=np.float64))

    def numeric(self, column: str, bins: int) -> tuple[np.ndarray, np.ndarray]:
        from pyspark.sql import functions as F

        edges = self._edges(column, bins)
        width = len(edges) + 2
        value = F.col(column).cast("double")
        position = sum(
            (F.when(value >= F.lit(float(edge)), 1).otherwise(0) for edge in edges), F.lit(0)
        )
        binned = F.when(self._missing(column), F.lit(width - 1)).otherwise(position)
        per_day = self._per_day(self.reference.withColumn("__bin", binned), width)
        current = np.zeros(width, dtype=np.int64)
        for row in self.current.withColumn("__bin", binned).groupBy("__bin").count().collect():
            current[int(row["__bin"])] = int(row["count"])
        return per_day, current

    def _per_day(self, frame: Any, width: int) -> np.ndarray:
        per_day = np.zeros((len(self.days), width), dtype=np.int64)
        for row in frame.groupBy(self.day_column, "__bin").count().collect():
            per_day[self.position[row[self.day_column]], int(row["__bin"])] = int(row["count"])
        return per_day

    def categorical(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        from pyspark.sql import functions as F

        label = F.coalesce(F.col(column).cast("string"), F.lit("<missing>")).alias("__value")
        ref = self.reference.select(self.day_column, label).groupBy(self.day_column, "__value")
        ref_rows = ref.count().collect()
        cur_rows = self.current.select(label).groupBy("__value").count().collect()
        categories = sorted({r["__value"] for r in ref_rows} | {r["__value"] for r in cur_rows})
        code = {c: i for i, c in enumerate(categories)}
        per_day = np.zeros((len(self.days), len(categories)), dtype=np.int64)
        for row in ref_rows:
            per_day[self.position[row[self.day_column]], code[row["__value"]]] = row["count"]
        current = np.zeros(len(categories), dtype=np.int64)
        for row in cur_rows:
            current[code[row["__value"]]] = row["count"]
        return per_day, current

    def binary(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        from pyspark.sql import functions as F

        per_day = self._per_day(self.reference.withColumn("__bin", F.col(column).cast("int")), 2)
        current = np.zeros(2, dtype=np.int64)
        rows = self.current.groupBy(F.col(column).cast("int").alias("__bin")).count().collect()
        for row in rows:
            current[int(row["__bin"])] = int(row["count"])
        return per_day, current

    def means(self, column: str) -> tuple[float, float]:
        from pyspark.sql import functions as F

        def mean(frame: Any) -> float:
            found = frame.agg(F.avg(F.col(column).cast("double"))).first()
            return float("nan") if found is None or found[0] is None else float(found[0])

        return mean(self.reference), mean(self.current)


def with_prediction(rows: Any, model_uri: str, features: list[str], domain: Domain) -> Any:
    """``rows`` (a Spark DataFrame) with the champion's prediction signal, scored on the
    executors in pandas batches as the local engine scores its batches."""
    import mlflow
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType

    kind = StringType() if task_spec(domain.task).drifts_on_names else DoubleType()
    schema = StructType([*rows.schema.fields, StructField(PREDICTION, kind)])
    # The executors' Python workers find the registry the driver uses.
    tracking, registry = mlflow.get_tracking_uri(), mlflow.get_registry_uri()

    def score(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import mlflow

        mlflow.set_tracking_uri(tracking)
        mlflow.set_registry_uri(registry)
        predict = scorer(model_uri, features, domain)
        for frame in batches:
            frame[PREDICTION] = predicted_signal(domain, predict(frame))
            yield frame

    return rows.mapInPandas(score, schema)


@dataclass
class SparkWindow:
    """The Spark engine's :class:`~pipeline_steps.engines.base.DriftWindow`: ``rows`` a cached
    DataFrame of both windows."""

    rows: Any
    columns: FeatureColumns
    domain: Domain
    reference_days: Sequence[date]
    current_days: Sequence[date]
    predict: Callable[[pd.DataFrame], np.ndarray] | None
    counts: SparkCounts = field(init=False)
    reference_rows: int = field(init=False)
    current_rows: int = field(init=False)

    def __post_init__(self) -> None:
        day_column = self.domain.date_column
        self.counts = SparkCounts(self.rows, day_column, self.reference_days, self.current_days)
        self.reference_rows = self.counts.reference.count()
        self.current_rows = self.counts.current.count()

    def sample(self, size: int) -> pd.DataFrame:
        """The reference rows pandas' ``sample(size, random_state=0)`` draws from the same rows
        in key order, fetched to the driver in the order drawn."""
        rows = self.counts.reference
        total = self.reference_rows
        drawn = np.random.RandomState(0).choice(total, size=min(total, size), replace=False)
        wanted = {int(i): n for n, i in enumerate(drawn)}
        picked = (
            rows.orderBy(self.domain.key)
            .rdd.zipWithIndex()
            .filter(lambda pair: pair[1] in wanted)
            .map(lambda pair: (*pair[0], pair[1]))
            .toDF([*rows.columns, "__index"])
            .toPandas()
        )
        picked["__order"] = picked["__index"].map(wanted)
        picked = picked.sort_values("__order").drop(columns=["__index", "__order"])
        return picked.reset_index(drop=True)

    def day(self, day: date) -> pd.DataFrame:
        from pyspark.sql import functions as F

        today = self.rows.where(F.col(self.domain.date_column) == day.isoformat())
        return today.orderBy(self.domain.key).toPandas()
