"""``trainyard calibrate``: the allowances of a suite's history checks, set on real days.

The days are a dataset's validated partitions in the lake (``--from lake``, the default: a
user's own history, after ``trainyard seed``) or the domain's own source (``--from domain``).
The checked statistics are those the suite already declares, or those of ``--columns``
(:func:`pipeline_steps.quality.allowances.candidates_for`). The report lists each check's
allowances, the largest deviation that set them and the day it fell on; ``--write`` rewrites
the suite's history checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from pipeline_steps.core.domain import load_domain
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import Settings
from pipeline_steps.quality.allowances import (
    Calibrated,
    Candidate,
    calibrate,
    candidates_for,
    report,
    rewrite_suite,
    settle_scales,
)
from pipeline_steps.quality.history import (
    DayStatistics,
    history_checks,
    partition_statistics,
    table_statistics,
)
from pipeline_steps.quality.suites import load_suite, suite_path


@dataclass(frozen=True)
class Calibration:
    """What ``trainyard calibrate`` found, and where it wrote it (None: not written)."""

    dataset: str
    days: int
    calibrated: list[Calibrated]
    written: str | None

    def render(self) -> str:
        where = f"written to {self.written}" if self.written else "not written (--write writes)"
        return (
            f"history checks of {self.dataset}, calibrated on {self.days} days; {where}\n\n"
            + report(self.calibrated)
        )


def calibrate_suite(
    settings: Settings,
    dataset: str,
    start: date,
    end: date,
    *,
    columns: Sequence[str] = (),
    source: str = "lake",
    write: bool = False,
) -> Calibration:
    """Calibrate ``dataset``'s history checks on the days ``start``..``end``.

    Raises ``StepError`` naming the option when the suite declares no history checks and no
    ``columns`` are given, a column is unknown, or fewer days than
    ``validation.history_min_days`` + 1 have data.
    """
    path = suite_path(settings.validation.expectations_dir, dataset)
    if not path.is_file():
        raise StepError(f"expectation suite {path} does not exist")
    domain = load_domain(settings.domain.module)
    if columns:
        schema = domain.schemas.get(dataset)
        unknown = [c for c in columns if schema is None or c not in schema.names]
        if unknown:
            raise StepError(f"--columns: {unknown} not in the {dataset} schema of {domain.name}")
        assert schema is not None
        try:
            candidates = candidates_for(schema, columns)
        except ValueError as exc:
            raise StepError(f"--columns: {exc}") from exc
    else:
        declared = {  # a warning and a critical check per statistic: one candidate
            (c.column, c.statistic): Candidate(column=c.column, statistic=c.statistic, log=c.log)
            for c in history_checks(load_suite(path))
        }
        candidates = list(declared.values())
        if not candidates:
            raise StepError(f"suite {path} declares no history checks: name them with --columns")
    wanted: list[tuple[str, str]] = [(c.column, c.statistic) for c in candidates]
    days = _statistics(settings, dataset, start, end, wanted, source)
    if len(days) <= settings.validation.history_min_days:
        raise StepError(
            f"only {len(days)} day(s) of {dataset} with rows in {start}..{end} "
            f"(--from {source}); more than validation.history_min_days="
            f"{settings.validation.history_min_days} are needed"
        )
    if columns:
        candidates = settle_scales(candidates, days)
    calibrated = calibrate(days, candidates, settings.validation)
    if write:
        rewrite_suite(path, calibrated)
    return Calibration(dataset, len(days), calibrated, str(path) if write else None)


def _statistics(
    settings: Settings,
    dataset: str,
    start: date,
    end: date,
    wanted: list[tuple[str, str]],
    source: str,
) -> dict[date, DayStatistics]:
    found: dict[date, DayStatistics] = {}
    if source == "lake":
        lake = Lake(settings.lake_root)
        for day in lake.partition_dates("validated", dataset):
            if start <= day <= end:
                folder = Lake.partition("validated", dataset, day)
                found[day] = partition_statistics(lake, folder, wanted)
        return found
    if source != "domain":
        raise StepError(f"--from must be lake or domain, got {source!r}")
    reader = load_domain(settings.domain.module).source(settings.ingest.batch_rows)
    day = start
    while day <= end:
        batches = list(reader.batches(dataset, day))
        if sum(b.num_rows for b in batches):
            found[day] = table_statistics(batches, wanted)
        day += timedelta(days=1)
    return found
