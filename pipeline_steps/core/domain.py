"""The example's domain behind one small interface, so the steps stay generic.

A domain says what the data is: its datasets and their column types, which dataset holds the
labelled rows, how those rows become entity rows (keys, event time, label and the features known
on the row itself) and how the other datasets become the Feast offline sources. The feature
columns of the model are the entity-row features plus the fields of the domain's Feast feature
service. A domain may ship its own source of real data (``ingest.source: domain``).
``domain.module`` names the module that exposes it as ``DOMAIN``; the shipped examples are
packages of their own under ``examples/`` (e.g. ``hotel_rates.domain``).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feast_import import import_feast
from pipeline_steps.core.feature_views import (
    FeatureViewSpec,
    check_feature_views,
    feast_definitions,
    source_columns,
)
from pipeline_steps.core.tasks import Task, check_task

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.settings import FeatureSettings


@dataclass(frozen=True)
class Availability:
    """Whether a source has a day's data yet; ``final`` when waiting cannot change the answer
    (the day lies outside the source's declared coverage)."""

    ready: bool
    message: str
    final: bool = False


class Source(Protocol):
    """Where ingest reads a day's rows: a domain's own source, or a file or SQL source."""

    @property
    def name(self) -> str:
        """Recorded in each partition manifest."""
        ...

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        """The rows of ``dataset`` for ``day``, in batches of bounded size."""
        ...

    def availability(self, dataset: str, day: date) -> Availability:
        """Whether ``dataset`` has rows for ``day`` yet, read cheaply (no full scan)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureColumns:
    """The model's inputs, in order: categorical columns, then numeric ones."""

    categorical: list[str]
    numeric: list[str]


@dataclass(frozen=True, kw_only=True)
class Domain(ABC):
    """What the generic steps need to know about a family of datasets."""

    name: str
    """Short name, used in messages (e.g. ``hotel_rates``)."""
    datasets: tuple[str, ...]
    """Datasets ingested and validated per logical date (one suite each)."""
    labelled_dataset: str
    """The dataset whose rows are the examples; its validated dates make the window."""
    schemas: Mapping[str, pa.Schema]
    """Column types of the datasets the domain knows (sources cast to them)."""
    feature_service: str
    """Name of the Feast feature service joined to the entity rows."""
    feature_views: tuple[FeatureViewSpec, ...] = ()
    """The feature views of the service, declared (:mod:`pipeline_steps.core.feature_views`):
    the features step builds and applies their Feast objects and writes each offline source
    with exactly its views' keys, event time and fields. Empty: the views and service the
    Feast repository's own ``*.py`` files define (``features.feature_repo``)."""
    key: str
    """Unique key column of an entity row."""
    date_column: str
    """Entity-row column holding the row's logical date (ISO): it splits off the holdout."""
    label: str
    """The label column of an entity row: 0/1 for ``binary``, the class index into
    ``classes`` for ``multiclass``, a real number for ``regression``."""
    row_features: FeatureColumns
    """Features computed on the entity row itself (not joined from Feast)."""
    task: Task = "binary"
    """What the model predicts: ``binary``, ``multiclass`` or ``regression``
    (:mod:`pipeline_steps.core.tasks`)."""
    classes: tuple[str, ...] = ()
    """``multiclass``: the class names, in the order of their label indices."""
    coverage: tuple[date, date] | None = None
    """First and last day the data may be dated (the source's declared coverage); rows dated
    outside fail validation. None: no bound but the ingest time."""
    request_columns: tuple[str, ...] = ()
    """Columns a row of the labelled dataset must carry to be scored (``trainyard predict``
    checks a file of rows against them). Empty: every column of the dataset's schema."""

    slice_columns: tuple[str, ...] = ()
    """Holdout columns whose values are the evaluation's slices by default (``slice_rows`` may
    derive more)."""
    time_zone: str | None = None
    """The zone whose midnight starts a day of the date column when the domain dates its rows
    from times (an IANA name; empty: UTC or a time's own zone): a ``file`` source counts days
    in ``ingest.time_zone``, which must agree. None: the domain's dates are no times' days (e.g.
    dates from a row's own year, month and day fields), and ``ingest.time_zone`` is free."""

    def slice_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The slice columns of holdout rows, as strings; a domain overrides it to derive slices
        from features (e.g. bands of an hour). ``StepError`` naming the domain's
        ``slice_columns`` when one is no column of the rows (a column moved out of the
        features)."""
        absent = [c for c in self.slice_columns if c not in rows.columns]
        if absent:
            raise StepError(
                f"domain {self.name}: slice_columns names {', '.join(map(repr, absent))}, not a "
                f"column of its entity rows ({', '.join(map(str, rows.columns))}); slice by row "
                "features (CATEGORICAL) only"
            )
        return rows[list(self.slice_columns)].astype("string")

    @abstractmethod
    def entity_rows(self, labelled: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """Entity rows from the labelled dataset's validated rows: the key, ``event_timestamp``,
        the date column, the join keys of the feature views, the row features and the label.
        The features step calls it once per validated day, so memory holds one day at a time:
        a row's entity row depends on that row alone."""

    @abstractmethod
    def feature_sources(
        self, lake: Lake, days: Sequence[date]
    ) -> tuple[Mapping[str, SourceRows], dict[str, dict[str, str]]]:
        """The Feast offline sources (name → rows) for a window of validated days, and the
        partition hashes they are read from (dataset → date → sha256). A source's rows are a
        frame, an Arrow table, or a stream of either read as the source is written
        (:class:`ValidatedPartitions` reads a dataset one day at a time)."""

    def request_rows(self, rows: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """Entity rows for rows to score: ``entity_rows`` without the label. This default needs
        the label's source columns; a domain whose rows are scored before the outcome is known
        overrides it."""
        return self.entity_rows(rows, settings).drop(columns=[self.label])

    def source(self, batch_rows: int) -> Source:
        """The domain's own source of real data, read when ``ingest.source`` is ``domain`` (the
        default). A domain without one is ingested from a ``file`` or ``sql`` source."""
        raise StepError(
            f"domain {self.name} has no source of its own; set ingest.source to file or sql"
        )

    def empty_message(self, day: date, source: str) -> str:
        """Why a day with no labelled rows cannot be trained on, for the user."""
        return f"source {source} has no {self.labelled_dataset} for {day.isoformat()}"


def load_domain(module: str) -> Domain:
    """The ``DOMAIN`` object of ``module``; a clear error naming the setting when it is empty
    (no domain configured), cannot be imported or defines none."""
    if not module:
        raise StepError(
            "domain.module is not set: name the module holding your domain's DOMAIN in its "
            "settings file (--config FILE or TRAINYARD_CONFIG; the shipped examples' are "
            "examples/<example>/settings.yaml) or in TRAINYARD_DOMAIN__MODULE"
        )
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        raise StepError(f"domain.module {module!r} cannot be imported: {exc}") from exc
    domain: Any = getattr(loaded, "DOMAIN", None)
    if domain is None:
        raise StepError(f"domain.module {module!r} defines no DOMAIN object")
    try:
        check_task(domain.task, domain.classes, f"domain {module}")
    except ValueError as exc:
        raise StepError(str(exc)) from exc
    return domain


def domain_options(domain: Domain) -> dict[str, Any]:
    """A domain's own options: the fields its class adds to :class:`Domain` (e.g. how its label
    is drawn), as JSON values (others as text). They enter the training set's input hash, as
    settings do, so changing one rebuilds the set."""
    base = {f.name for f in dataclasses.fields(Domain)}
    return {
        f.name: _json_value(getattr(domain, f.name))
        for f in dataclasses.fields(domain)
        if f.name not in base
    }


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return str(value)


def domain_module(domain: Domain) -> str:
    """Where ``domain`` is declared, for messages: its module and the module's file."""
    module = type(domain).__module__
    path = getattr(sys.modules.get(module), "__file__", None)
    return f"domain module {module}" + (f" ({path})" if path else "")


def check_features(domain: Domain) -> None:
    """``StepError`` naming the domain module when a declared feature view has no field, or the
    domain no feature at all (:func:`pipeline_steps.core.feature_views.check_feature_views`)."""
    rows = [*domain.row_features.categorical, *domain.row_features.numeric]
    check_feature_views(domain_module(domain), domain.feature_views, rows)


def declared_definitions(domain: Domain) -> list[Any] | None:
    """The Feast objects the domain declares (entities, views, its feature service), checked
    by :func:`check_features`; None when it declares no view (its Feast repository's files
    define them)."""
    if not domain.feature_views:
        return None
    check_features(domain)
    return feast_definitions(domain.feature_service, domain.feature_views)


def declared_source_columns(domain: Domain) -> dict[str, list[str]]:
    """Offline source name → the columns it is written with: the keys, event time and fields of
    the declared views reading it, in order (empty when the domain declares no view)."""
    columns: dict[str, list[str]] = {}
    for view in domain.feature_views:
        kept = columns.setdefault(view.source, [])
        kept += [c for c in source_columns(view) if c not in kept]
    return columns


def feature_columns(domain: Domain, service: Any) -> FeatureColumns:
    """The model's feature columns: the domain's row features, then each field of the Feast
    feature ``service`` in its order (strings are categorical, every other type numeric).
    ``StepError`` naming the domain module when there is none at all."""
    import_feast()
    from feast.types import String

    categorical, numeric = list(domain.row_features.categorical), list(domain.row_features.numeric)
    for projection in service.feature_view_projections:
        for field in projection.features:
            (categorical if field.dtype == String else numeric).append(field.name)
    if not categorical and not numeric:
        raise StepError(
            f"{domain_module(domain)}: the domain has no feature (no row feature, and feature "
            f"service {domain.feature_service!r} has no field): keep at least one column out of "
            "LEFT_OUT"
        )
    return FeatureColumns(categorical=categorical, numeric=numeric)


MISSING_CATEGORY = "<missing>"
"""What a missing categorical feature value becomes in the model's rows."""


def cast_features(rows: pd.DataFrame, columns: FeatureColumns) -> pd.DataFrame:
    """``rows`` with the model's column types, in place: numeric features float64, categorical
    ones strings with missing values as ``MISSING_CATEGORY``. The features step, the monitor and
    serving all type rows this way, so the model sees the same values from each."""
    for column in columns.numeric:
        rows[column] = rows[column].astype("float64")
    for column in columns.categorical:
        rows[column] = rows[column].astype("string").fillna(MISSING_CATEGORY).astype(object)
    return rows


def validated_hashes(lake: Lake, dataset: str, days: Sequence[date]) -> dict[str, str]:
    """The sha256 of each validated partition of ``dataset`` on ``days``, by date, read from
    the manifests alone; days without one are skipped, none at all is an error."""
    hashes = {}
    for day in days:
        folder = lake.validated_partition(dataset, day)
        if folder is not None:
            hashes[day.isoformat()] = lake.partition_manifest(folder).sha256
    if not hashes:
        raise StepError(f"no validated {dataset} partitions for {days[0]}..{days[-1]}")
    return hashes


@dataclass(frozen=True)
class ValidatedPartitions:
    """The validated partitions of ``dataset`` on ``days``, read one day at a time each time it
    is iterated (days without one are skipped), each passed through ``rows`` when given: a
    source whose memory is one day's, however long the window."""

    lake: Lake
    dataset: str
    days: Sequence[date]
    rows: Callable[[pd.DataFrame], pd.DataFrame] | None = None

    def __iter__(self) -> Iterator[pd.DataFrame]:
        for _, frame in self.by_day():
            yield frame

    def by_day(self) -> Iterator[tuple[date, pd.DataFrame]]:
        """Each day with a validated partition and its rows."""
        for day in self.days:
            folder = self.lake.validated_partition(self.dataset, day)
            if folder is None:
                continue
            frame = self.lake.read_table(folder, "data.parquet").to_pandas()
            yield day, self.rows(frame) if self.rows is not None else frame

    def by_batch(self, batch_rows: int) -> Iterator[tuple[date, pd.DataFrame]]:
        """Each day's rows in pieces of at most ``batch_rows`` rows, in the partition's order,
        with the day they belong to: memory holds one piece."""
        import pyarrow.parquet as pq

        for day in self.days:
            folder = self.lake.validated_partition(self.dataset, day)
            if folder is None:
                continue
            with self.lake.fs.open(self.lake.path(folder, "data.parquet"), "rb") as fh:
                for batch in pq.ParquetFile(fh).iter_batches(batch_size=batch_rows):
                    frame = batch.to_pandas()
                    yield day, self.rows(frame) if self.rows is not None else frame

    def hashes(self) -> dict[str, str]:
        """What :func:`validated_hashes` gives for these partitions."""
        return validated_hashes(self.lake, self.dataset, self.days)


SourceRows: TypeAlias = "pd.DataFrame | pa.Table | Iterable[pd.DataFrame | pa.Table]"
"""A Feast offline source's rows: one frame or table, or a stream of them."""


def read_validated(
    lake: Lake, dataset: str, days: Sequence[date]
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The validated partitions of ``dataset`` on ``days`` as one frame, and each one's sha256
    by date; days without a validated partition are skipped, none at all is an error. A pinned
    lake gives the pinned versions (``Lake.validated_partition``)."""
    import pandas as pd

    frames, hashes = [], {}
    for day in days:
        folder = lake.validated_partition(dataset, day)
        if folder is None:
            continue
        frames.append(lake.read_table(folder, "data.parquet").to_pandas())
        hashes[day.isoformat()] = lake.partition_manifest(folder).sha256
    if not frames:
        raise StepError(f"no validated {dataset} partitions for {days[0]}..{days[-1]}")
    return pd.concat(frames, ignore_index=True), hashes
