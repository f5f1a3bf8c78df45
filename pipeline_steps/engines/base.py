"""What a data step asks of the engine that runs it.

An engine validates a partition against its suite, joins entity rows point in time with the
domain's Feast feature service, and holds a drift window's rows while the monitor counts and
samples them. The steps open the engine the settings name once (:func:`open_engine`) and call it;
they hold no engine of their own. An engine is one module, ``pipeline_steps.engines.<name>``,
whose ``open_engine(settings)`` is a context manager giving its :class:`Engine`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import date
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    from great_expectations.core.expectation_suite import ExpectationSuite

    from pipeline_steps.core.domain import Domain, FeatureColumns
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.settings import EngineSettings, FeatureSettings
    from pipeline_steps.quality.calibration import WindowCounts
    from pipeline_steps.quality.suites import SuiteOutcome

JoinedRows = tuple["pa.RecordBatchReader", "FeatureColumns"]


class DriftWindow(Protocol):
    """The joined rows of a drift window's reference and current days, held by the engine
    (with the champion's prediction signal when it scored them)."""

    @property
    def columns(self) -> FeatureColumns:
        """The model's feature columns."""
        ...

    @property
    def counts(self) -> WindowCounts:
        """Per-day counts of the window's columns, counted where the rows are."""
        ...

    @property
    def predict(self) -> Callable[[pd.DataFrame], np.ndarray] | None:
        """The model's predictions on feature rows, loaded once by the window (None when it
        was given no model)."""
        ...

    @property
    def reference_rows(self) -> int: ...

    @property
    def current_rows(self) -> int: ...

    def sample(self, size: int) -> pd.DataFrame:
        """The reference rows pandas' ``sample(size, random_state=0)`` draws from them in the
        key's order, in the order drawn."""
        ...

    def day(self, day: date) -> pd.DataFrame:
        """The rows of ``day``, in the key's order."""
        ...


class Engine(Protocol):
    """One engine, open for a step."""

    @property
    def name(self) -> str: ...

    @property
    def data_docs(self) -> bool:
        """Whether validation renders Great Expectations' Data Docs."""
        ...

    @property
    def feast_offline(self) -> str | None:
        """The Feast offline store the engine joins through (``None``: the store config's
        own)."""
        ...

    @property
    def feast_materialization(self) -> dict[str, Any] | None:
        """The Feast materialisation engine (a ``batch_engine`` config) that loads the online
        store where the engine's workers can reach it (``None``: Feast's local engine, which
        pulls the rows into the step)."""
        ...

    def scratch(self, prefix: str) -> AbstractContextManager[str]:
        """A scratch folder for the block, removed afterwards: a local path, or an object store
        URL where the engine's workers share no disk with the step."""
        ...

    def sources_folder(self, folder: str, scratch: str) -> str:
        """Where the step writes the Feast offline sources the engine joins: ``folder`` (the
        run's Feast folder), or ``scratch`` when the engine's workers do not see that folder."""
        ...

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
        """The suite's outcome on the raw partition folder ``raw`` of ``lake``, the ``dropped``
        columns left out."""
        ...

    def joined(
        self,
        store: Any,
        domain: Domain,
        settings: FeatureSettings,
        entity_files: list[str],
        scratch: str,
    ) -> AbstractContextManager[JoinedRows]:
        """The entity rows joined point in time with the domain's feature service of ``store``,
        ordered by the key, as a stream of record batches; and the model's feature columns."""
        ...

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
    ) -> AbstractContextManager[DriftWindow]:
        """The drift window's joined rows, scored by the model at ``model_uri`` (its
        prediction signal in ``calibration.PREDICTION``) when given."""
        ...


@contextmanager
def open_engine(settings: EngineSettings) -> Iterator[Engine]:
    """The engine ``engine.name`` names, open for the block (a Spark application runs while
    it does)."""
    module = importlib.import_module(f"pipeline_steps.engines.{settings.name}")
    with module.open_engine(settings) as engine:
        yield engine
