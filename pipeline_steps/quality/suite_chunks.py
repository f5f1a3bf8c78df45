"""A suite run over a large parquet partition chunk by chunk, with bounded memory.

Row-wise expectations (nulls, ranges, sets, types, clock times, lengths) run through one GX
Checkpoint per chunk; their unexpected counts and examples are summed across chunks and
``mostly`` is applied to the totals, so the verdict is the one a single frame would get.
Expectations about the whole table cannot be judged per chunk; they are computed from
aggregates gathered while streaming: the row count (parquet metadata), compound-key uniqueness
(a 64-bit hash per row; rows under a repeated hash are read back for the examples), column
quantiles (the column's values, 8 bytes a row) and the statistics of history checks (mean and
standard deviation merged chunk by chunk, distinct values counted). The next chunk is read and
converted in a background thread while GX validates the current one. The merged result has GX's
own shape, so reports, Data Docs and failure messages read as for a single frame.

Merging and the whole-table verdicts copy GX's rules (``mostly``, percentages, ``ignore_row_if``,
strict bounds, quantile interpolation and tolerance) of the version pinned in ``pyproject.toml``;
``tests/data/test_suite_chunks_rules.py`` runs each through GX and through here and names the
rule that no longer matches.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pandas.api.types import is_numeric_dtype

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.prefetch import prefetch
from pipeline_steps.quality.history import STATISTICS, Accumulator
from pipeline_steps.quality.suites import (
    DOCS_SITE,
    EXAMPLES,
    SuiteOutcome,
    add_checkpoint,
    as_frame,
    gx_context,
    run_suite,
    suite_outcome,
    validate_batch,
    whole_frame_batch,
    with_defaults,
)

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

    from pipeline_steps.core.lake import Lake

ROW_COUNT = "expect_table_row_count_to_be_between"
UNIQUE_KEY = "expect_compound_columns_to_be_unique"
QUANTILES = "expect_column_quantile_values_to_be_between"
WHOLE_TABLE = (ROW_COUNT, UNIQUE_KEY, QUANTILES, *STATISTICS)
COUNTS = ("element_count", "missing_count", "unexpected_count")


def run_suite_chunked(
    dataset: str,
    parquet: pq.ParquetFile,
    suite: ExpectationSuite,
    parameters: dict[str, Any],
    data_docs_dir: str | None,
    chunk_rows: int,
    columns: list[str] | None = None,
) -> SuiteOutcome:
    """Validate a parquet file ``chunk_rows`` rows at a time against ``suite`` (only ``columns``
    when given)."""
    from great_expectations.checkpoint import CheckpointResult, UpdateDataDocsAction
    from great_expectations.core.expectation_suite import ExpectationSuite

    parameters = with_defaults(suite, parameters)
    expectations = [(e, resolve(e.configuration.kwargs, parameters)) for e in suite.expectations]
    whole = [(e, kw) for e, kw in expectations if e.expectation_type in WHOLE_TABLE]
    rowwise = ExpectationSuite(
        name=suite.name,
        expectations=[_fresh(e) for e, _ in expectations if e.expectation_type not in WHOLE_TABLE],
    )
    context = gx_context(data_docs_dir)
    aggregates = Aggregates.for_expectations(whole)
    first: Any = None  # the Checkpoint's first run, which the Data Docs name
    if data_docs_dir:
        checkpoint = add_checkpoint(context, dataset, rowwise, [])
    else:
        batch = whole_frame_batch(context, dataset)
    merged: Any = None
    for frame in prefetch(
        _chunks(parquet, chunk_rows, columns)
    ):  # the next chunk is read meanwhile
        if data_docs_dir:
            run = checkpoint.run(
                batch_parameters={"dataframe": frame}, expectation_parameters=parameters
            )
            if first is None:
                first = run
            result = next(iter(run.run_results.values()))
        else:
            result = validate_batch(batch, frame, rowwise, parameters)
        merged = result if merged is None else _merge(merged, result)
        aggregates.add(frame)

    judged = iter(merged.results)
    merged.results = [
        _judge_whole(e, kw, aggregates, parquet)
        if e.expectation_type in WHOLE_TABLE
        else next(judged)
        for e, kw in expectations
    ]
    _restate(merged)
    if data_docs_dir:
        identifier = next(iter(first.run_results))
        context.suites.delete(suite.name)
        context.suites.add(_fresh_suite(suite))
        context.validation_results_store.set(identifier, merged)
        UpdateDataDocsAction(name="data_docs", site_names=[DOCS_SITE]).run(
            CheckpointResult(
                run_id=first.run_id,
                run_results={identifier: merged},
                checkpoint_config=checkpoint,
            )
        )
    return suite_outcome(dataset, merged, data_docs_dir)


def resolve(kwargs: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """Kwargs with ``{"$PARAMETER": name}`` replaced by the run's value."""
    return {
        k: parameters.get(v["$PARAMETER"]) if isinstance(v, dict) and "$PARAMETER" in v else v
        for k, v in kwargs.items()
    }


def _fresh(expectation: Any) -> Any:
    config = expectation.configuration
    config.id = None
    return config.to_domain_obj()


def _fresh_suite(suite: ExpectationSuite) -> ExpectationSuite:
    from great_expectations.core.expectation_suite import ExpectationSuite

    return ExpectationSuite(name=suite.name, expectations=[_fresh(e) for e in suite.expectations])


def _chunks(
    parquet: pq.ParquetFile, chunk_rows: int, columns: list[str] | None = None
) -> Iterator[pd.DataFrame]:
    for batch in parquet.iter_batches(batch_size=chunk_rows, columns=columns):
        yield as_frame(pa.Table.from_batches([batch]))


def _merge(merged: Any, chunk: Any) -> Any:
    """Fold one chunk's results into the running result (the same row-wise expectations).

    GX may order a run's results unlike the suite, and differently from one run to the next
    (two rules on one column), so results are paired by their configuration, whose
    parameters GX has resolved; ``mostly`` is read from there too."""
    parts: dict[str, list[Any]] = {}
    for part in chunk.results:
        parts.setdefault(_identity(part), []).append(part)
    for total in merged.results:
        part = parts[_identity(total)].pop(0)
        if part.exception_info and part.exception_info.get("raised_exception"):
            total.exception_info = part.exception_info
        a, b = total.result, part.result
        if "unexpected_count" in a and "unexpected_count" in b:
            for key in COUNTS:
                if key in a:
                    a[key] += b.get(key, 0)
            a["partial_unexpected_list"] = (
                list(a.get("partial_unexpected_list") or [])
                + list(b.get("partial_unexpected_list") or [])
            )[:EXAMPLES]
            a.pop("partial_unexpected_counts", None)
            a.pop("partial_unexpected_index_list", None)
            _percentages(a)
            total.success = _mostly_met(a, total.expectation_config.kwargs.get("mostly"))
        elif total.success and not part.success:
            total.result, total.success = b, False
    return merged


def _identity(result: Any) -> str:
    config = result.expectation_config
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    return json.dumps([config.type, kwargs], sort_keys=True, default=str)


def _percentages(result: dict[str, Any]) -> None:
    elements = result.get("element_count", 0)
    missing = result.get("missing_count", 0)
    present = elements - missing
    unexpected = result["unexpected_count"]
    result["unexpected_percent"] = share(unexpected, present)
    if "missing_count" in result:
        result["missing_percent"] = share(missing, elements)
        result["unexpected_percent_total"] = share(unexpected, elements)
        result["unexpected_percent_nonmissing"] = share(unexpected, present)


def share(part: int, whole: int) -> float | None:
    """A percentage as GX computes it; None without a denominator."""
    return part / whole * 100 if whole else None


def _mostly_met(result: dict[str, Any], mostly: float | None) -> bool:
    """GX's rule: the share of non-missing values that are expected reaches ``mostly``."""
    present = result.get("element_count", 0) - result.get("missing_count", 0)
    if present == 0:
        return True
    return (present - result["unexpected_count"]) / present >= (1.0 if mostly is None else mostly)


def _restate(merged: Any) -> None:
    results = merged.results
    passed = sum(bool(r.success) for r in results)
    merged.success = passed == len(results)
    merged.statistics.update(
        evaluated_expectations=len(results),
        successful_expectations=passed,
        unsuccessful_expectations=len(results) - passed,
        success_percent=100.0 * passed / len(results) if results else None,
    )


# A uniqueness expectation's key columns and its ``ignore_row_if``
Key = tuple[tuple[str, ...], str]


@dataclass
class Aggregates:
    """What the whole-table expectations need, gathered chunk by chunk."""

    keys: dict[Key, list[np.ndarray]] = field(default_factory=dict)
    skipped: dict[Key, int] = field(default_factory=dict)
    values: dict[str, list[np.ndarray]] = field(default_factory=dict)
    statistics: Accumulator | None = None

    @classmethod
    def for_expectations(cls, whole: list[tuple[Any, dict[str, Any]]]) -> Aggregates:
        aggregates = cls()
        for expectation, kw in whole:
            if expectation.expectation_type == UNIQUE_KEY:
                key = unique_key(kw)
                aggregates.keys[key], aggregates.skipped[key] = [], 0
            elif expectation.expectation_type == QUANTILES:
                aggregates.values[kw["column"]] = []
        wanted = [
            (kw["column"], STATISTICS[e.expectation_type])
            for e, kw in whole
            if e.expectation_type in STATISTICS
        ]
        if wanted:
            aggregates.statistics = Accumulator(wanted)
        return aggregates

    def add(self, frame: pd.DataFrame) -> None:
        for (columns, ignore_row_if), hashes in self.keys.items():
            if set(columns) <= set(frame.columns):
                keys = considered_rows(frame[list(columns)], ignore_row_if)
                hashes.append(key_hashes(keys, columns))
                self.skipped[columns, ignore_row_if] += len(frame) - len(keys)
        for column, values in self.values.items():
            if column in frame.columns:
                values.append(frame[column].dropna().to_numpy())
        if self.statistics is not None:
            wanted = sorted({c for c, _ in self.statistics.wanted} & set(frame.columns))
            self.statistics.add(pa.Table.from_pandas(frame[wanted], preserve_index=False))


def unique_key(kw: dict[str, Any]) -> Key:
    """The key columns and GX's default ``ignore_row_if`` for compound uniqueness."""
    return tuple(kw["column_list"]), kw.get("ignore_row_if") or "all_values_are_missing"


def considered_rows(keys: pd.DataFrame, ignore_row_if: str) -> pd.DataFrame:
    """GX's rule: rows whose key is all (or any) missing are left out of uniqueness."""
    if ignore_row_if not in ("all_values_are_missing", "any_value_is_missing"):
        return keys
    return keys.dropna(how="all" if ignore_row_if == "all_values_are_missing" else "any")


def key_hashes(frame: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """A 64-bit hash of each row's key, equal across chunks for equal keys.

    Each column's distinct values are hashed once (numbers as float64, so a chunk holding
    integers as floats hashes them alike) and the row's column hashes are mixed FNV-style."""
    mixed = np.zeros(len(frame), np.uint64)
    for name in columns:
        codes, uniques = pd.factorize(frame[name], use_na_sentinel=False)
        values = np.asarray(uniques, dtype=float if is_numeric_dtype(uniques) else object)
        mixed = (mixed * FNV_PRIME) ^ pd.util.hash_array(values)[codes]
    return mixed


FNV_PRIME = np.uint64(1_099_511_628_211)


def _judge_whole(
    expectation: Any, kw: dict[str, Any], aggregates: Aggregates, parquet: pq.ParquetFile
) -> Any:
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )

    kind = expectation.expectation_type
    if kind == ROW_COUNT:
        rows = parquet.metadata.num_rows
        success, result = _between(rows, kw), {"observed_value": rows}
    elif kind == UNIQUE_KEY:
        success, result = _unique_key(kw, aggregates, parquet)
    elif kind in STATISTICS:
        success, result = _statistic(kw, STATISTICS[kind], aggregates)
    else:
        success, result = _quantiles(kw, aggregates)
    return ExpectationValidationResult(
        success=success,
        expectation_config=expectation.configuration,
        result=result,
        exception_info={
            "raised_exception": False,
            "exception_message": None,
            "exception_traceback": None,
        },
    )


def _unique_key(
    kw: dict[str, Any], aggregates: Aggregates, parquet: pq.ParquetFile
) -> tuple[bool, dict[str, Any]]:
    """Rows whose key repeats, among the rows GX considers; ``mostly`` as GX applies it."""
    key = unique_key(kw)
    columns, ignore_row_if = key
    parts = aggregates.keys.get(key) or []
    hashes = np.concatenate(parts) if parts else np.empty(0, np.uint64)
    ordered = np.sort(hashes)
    repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    unexpected = int(np.isin(hashes, repeated).sum()) if len(repeated) else 0
    examples: list[dict[str, Any]] = []
    if unexpected:
        for batch in parquet.iter_batches(columns=list(columns), batch_size=65_536):
            frame = considered_rows(as_frame(pa.Table.from_batches([batch])), ignore_row_if)
            rows = frame[np.isin(key_hashes(frame, columns), repeated)]
            examples += rows.head(EXAMPLES - len(examples)).to_dict("records")
            if len(examples) >= EXAMPLES:
                break
    skipped = aggregates.skipped.get(key, 0)
    result: dict[str, Any] = {
        "element_count": len(hashes) + skipped,
        "unexpected_count": unexpected,
        "partial_unexpected_list": examples,
        "missing_count": skipped,
    }
    _percentages(result)
    return _mostly_met(result, kw.get("mostly")), result


def _statistic(
    kw: dict[str, Any], statistic: str, aggregates: Aggregates
) -> tuple[bool, dict[str, Any]]:
    """A history check's statistic over every chunk; fails where no value is present, as GX."""
    value = aggregates.statistics.value(kw["column"], statistic) if aggregates.statistics else None
    return value is not None and _between(value, kw), {"observed_value": value}


def _between(value: float, kw: dict[str, Any]) -> bool:
    """GX's rule for a value between ``min_value`` and ``max_value`` (either open, either
    strict when ``strict_min``/``strict_max``)."""
    low, high = kw.get("min_value"), kw.get("max_value")
    above = low is None or (value > low if kw.get("strict_min") else value >= low)
    below = high is None or (value < high if kw.get("strict_max") else value <= high)
    return above and below


def _quantiles(kw: dict[str, Any], aggregates: Aggregates) -> tuple[bool, dict[str, Any]]:
    """GX's rule: pandas quantiles ("nearest" unless ``allow_relative_error`` names another
    interpolation), each within its range or within a relative 1e-4 of a bound."""
    from great_expectations.util import isclose

    ranges = kw["quantile_ranges"]
    parts = aggregates.values.get(kw["column"]) or []
    values = pd.Series(np.concatenate(parts)) if parts else pd.Series([], dtype=float)
    interpolation = kw.get("allow_relative_error") or "nearest"
    observed = values.quantile(ranges["quantiles"], interpolation=interpolation).tolist()
    details = [
        not math.isnan(v)
        and (
            (low is not None and isclose(v, low, rtol=1e-4))
            or (high is not None and isclose(v, high, rtol=1e-4))
            or ((low is None or v >= low) and (high is None or v <= high))
        )
        for v, (low, high) in zip(observed, ranges["value_ranges"], strict=True)
    ]
    return all(details), {
        "observed_value": {"quantiles": list(ranges["quantiles"]), "values": observed},
        "details": {"success_details": details},
    }


def run_partition_suite(
    lake: Lake,
    raw: str,
    dataset: str,
    suite: ExpectationSuite,
    parameters: dict[str, Any],
    data_docs_dir: str | None,
    chunk_rows: int,
    dropped: list[str] | None = None,
) -> SuiteOutcome:
    """Run the suite on the whole partition, or chunk by chunk when it has more rows; the
    ``dropped`` columns (added upstream, ``validation.added_columns=warn_and_drop``) left out."""
    path = lake.path(raw, "data.parquet")
    try:
        with lake.fs.open(path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            columns = [c for c in parquet.schema_arrow.names if c not in (dropped or [])]
            if parquet.metadata.num_rows > chunk_rows:
                return run_suite_chunked(
                    dataset, parquet, suite, parameters, data_docs_dir, chunk_rows, columns
                )
            frame = as_frame(parquet.read(columns=columns))
    except (pa.ArrowException, OSError) as exc:
        raise StepError(f"partition {lake.path(raw)} cannot be read: {exc}") from exc
    return run_suite(dataset, frame, suite, parameters, data_docs_dir)
