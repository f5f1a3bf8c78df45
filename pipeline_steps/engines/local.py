"""The local engine, the embedded default: everything in the step's own process.

Validation runs the suite through Great Expectations on pandas, chunk by chunk past
``validation.chunk_rows``, with Data Docs; the point-in-time join runs in DuckDB out of core
(:mod:`pipeline_steps.core.point_in_time`); a drift window's joined rows are spilled to a Parquet
file in the scratch folder, scored by the champion a batch at a time, and counted a column at a
time (:mod:`pipeline_steps.engines.window_file`), so no step holds a window in memory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipeline_steps.core.feature_store import joined_rows
from pipeline_steps.core.scoring import predicted_signal, scorer
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.engines.base import Engine, JoinedRows
from pipeline_steps.engines.window_file import FileCounts, SpilledWindow, write_window

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

    from pipeline_steps.core.domain import Domain
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.settings import EngineSettings, FeatureSettings
    from pipeline_steps.quality.suites import SuiteOutcome


@dataclass(frozen=True)
class LocalEngine:
    """:class:`~pipeline_steps.engines.base.Engine` in the step's process."""

    name: str = "local"
    data_docs: bool = True
    feast_offline: str | None = None
    feast_materialization: dict[str, Any] | None = None

    def scratch(self, prefix: str) -> AbstractContextManager[str]:
        return tempfile.TemporaryDirectory(prefix=prefix)

    def sources_folder(self, folder: str, scratch: str) -> str:
        return folder

    def validate(
        self,
        lake: Lake,
        raw: str,
        dataset: str,
        suite: ExpectationSuite,
        parameters: dict[str, Any],
        dropped: list[str],
        *,
        data_docs_dir: str | None,
        chunk_rows: int,
    ) -> SuiteOutcome:
        from pipeline_steps.quality.suite_chunks import run_partition_suite

        return run_partition_suite(
            lake, raw, dataset, suite, parameters, data_docs_dir, chunk_rows, dropped
        )

    def joined(
        self,
        store: Any,
        domain: Domain,
        settings: FeatureSettings,
        entity_files: list[str],
        scratch: str,
    ) -> AbstractContextManager[JoinedRows]:
        return joined_rows(store, domain, settings, entity_files, scratch)

    @contextmanager
    def window(
        self,
        store: Any,
        domain: Domain,
        settings: FeatureSettings,
        entity_files: list[str],
        scratch: str,
        *,
        reference_days: Sequence[date],
        current_days: Sequence[date],
        model_uri: str | None,
    ) -> Iterator[SpilledWindow]:
        path = Path(scratch, "window.parquet")
        with self.joined(store, domain, settings, entity_files, scratch) as (reader, columns):
            features = [*columns.categorical, *columns.numeric]
            predict = scorer(model_uri, features, domain) if model_uri is not None else None
            score = None
            if predict is not None:

                def score(rows: pa.Table) -> Any:
                    return predicted_signal(domain, predict(rows.select(features).to_pandas()))

            names = task_spec(domain.task).drifts_on_names
            signal = pa.string() if names else pa.float64()
            write_window(reader, path, score, signal)
        counts = FileCounts(path, domain.date_column, reference_days, current_days)
        yield SpilledWindow(columns=columns, counts=counts, predict=predict)


@contextmanager
def open_engine(settings: EngineSettings) -> Iterator[Engine]:
    """The local engine (nothing to start)."""
    yield LocalEngine()
