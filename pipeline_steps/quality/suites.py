"""Great Expectations suites stored as JSON, run on a dataset's partitions.

A suite file is GX's own JSON form (``name``, ``expectations`` with ``type``, ``kwargs``,
``meta``), plus an optional ``severity`` per expectation: ``critical`` (default) stops the run,
``warning`` is reported and the run goes on. Kwargs may refer to run-time values with
``{"$PARAMETER": "name"}`` (the partition date, row-count bounds from the trailing days).
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
import pyarrow as pa

from pipeline_steps.core.errors import StepError

if TYPE_CHECKING:
    import pyspark.sql
    from great_expectations.core.expectation_suite import ExpectationSuite

Engine = Literal["pandas", "spark"]

EXAMPLES = 5
SEVERITIES = ("critical", "warning")
UNBOUNDED: dict[str, Any] = {
    "coverage_first": "0001-01-01",
    "coverage_last": "9999-12-31",
    "ingested_at": "9999-12-31T23:59:59+00:00",
}
"""Values of the parameters a caller may not know (a file checked by hand, a source without a
declared coverage): each leaves its expectation open."""
PRESENT_MIN = "_present_min"
"""Suffix of the per-column parameters ``<column>_present_min`` (share of values present);
unknown (no trailing history) they are 0."""


KNOWN_MIN = "_known_min"
"""Suffix of the per-column parameters ``<column>_known_min`` (share of a day's values in a
drafted value set): the set's allowance for unseen values (``meta.by_size``), widened by the
chance a day of its size shows (``known_min``)."""


def chance_share(rate: float, rows: float, noise: float) -> float:
    """The largest share of ``rows`` rows that a binomial count at ``rate`` exceeds by chance no
    more often than a normal variable passes ``noise`` standard deviations (3: 0.13 % of days):
    a day of a few rows reaches shares far beyond its rate. ``rate`` itself without rows or
    noise."""
    from scipy.stats import binom

    count = round(rows)
    if count < 1 or noise <= 0:
        return rate
    tail = 0.5 * math.erfc(noise / math.sqrt(2))
    return max(rate, float(binom.isf(tail, count, min(max(rate, 0.0), 1.0))) / count)


def floor_share(value: float) -> float:
    """A least share, kept to 6 decimals by rounding down: a day with exactly the allowed
    count (7 of 9 values present: 0.777777…) must pass, and 0.777778 would refuse it."""
    return math.floor(max(0.0, value) * 1e6 + 1e-9) / 1e6


def known_min(by_size: dict[str, float], rows: int | None, noise: float) -> float:
    """The least share of a day's values a drafted value set must hold: 1 minus its allowance
    for unseen values (``by_size["allowed"]``), or, when more, the share of unseen values a day
    of its size reaches by chance at the set's unseen rate (``by_size["rate"]``,
    ``chance_share``; the day's values are about ``rows`` times the sample's share present,
    ``by_size["present"]``)."""
    allowed = float(by_size["allowed"])
    values = (rows or 0) * float(by_size.get("present", 1.0))
    chance = chance_share(float(by_size["rate"]), max(values, 1.0), noise) if rows else 0.0
    return floor_share(1.0 - max(allowed, chance))


def size_parameters(suite: ExpectationSuite, rows: int | None, noise: float) -> dict[str, float]:
    """``<column>_known_min`` of every drafted value set of the suite, for a day of ``rows``."""
    found = {}
    for expectation in suite.expectations:
        by_size = (expectation.meta or {}).get("by_size")
        mostly = expectation.configuration.kwargs.get("mostly")
        if by_size and isinstance(mostly, dict) and "$PARAMETER" in mostly:
            found[mostly["$PARAMETER"]] = known_min(by_size, rows, noise)
    return found


def with_defaults(suite: ExpectationSuite, parameters: dict[str, Any] | None) -> dict[str, Any]:
    """``parameters`` completed with the open value of every parameter the suite refers to
    that the caller did not give (``UNBOUNDED``; 0 for ``<column>_present_min``; None, no bound,
    for those of a history check; a drafted value set's own allowance; an open set's sample
    values)."""
    given = {**size_parameters(suite, None, 0.0), **(parameters or {})}
    for expectation in suite.expectations:
        history = "history" in (expectation.meta or {})
        sample = (expectation.meta or {}).get("open_set")
        for key, value in expectation.configuration.kwargs.items():
            name = value.get("$PARAMETER") if isinstance(value, dict) else None
            if name and name not in given:
                if key == "value_set" and sample is not None:
                    given[name] = list(sample)  # no history: the sample's values
                elif history:
                    given[name] = None
                elif name in UNBOUNDED:
                    given[name] = UNBOUNDED[name]
                elif name.endswith(PRESENT_MIN):
                    given[name] = 0.0
    return given


@dataclass(frozen=True, kw_only=True, slots=True)
class UnmetExpectation:
    """One expectation a frame did not meet, as the validation report stores it."""

    expectation: str
    severity: Literal["critical", "warning"]
    column: str | list[str] | None
    kwargs: dict[str, Any]
    unexpected_count: int | None
    examples: list[Any]
    """Up to ``EXAMPLES`` of the unexpected values."""
    observed_value: Any
    mismatched: dict[str, list[str]] | None
    """Schema expectations: the missing or unexpected columns, by kind."""
    error: str | None
    """The exception GX raised while evaluating it, if any."""
    hint: str | None = None
    """What to do about it, as the suite says (``meta.on_failure``; a drafted label's set)."""

    @property
    def label(self) -> str:
        """The expectation and its column, as manifests list warnings."""
        return self.expectation + (f" ({self.column})" if self.column else "")


@dataclass(frozen=True)
class SuiteOutcome:
    """What one suite said about one frame."""

    dataset: str
    evaluated: int
    failures: list[UnmetExpectation]  # critical: the partition must not be used
    warnings: list[UnmetExpectation]  # reported, the run continues
    result: dict[str, Any] = field(repr=False)
    data_docs: str | None = None  # folder with the rendered Data Docs site

    @property
    def success(self) -> bool:
        return not self.failures


def suite_path(expectations_dir: str, name: str) -> Path:
    return Path(expectations_dir) / f"{name}.json"


def load_suite(path: Path) -> ExpectationSuite:
    """Read a suite file; errors name the file and the entry.

    Parsed suites are kept per process while the file is unchanged (building GX expectation
    objects takes about a second per suite); each call returns a fresh copy.
    """
    if not path.is_file():
        raise StepError(f"expectation suite {path} does not exist")
    return copy.deepcopy(_parsed_suite(path, path.stat().st_mtime_ns))


@lru_cache(maxsize=32)
def _parsed_suite(path: Path, mtime_ns: int) -> ExpectationSuite:
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    import pipeline_steps.quality.expectations  # noqa: F401  (registers this project's expectations)

    if not path.is_file():
        raise StepError(f"expectation suite {path} does not exist")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise StepError(f"expectation suite {path} is not valid JSON: {exc}") from exc
    expectations = []
    for index, entry in enumerate(spec.get("expectations", [])):
        severity = entry.get("severity", "critical")
        if severity not in SEVERITIES:
            raise StepError(
                f"{path}: expectations[{index}].severity must be one of {SEVERITIES}, "
                f"got {severity!r}"
            )
        try:
            config = ExpectationConfiguration(
                type=entry["type"],
                kwargs=entry.get("kwargs", {}),
                meta=entry.get("meta"),
                severity=severity,
            )
            expectations.append(config.to_domain_obj())
        except Exception as exc:  # GX raises several types for a bad entry
            raise StepError(f"{path}: expectations[{index}] is invalid: {exc}") from exc
    return ExpectationSuite(name=spec.get("name", path.stem), expectations=expectations)


def as_frame(table: pa.Table) -> pd.DataFrame:
    """The pandas form suites are written against: integers as int64, or float64 where values
    are missing (pandas' own defaults). GX checks ranges of int64/float64 columns vectorised but
    narrower integers value by value, tens of times slower."""
    widened = pa.schema(
        pa.field(f.name, pa.int64(), f.nullable, f.metadata)
        if pa.types.is_integer(f.type) and f.type.bit_width < 64
        else f
        for f in table.schema
    )
    frame: pd.DataFrame = table.cast(widened).to_pandas(types_mapper=_arrow_strings)
    return frame


def _arrow_strings(kind: pa.DataType) -> Any:
    return pd.StringDtype("pyarrow") if pa.types.is_string(kind) else None


def run_suite(
    dataset: str,
    frame: pd.DataFrame | pyspark.sql.DataFrame,
    suite: ExpectationSuite,
    parameters: dict[str, Any] | None = None,
    data_docs_dir: str | None = None,
    *,
    engine: Engine = "pandas",
) -> SuiteOutcome:
    """Validate ``frame`` against ``suite``; render Data Docs into ``data_docs_dir`` if given.

    Without Data Docs the batch is validated directly; with them, through a Checkpoint, whose
    stored result the Data Docs action renders (the Checkpoint's freshness checks and result
    store cost more than the expectations on a day's partition). ``engine="spark"`` validates a
    Spark DataFrame through GX's Spark datasource (see :mod:`pipeline_steps.quality.spark_suite`,
    which prepares the frame and the suite)."""
    from great_expectations.checkpoint import UpdateDataDocsAction

    context = gx_context(data_docs_dir)
    values = with_defaults(suite, parameters)
    if not data_docs_dir:
        batch = whole_frame_batch(context, dataset, engine=engine)
        validation = validate_batch(batch, frame, suite, values)
        return suite_outcome(dataset, validation, None)
    actions = [UpdateDataDocsAction(name="data_docs", site_names=[DOCS_SITE])]
    checkpoint = add_checkpoint(context, dataset, suite, actions, engine=engine)
    outcome = checkpoint.run(batch_parameters={"dataframe": frame}, expectation_parameters=values)
    return suite_outcome(dataset, next(iter(outcome.run_results.values())), data_docs_dir)


DOCS_SITE = "trainyard"


def gx_context(data_docs_dir: str | None) -> Any:
    """An ephemeral GX context, with a Data Docs site in ``data_docs_dir`` if given."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    from pipeline_steps.quality.gx_compat import (
        patch_column_domains,
        patch_expectation_kwargs,
        patch_quantile_expectation,
        skip_batch_fingerprint,
    )

    patch_quantile_expectation()
    patch_column_domains()
    patch_expectation_kwargs()
    skip_batch_fingerprint()
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    if data_docs_dir:
        context.add_data_docs_site(
            site_name=DOCS_SITE,
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": data_docs_dir,
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    return context


RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": EXAMPLES}


def whole_frame_batch(context: Any, dataset: str, *, engine: Engine = "pandas") -> Any:
    """A batch definition of a whole dataframe (passed at run time): a pandas one, or with
    ``engine="spark"`` a Spark one, which GX does not cache (the caller decides whether the frame
    is cached, and releases it)."""
    if engine == "spark":
        source = context.data_sources.add_spark("lake", persist=False)
    else:
        source = context.data_sources.add_pandas("lake")
    return source.add_dataframe_asset(dataset).add_batch_definition_whole_dataframe("partition")


def validate_batch(
    batch: Any,
    frame: pd.DataFrame | pyspark.sql.DataFrame,
    suite: ExpectationSuite,
    parameters: dict[str, Any],
) -> Any:
    """GX's validation result of ``frame`` (through the batch definition ``batch``) against
    ``suite`` with the run's ``parameters``, no Checkpoint involved."""
    return batch.get_batch(batch_parameters={"dataframe": frame}).validate(
        suite, result_format=RESULT_FORMAT, expectation_parameters=parameters
    )


def add_checkpoint(
    context: Any,
    dataset: str,
    suite: ExpectationSuite,
    actions: list[Any],
    *,
    engine: Engine = "pandas",
) -> Any:
    """One Checkpoint validating a whole dataframe (passed at run time) against ``suite``, for
    the runs whose result the Data Docs render."""
    import great_expectations as gx

    batch = whole_frame_batch(context, dataset, engine=engine)
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=dataset, data=batch, suite=context.suites.add(suite))
    )
    return context.checkpoints.add(
        gx.Checkpoint(
            name=dataset,
            validation_definitions=[definition],
            actions=actions,
            result_format=RESULT_FORMAT,
        )
    )


def suite_outcome(dataset: str, validation: Any, data_docs_dir: str | None) -> SuiteOutcome:
    """A GX suite validation result, split into critical failures and warnings."""
    from pipeline_steps.quality.gx_compat import to_builtin

    result = to_builtin(validation.to_json_dict())
    failures: list[UnmetExpectation] = []
    warnings: list[UnmetExpectation] = []
    for item in result["results"]:
        if item["success"] or _nothing_to_judge(item):
            continue
        entry = _describe(item)
        (warnings if entry.severity == "warning" else failures).append(entry)
    # A warning and a critical expectation of one kind on one column are twins with wider and
    # narrower bounds (history checks, missing-share ceilings): when the critical one fails, the
    # warning says nothing more.
    stopped = {(f.expectation, str(f.column)) for f in failures}
    warnings = [w for w in warnings if (w.expectation, str(w.column)) not in stopped]
    return SuiteOutcome(
        dataset=dataset,
        evaluated=len(result["results"]),
        failures=failures,
        warnings=warnings,
        result=result,
        data_docs=data_docs_dir,
    )


def _nothing_to_judge(item: dict[str, Any]) -> bool:
    """A history check on a column without any value present that day (a calm day has no
    gusts): its statistic does not exist, and the missing-share checks judge the column."""
    config = item["expectation_config"]
    observed = (item.get("result") or {}).get("observed_value")
    empty = 0 if config["type"] == "expect_column_unique_value_count_to_be_between" else None
    return "history" in (config.get("meta") or {}) and observed == empty


def _describe(item: dict[str, Any]) -> UnmetExpectation:
    config = item["expectation_config"]
    kwargs = {k: v for k, v in config["kwargs"].items() if k != "batch_id"}
    detail = item.get("result") or {}
    mismatched = (detail.get("details") or {}).get("mismatched")
    severity = str(config.get("severity", "critical")).lower().rsplit(".", 1)[-1]
    return UnmetExpectation(
        expectation=config["type"],
        severity="warning" if severity == "warning" else "critical",
        column=kwargs.get("column") or kwargs.get("column_list"),
        kwargs=kwargs,
        unexpected_count=detail.get("unexpected_count"),
        examples=(detail.get("partial_unexpected_list") or [])[:EXAMPLES],
        observed_value=None if mismatched else detail.get("observed_value"),
        mismatched=mismatched,
        error=_exception_message(item.get("exception_info")),
        hint=(config.get("meta") or {}).get("on_failure"),
    )


def _exception_message(info: dict[str, Any] | None) -> str | None:
    """GX reports an exception either flat or keyed by the metric that raised it."""
    if not info:
        return None
    if "exception_message" in info:
        return info["exception_message"]
    messages = [v.get("exception_message") for v in info.values() if isinstance(v, dict)]
    return next((m for m in messages if m), None)


def describe(subject: str, entries: list[UnmetExpectation], what: str = "failed") -> str:
    """Readable lines: the subject, then per expectation the column and what was seen."""
    lines = [f"{subject} {what} {len(entries)} expectation(s):"]
    for f in entries:
        where = f" on column {f.column!r}" if f.column else ""
        seen = []
        if f.unexpected_count:
            seen.append(f"{f.unexpected_count} unexpected value(s), e.g. {f.examples}")
        for kind, columns in (f.mismatched or {}).items():
            seen.append(f"{kind} column(s) {columns}")
        if f.observed_value is not None:
            seen.append(f"observed {f.observed_value!r}" + _expected(f.kwargs))
        if f.error:
            seen.append(f.error.splitlines()[0])
        if f.hint:
            seen.append(f.hint)
        lines.append(f"  - {f.expectation}{where}: {'; '.join(seen) or f.kwargs}")
    return "\n".join(lines)


def _expected(kwargs: dict[str, Any]) -> str:
    """``, expected LOW..HIGH`` for an expectation bounded by ``min_value``/``max_value``."""
    if "min_value" not in kwargs and "max_value" not in kwargs:
        return ""
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    if isinstance(low, dict) or isinstance(high, dict):  # an unresolved parameter
        return ""
    return f", expected {'' if low is None else f'{low:g}'}..{'' if high is None else f'{high:g}'}"


def temporary_docs_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="trainyard-data-docs-")
