"""Validate step: run each dataset's Great Expectations suite on the day's raw partition.

Passing partitions are published to ``validated/``; failing ones go to ``quarantine/`` with their
report, any earlier validated copy of that date is withdrawn, and the step fails with a message
naming the partition, the failed expectations, the columns and example values.
"""

from __future__ import annotations

import json
import logging
from datetime import date
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from pipeline_steps.context import RunContext, StepError
from pipeline_steps.lake import MANIFEST, Lake

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

log = logging.getLogger(__name__)
EXAMPLES = 5


def load_suite(expectations_dir: str, name: str) -> ExpectationSuite:
    """Read ``<expectations_dir>/<name>.json`` into a GX suite; errors name the file and entry."""
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    path = Path(expectations_dir) / f"{name}.json"
    if not path.is_file():
        raise StepError(f"expectation suite {path} does not exist")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise StepError(f"expectation suite {path} is not valid JSON: {exc}") from exc
    expectations = []
    for index, entry in enumerate(spec.get("expectations", [])):
        try:
            config = ExpectationConfiguration(
                type=entry["type"], kwargs=entry.get("kwargs", {}), meta=entry.get("meta")
            )
            expectations.append(config.to_domain_obj())
        except Exception as exc:  # GX raises several types for a bad entry
            raise StepError(f"{path}: expectations[{index}] is invalid: {exc}") from exc
    return ExpectationSuite(name=spec.get("name", name), expectations=expectations)


@cache
def _batch_definition() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas("lake").add_dataframe_asset("partition")
    return asset.add_batch_definition_whole_dataframe("whole_partition")


def as_frame(table: pa.Table) -> pd.DataFrame:
    """The pandas form suites are written against (integers with missing values become float64)."""
    return table.to_pandas()


def run_suite(frame: pd.DataFrame, suite: ExpectationSuite) -> dict[str, Any]:
    """Validate a frame against a suite and return GX's result as a JSON-ready dict."""
    batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
    result: dict[str, Any] = batch.validate(suite, result_format="SUMMARY").to_json_dict()
    return result


def failures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The failed expectations of a GX result, each with its column and example values."""
    failed = []
    for item in result["results"]:
        if item["success"]:
            continue
        config = item["expectation_config"]
        kwargs = {k: v for k, v in config["kwargs"].items() if k != "batch_id"}
        detail = item.get("result") or {}
        exception = (item.get("exception_info") or {}).get("exception_message")
        failed.append(
            {
                "expectation": config["type"],
                "column": kwargs.get("column"),
                "kwargs": kwargs,
                "unexpected_count": detail.get("unexpected_count"),
                "examples": (detail.get("partial_unexpected_list") or [])[:EXAMPLES],
                "observed_value": detail.get("observed_value"),
                "error": exception,
            }
        )
    return failed


def describe_failures(partition: str, failed: list[dict[str, Any]]) -> str:
    lines = [f"partition {partition} failed {len(failed)} expectation(s):"]
    for f in failed:
        where = f" on column {f['column']!r}" if f["column"] else ""
        what = []
        if f["unexpected_count"]:
            what.append(f"{f['unexpected_count']} unexpected value(s), e.g. {f['examples']}")
        if f["observed_value"] is not None:
            what.append(f"observed {f['observed_value']!r}")
        if f["error"]:
            what.append(f["error"].splitlines()[0])
        lines.append(f"  - {f['expectation']}{where}: {'; '.join(what) or f['kwargs']}")
    return "\n".join(lines)


def validate(ctx: RunContext) -> dict[str, Any]:
    """Validate every dataset's raw partition of the logical date.

    Returns the step manifest (verdict per dataset, report paths). Raises ``StepError`` when a
    partition is missing, unreadable or fails its suite; nothing reaches ``validated/`` then.
    """
    lake, day = ctx.lake, ctx.logical_date
    verdicts: dict[str, Any] = {}
    failed_messages: list[str] = []
    for dataset in ctx.settings.ingest.datasets:
        verdicts[dataset] = validate_partition(ctx, dataset, day)
        if not verdicts[dataset]["success"]:
            failed_messages.append(verdicts[dataset]["message"])

    if failed_messages:
        for dataset, verdict in verdicts.items():
            raw = Lake.partition("raw", dataset, day)
            if not verdict["success"]:
                with lake.staged_dir(Lake.partition("quarantine", dataset, day)) as tmp:
                    for name in ("data.parquet", MANIFEST):
                        lake.fs.copy(lake.path(raw, name), f"{tmp}/{name}")
                    lake.fs.copy(verdict["report"], f"{tmp}/validation.json")
            lake.remove(Lake.partition("validated", dataset, day))
        raise StepError("validation failed\n" + "\n".join(failed_messages))

    for dataset, verdict in verdicts.items():
        if verdict["status"] != "cached":
            publish(lake, dataset, day, verdict["report"])
    manifest = {
        "step": "validate",
        "logical_date": day.isoformat(),
        "verdict": "passed",
        "datasets": {
            k: {x: v[x] for x in ("success", "status", "report", "evaluated", "failed")}
            for k, v in verdicts.items()
        },
    }
    return ctx.record("validate", manifest)


def validate_partition(ctx: RunContext, dataset: str, day: date) -> dict[str, Any]:
    lake = ctx.lake
    raw = Lake.partition("raw", dataset, day)
    if not lake.exists(raw, MANIFEST):
        raise StepError(f"partition {lake.path(raw)} does not exist; run the ingest step first")
    raw_manifest = lake.read_json(raw, MANIFEST)
    validated = Lake.partition("validated", dataset, day)
    report = lake.path("reports", "validation", f"date={day.isoformat()}", f"{dataset}.json")
    if lake.exists(validated, MANIFEST):
        published = lake.read_json(validated, MANIFEST)
        if published.get("sha256") == raw_manifest["sha256"]:
            return {
                "success": True,
                "status": "cached",
                "report": report,
                "evaluated": 0,
                "failed": 0,
                "message": "",
            }
    try:
        frame = as_frame(lake.read_table(raw, "data.parquet"))
    except (pa.ArrowException, OSError) as exc:
        raise StepError(f"partition {lake.path(raw)} cannot be read: {exc}") from exc
    suite = load_suite(ctx.settings.validation.expectations_dir, dataset)
    result = run_suite(frame, suite)
    failed = failures(result)
    lake.write_json(
        {
            "partition": lake.path(raw),
            "sha256": raw_manifest["sha256"],
            "failures": failed,
            "result": result,
        },
        "reports",
        "validation",
        f"date={day.isoformat()}",
        f"{dataset}.json",
    )
    log.info(
        "validate %s %s: %d expectations, %d failed",
        dataset,
        day,
        len(result["results"]),
        len(failed),
    )
    return {
        "success": not failed,
        "status": "validated",
        "report": report,
        "evaluated": len(result["results"]),
        "failed": len(failed),
        "message": describe_failures(lake.path(raw), failed) if failed else "",
    }


def publish(lake: Lake, dataset: str, day: date, report: str) -> None:
    """Copy a passing raw partition to ``validated/`` atomically."""
    raw = Lake.partition("raw", dataset, day)
    with lake.staged_dir(Lake.partition("validated", dataset, day)) as tmp:
        lake.fs.copy(lake.path(raw, "data.parquet"), f"{tmp}/data.parquet")
        manifest = {**lake.read_json(raw, MANIFEST), "validation_report": report}
        lake.dump_json(manifest, f"{tmp}/{MANIFEST}")
