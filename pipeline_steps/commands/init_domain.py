"""``trainyard init-domain``: a new domain drafted from a sample file, in a folder of its own.

    trainyard init-domain NAME --sample FILE [--label COL] [--task TASK]
                          [--time-column COL] [--key COL] [--out DIR] [--force]

The folder (default ``./NAME``) receives:

- ``NAME/domain.py``: the domain (``DOMAIN``): the sample's schema, its key, time column, label
  and task, categorical row features, and the numeric columns as a Feast source;
- ``expectations/NAME.json``: a first suite drafted from the sample
  (:mod:`pipeline_steps.quality.suite_draft`), which must pass on the sample itself;
- ``feature_repo/``: the Feast repository's config, and a file that hands the feast CLI the
  entity, feature view and feature service the domain module declares (the features step
  builds and applies them itself);
- ``settings.yaml``: the settings pointing at all of these, rows read by the ``file`` source.

Roles not given are inferred from the sample (:mod:`pipeline_steps.quality.sample_profile`).
The folder is written whole or not at all: built beside the target, then renamed into place. An
existing folder with files in it is replaced only with ``--force``.
"""

from __future__ import annotations

import importlib.util
import json
import keyword
import re
import textwrap
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline_steps.commands import domain_templates
from pipeline_steps.commands.draft_sizes import Sizes, draft_sizes
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.quality.draft_checks import (
    class_sources,
    clock_columns,
    combination_sources,
    constant_where_labelled,
    identifiers,
    integer_clocks,
    integer_codes,
    label_sources,
    leak_score,
    multi_valued,
    one_column_fits,
    strong_features,
)
from pipeline_steps.quality.sample_profile import (
    ROW_KEY,
    ColumnProfile,
    Roles,
    SampleError,
    SampleProfile,
    infer_roles,
    profile_sample,
)
from pipeline_steps.quality.suite_draft import Margins, RowCounts, draft_suite, row_counts
from pipeline_steps.quality.trailing import MIN_HISTORY
from pipeline_steps.tasks import Task

NAME = re.compile(r"[a-z_][a-z0-9_]*")
DATE_PARTS = ("year", "month", "day")
"""Parts of the time column's date that are no features: in a rolling window they take one or
two values and mark the newest days (the time of day and the weekday recur, and stay)."""
SLICE_VALUES = 12
"""Categorical columns with at most this many values are the evaluation's default slices."""
SLICES = 3
"""At most this many slice columns."""
ARROW_TYPES = {
    "int64": "pa.int64()",
    "double": "pa.float64()",
    "bool": "pa.bool_()",
    "string": "pa.string()",
    "date32[day]": "pa.date32()",
    "timestamp[us]": 'pa.timestamp("us")',
    "timestamp[us, tz=UTC]": 'pa.timestamp("us", tz="UTC")',
}
"""The schema's types as the domain module writes them."""


@dataclass(frozen=True, kw_only=True)
class DomainDraft:
    """Everything the new domain's files say, inferred from the sample and the arguments."""

    name: str
    sample: str
    """The sample: an absolute path, or an fsspec URL."""
    folder: Path
    """Where the domain is written, as an absolute path."""
    profile: SampleProfile
    roles: Roles
    suite: dict[str, Any]
    row_counts: RowCounts
    sizes: Sizes
    categorical: list[str] = field(default_factory=list)
    numeric: list[str] = field(default_factory=list)
    integer: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    slice_columns: tuple[str, ...] = ()
    date_column: str = "event_date"
    margins: Margins = field(default_factory=Margins)
    decisions: dict[str, str] = field(default_factory=dict)
    """Column -> what the draft made of it beyond its kind (left out, flags), and why."""
    flags: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Flag feature -> (multi-valued column, delimiter, value): 1 where the column lists it."""
    clocks: dict[str, str] = field(default_factory=dict)
    """Hour-of-day feature -> the text column of clock times (``HH:MM[:SS]``) it is read from."""
    clock_column: str = ""
    """The column of clock times joined to the time column's date for each row's event time
    (``--time-column date,time``); empty when the time column holds the time itself."""
    together: float | None = None
    """How well the kept columns together predict the label on sample rows a small tree model
    was not fitted on (balanced accuracy or R²); None when too few rows to judge."""
    row_key: str = ""
    """The key column ingest makes for rows without an id (``--key row``,
    ``ingest.row_key``); empty when the rows have a key of their own."""

    @property
    def sample_name(self) -> str:
        return self.sample.rsplit("/", 1)[-1]

    @property
    def class_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_") if part) or "Rows"

    @property
    def view(self) -> str:
        return f"{self.name}_numeric"

    @property
    def service(self) -> str:
        return f"{self.name}_features"

    @property
    def pattern(self) -> str:
        """The sample's kind of file, as a glob: ``*.csv``, ``*.csv.gz``, ``*.parquet``."""
        name = self.sample_name
        ending = name[name.index(".csv") :] if ".csv" in name else Path(name).suffix
        return f"*{ending}"

    @property
    def ingest_path(self) -> str:
        return f"{self.sample.rsplit('/', 1)[0]}/{self.pattern}"

    @property
    def task(self) -> Task:
        """The drafted task (templates branch on its attributes)."""
        return task_spec(self.roles.task)

    @property
    def task_text(self) -> str:
        if self.task.ordered:
            return f"{self.roles.task}, {len(self.roles.classes)} classes lowest first"
        if self.task.has_classes:
            return f"{self.roles.task}, {len(self.roles.classes)} classes"
        if self.task.counts_positives:
            return f"{self.roles.task}, {self.roles.positive!r} counts as 1"
        return self.roles.task

    @property
    def positive_reason(self) -> str:
        label = self.profile.column(self.roles.label, "--label")
        other = next(v for v in label.counts if v != self.roles.positive)
        return f"the other value is {other!r}; change it if that one is the event"

    @property
    def label_whole_floats(self) -> bool:
        label = self.profile.column(self.roles.label, "--label")
        return label.kind == "integer" and pa.types.is_floating(label.storage)

    @property
    def float_integers(self) -> list[str]:
        return [
            c.name
            for c in self.profile.columns
            if c.kind == "integer" and pa.types.is_floating(c.storage)
        ]

    @property
    def schema_note(self) -> str:
        note = "The sample's columns, as the file source reads them."
        if self.float_integers:
            note += (
                " Whole numbers with gaps are read as floats, as the sample's file holds them "
                f"(a CSV writes 11.0): {', '.join(self.float_integers)}."
            )
        return note

    @property
    def schema_fields(self) -> list[tuple[str, str]]:
        return [(f.name, ARROW_TYPES[str(f.type)]) for f in self.profile.schema()]

    @property
    def key_value_type(self) -> str:
        if self.roles.key_columns:
            return "STRING"  # the columns' values joined by "|"
        key = self.profile.column(self.roles.key, "--key")
        return "INT64" if key.kind == "integer" else "STRING"

    @property
    def domain_summary(self) -> str:
        roles = self.roles
        return (
            f"The {self.name} domain, drafted by ``trainyard init-domain`` from "
            f"{self.sample_name} ({self.profile.rows} rows, {roles.first_day}..{roles.last_day})."
            f"\n\nOne entity row per ``{roles.key}``, dated by ``{roles.time_column}``; the label "
            f"is ``{roles.label}`` ({self.task_text}). Strings with few values are row features; "
            "the numeric columns reach the model through the Feast feature view "
            f"``FEATURE_VIEW``, keyed by ``{roles.key}`` at each row's event time, built from "
            "the lists below: a column named in ``LEFT_OUT`` leaves the model, the view and its "
            "offline source. "
            "Rows are read by the ``file`` source (settings.yaml) and checked by "
            f"``expectations/{self.name}.json``. Review each choice: the module is yours to "
            "change."
        )

    @property
    def features_summary(self) -> str:
        return (
            f"Feast definitions of the {self.name} domain for the feast CLI, built from "
            f"``{self.name}/domain.py`` (``FEATURE_VIEW``): nothing to edit here."
            "\n\nThe features step builds the same objects from the domain, writes the offline "
            f"source ``$TRAINYARD_FEAST_DIR/sources/{self.view}.parquet`` from the validated "
            f"partitions (``{self.name}.domain.{self.class_name}.feature_sources``) and applies "
            "them; it does not read this file. To apply them by hand, the domain's package on "
            f"PYTHONPATH: ``TRAINYARD_FEAST_DIR=/tmp/{self.name}-feast feast -c feature_repo "
            "apply``."
        )

    @property
    def empty_days(self) -> str:
        """``domain.empty_days``: ``skip`` when the sample has days without rows."""
        with_rows, spanned = self.row_counts.days_with_rows
        return "skip" if with_rows < spanned else "fail"

    @property
    def empty_days_note(self) -> str:
        with_rows, spanned = self.row_counts.days_with_rows
        if with_rows < spanned:
            return (
                f"{spanned - with_rows} of the sample's {spanned} days have no rows: a day "
                "without rows is ordinary here, its runs end skipped (fail: a broken feed)."
            )
        return (
            f"Every one of the sample's {spanned} days has rows: a day without any is a broken "
            "feed and fails its run (skip: ordinary, its runs end skipped)."
        )

    @property
    def default_batch_size(self) -> int:
        return TrainSettings().batch_size

    @property
    def tuning_batch_sizes(self) -> list[int]:
        """The batch sizes a trial draws: half, once and twice the drafted ``train.batch_size``."""
        size = self.sizes.batch_size
        return sorted({max(8, size // 2), size, size * 2})

    @property
    def settings_summary(self) -> str:
        roles = self.roles
        return (
            f"Settings of the {self.name} domain, drafted by trainyard init-domain from "
            f"{self.sample}. The label {roles.label} ({self.task_text}), the key {roles.key}, "
            f"the time column {roles.time_column} and the features are declared in "
            f"{self.name}/domain.py; the rules in expectations/{self.name}.json."
        )

    @property
    def ingest_note(self) -> str:
        return (
            f"Every {self.pattern} file in the sample's folder; a day's rows are those whose "
            f"{self.roles.time_column} falls on it. Point it at where new files land."
        )

    @property
    def row_count_note(self) -> str:
        days = [n for n in self.roles.days.values() if n]
        seen = self.row_counts.ratios
        ratios = f"{seen[0]:.2f}..{seen[1]:.2f}" if seen else "(too few days to compare)"
        with_rows, spanned = self.row_counts.days_with_rows
        return (
            f"A sample day with rows holds {min(days)}..{max(days)} of them, {ratios} times the "
            "mean of its trailing days; the bounds are those ratios widened (never inside the "
            "defaults, the lower one above 0), and row_count_noise standard deviations of chance "
            "(the square root of the mean) beyond them. Days without rows are not validated. "
            f"{with_rows} of the sample's {spanned} days have rows: trailing_days "
            f"({self.row_counts.trailing_days}) holds about as many days with rows as 14 days "
            "of a source with rows every day."
        )


@dataclass(frozen=True)
class InitResult:
    """The written folder, its files and what to run next."""

    draft: DomainDraft
    files: list[str]
    evaluated: int
    """Expectations of the drafted suite, all met by the sample."""

    def next_commands(self) -> list[str]:
        """The commands that take the new domain from its sample to a first trained model."""
        d, roles = self.draft, self.draft.roles
        covered = roles.first_day + timedelta(days=d.sizes.window_days - 1)
        if covered > roles.last_day:  # the window reaches past the sample: seed the source
            last, before = covered.isoformat(), (covered - timedelta(days=1)).isoformat()
            reach = [
                f"# the window is {d.sizes.window_days} days ({d.sizes.holdout_days} of them the "
                f"holdout), longer than the sample: seed the source's days up to {before}, or "
                "shorten features.window_days and evaluate.holdout_days"
            ]
        else:
            last, before = roles.last_day.isoformat(), sorted(roles.days)[-2:][0].isoformat()
            reach = []
        return [
            f"export PYTHONPATH={d.folder}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"export TRAINYARD_CONFIG={d.folder}/settings.yaml",
            f"trainyard validate --path {d.sample}"
            + (" --split-by-date" if len(roles.days) > 1 else ""),
            *reach,
            f"trainyard seed --start {roles.first_day.isoformat()} --end {before} --keep-going",
            "for step in ingest validate features train evaluate promote; do "
            f"trainyard step $step --run-id {d.name}-first --logical-date {last}; done",
        ]

    @property
    def together_note(self) -> str:
        """How well the kept columns predict the label together, and what a near-perfect
        figure means."""
        d = self.draft
        together = d.together or 0.0
        measure = "R²" if d.task.real_valued else "balanced accuracy"
        note = (
            f"Together, the kept columns predict {d.roles.label} with {measure} {together:.3f} "
            "on sample rows a small tree model was not fitted on"
        )
        if together >= leak_score(d.roles.task):
            note += (
                ": near perfect, so a leak or a very easy task. The gate refuses a near-perfect "
                "model unless gate.easy_task_reason says why the task is this easy"
            )
        return textwrap.fill(note + ".", 100)

    def render(self) -> str:
        """What was written, and the next commands."""
        d, roles = self.draft, self.draft.roles
        lines = [
            f"Drafted domain {d.name} in {d.folder} from {d.sample_name}: {d.profile.rows} rows, "
            f"{roles.first_day}..{roles.last_day}; label {roles.label} ({d.task_text}), key "
            f"{roles.key}, time column {roles.time_column}.",
            f"The suite's {self.evaluated} rules pass on the sample; each names its figure and "
            "margin in meta.why: review them.",
            *([self.together_note] if d.together is not None else []),
            *(["", "Decided (also in domain.py):"] if d.decisions else []),
            *(
                textwrap.fill(f"{name}: {why}", 100, initial_indent="  ", subsequent_indent="    ")
                for name, why in d.decisions.items()
            ),
            "",
            "Sized (also in settings.yaml):",
            *(
                textwrap.fill(text, 100, initial_indent="  ", subsequent_indent="    ")
                for text in (
                    f"evaluate.holdout_days {d.sizes.holdout_days}: {d.sizes.holdout_note}",
                    f"train.min_steps_per_epoch {d.sizes.min_steps_per_epoch}"
                    + (
                        f", train.batch_size {d.sizes.batch_size}"
                        if d.sizes.batch_size != d.default_batch_size
                        else ""
                    )
                    + f": {d.sizes.steps_note}",
                    f"validation.trailing_days {d.row_counts.trailing_days}: "
                    f"{d.row_counts.days_with_rows[0]} of the sample's "
                    f"{d.row_counts.days_with_rows[1]} days have rows",
                )
            ),
            "",
            *(f"  {path}" for path in self.files),
            "",
            "Next:",
            *(f"  {command}" for command in self.next_commands()),
            "",
            "Or run its DAGs under Airflow: put settings.yaml in the deployment's domains folder"
            " (orchestration.domains_dir, docs/teams.md), its package on the scheduler's "
            f"PYTHONPATH; then {d.name}_training, _drift_monitor, _tuning and _serving appear:",
            f"  airflow dags unpause {d.name}_training",
            f"  airflow dags trigger {d.name}_training --logical-date {roles.last_day}",
        ]
        return "\n".join(lines)


def draft_domain(
    name: str,
    sample: str,
    *,
    out: str | None = None,
    label: str | None = None,
    task: str | None = None,
    time_column: str | None = None,
    key: str | None = None,
    classes: str | None = None,
    time_zone: str = "",
    date_format: str | None = None,
    margins: Margins | None = None,
) -> DomainDraft:
    """The new domain inferred from ``sample``; ``SampleError`` names a bad argument, the file and
    the column, ``StepError`` a bad name."""
    check_name(name, out)
    margins = margins or Margins()
    profile = profile_sample(sample)
    time_column, clock_column = _date_and_clock(profile, time_column)
    row_key = ""
    if key == ROW_KEY and ROW_KEY not in profile.names:  # rows without an id: a key made
        row_key = ROW_KEY
        profile = profile_sample(sample, row_key=row_key)
    profile, roles = infer_roles(
        profile,
        label=label,
        task=task,
        time_column=time_column,
        key=key,
        classes=classes,
        time_zone=time_zone,
        date_format=date_format,
    )
    taken = {roles.key, roles.time_column, roles.label}
    columns = [c for c in profile.columns if c.name not in taken]
    names = [c.name for c in columns]
    ids = identifiers(profile, names)
    multi = multi_valued(profile, [n for n in names if n not in ids])
    roles = replace(roles, identifiers=tuple(ids))
    codes = integer_codes(profile, [n for n in names if n not in ids])
    categorical = [
        c.name
        for c in columns
        if (c.categorical(margins.category_limit) and c.name not in multi) or c.name in codes
    ]
    numeric = [
        c.name
        for c in columns
        if (c.numeric or c.kind == "boolean")
        and c.name not in roles.time_encodings
        and c.name not in ids
        and c.name not in codes
        and roles.calendar.get(c.name) not in DATE_PARTS
    ]
    clock_numbers = integer_clocks(profile, numeric)
    if clock_column:
        clock_numbers += integer_clocks(profile, [clock_column], named=False)
    numeric = [c for c in numeric if c not in clock_numbers]
    categorical = [c for c in categorical if c != clock_column]
    constant = constant_where_labelled(profile, roles, categorical + numeric)
    categorical = [c for c in categorical if c not in constant]
    numeric = [c for c in numeric if c not in constant]
    fits = one_column_fits(profile, roles, categorical + numeric)
    scores = {name: fit.score for name, fit in fits.items()}
    leaks = label_sources(profile, roles, categorical + numeric, scores)
    one_class, named = class_sources(fits, roles, set(leaks), set(numeric))
    leaks |= one_class
    categorical = [c for c in categorical if c not in leaks]
    numeric = [c for c in numeric if c not in leaks]
    together, combined = combination_sources(profile, roles, categorical, numeric)
    review = strong_features(scores, roles, set(leaks)) | named | combined
    flags = {
        m.flag(value): (m.column, m.delimiter, value) for m in multi.values() for value in m.values
    }
    free = [n for n in names if n not in ids and n not in multi and n not in categorical]
    clock_texts = clock_columns(profile, [n for n in free if n not in leaks])
    clocks = {
        f"{name}_hour": name
        for name in dict.fromkeys([*clock_texts, *clock_numbers])
        if f"{name}_hour" not in profile.names
    }
    if clock_column and clock_column not in clocks.values():
        raise SampleError(
            f"--time-column {roles.time_column},{clock_column}: {clock_column} in "
            f"{profile.path} holds no clock times (HH:MM or HH:MM:SS text, or HHMM whole "
            "numbers such as 517 for 05:17); name the clock column second"
        )
    recurring = [
        c.name
        for c in columns
        if roles.calendar.get(c.name) == "day" and c.distinct >= 3 and c.name not in leaks
    ]
    fallback = recurring[:1] if not numeric and not flags and not clocks else []
    numeric += fallback
    if not numeric and not flags and not clocks:
        raise StepError(
            f"{sample} has no numeric column besides the key and the label; the Feast feature "
            "view needs one"
        )
    decisions = {
        **(
            {roles.label: f"classes {' < '.join(roles.classes)}: {roles.class_order}"}
            if roles.classes
            else {}
        ),
        **{name: f"left out: {why}" for name, why in ids.items()},
        **{name: f"left out: {why}" for name, why in leaks.items()},
        **{name: f"left out: {why}" for name, why in constant.items()},
        **{name: f"flags: {m.reason}" for name, m in multi.items()},
        **{
            name: (
                f"the hour of its clock times (HH:MM[:SS]) is the feature {feature}; the text "
                "itself is left out"
                if name not in clock_numbers
                else f"the hour of its clock times (HHMM whole numbers: 517 is 05:17) is the "
                f"feature {feature}; the number itself is left out"
            )
            + (
                f"; with {roles.time_column}'s date it is each row's event time"
                if name == clock_column
                else ""
            )
            for feature, name in clocks.items()
        },
        **{name: why for name, why in codes.items() if name in categorical},
        **{
            name: "left out: encodes the time (a holdout's values would lie beyond every "
            "training value)"
            for name in roles.time_encodings
        },
        **{
            name: f"left out: the {part} of {roles.time_column}; in a rolling window it only "
            "marks the newest days; its rule is its natural range"
            for name, part in roles.calendar.items()
            if part in DATE_PARTS and name not in roles.time_encodings and name not in fallback
        },
        **{
            name: f"kept: the day of {roles.time_column}, the only numeric column left for the "
            "Feast feature view, which needs one; its rule is its natural range"
            for name in fallback
        },
        **review,
    }
    chosen = {*categorical, *numeric}
    decisions |= {
        c.name: f"left out: {_why_left_out(c, margins)}"
        for c in columns
        if c.name not in chosen and c.name not in decisions and c.name not in multi
    }
    counts = {c.name: c.distinct for c in columns}
    return DomainDraft(
        name=name,
        sample=sample if "://" in sample else str(Path(sample).resolve()),
        folder=Path(out or name).resolve(),
        profile=profile,
        roles=roles,
        suite=draft_suite(name, profile, roles, margins, MIN_HISTORY),
        decisions=decisions,
        flags=flags,
        clocks=clocks,
        margins=margins,
        row_counts=row_counts(roles.days, margins, MIN_HISTORY),
        sizes=draft_sizes(profile, roles),
        categorical=categorical,
        numeric=numeric,
        integer=[c.name for c in columns if c.name in numeric and c.kind != "float"]
        + [*flags, *clocks],
        left_out=[c.name for c in columns if c.name not in categorical and c.name not in numeric],
        slice_columns=tuple(c for c in categorical if 2 <= counts[c] <= SLICE_VALUES)[:SLICES],
        date_column="event_date" if "event_date" not in profile.names else "entity_event_date",
        row_key=row_key,
        together=together,
        clock_column=clock_column,
    )


def _date_and_clock(profile: SampleProfile, time_column: str | None) -> tuple[str | None, str]:
    """``--time-column`` as the column of dates and, when it names two (``date,time``), the
    column of clock times; ``SampleError`` naming the argument for more than two or a column
    the sample lacks."""
    if not time_column or "," not in time_column:
        return time_column, ""
    parts = [part.strip() for part in time_column.split(",")]
    if len(parts) != 2 or not all(parts):
        raise SampleError(
            f"--time-column {time_column}: name one column of times, or a column of dates and "
            "one of clock times (--time-column date,time)"
        )
    profile.column(parts[1], "--time-column")
    return parts[0], parts[1]


def _why_left_out(column: ColumnProfile, margins: Margins) -> str:
    """Why a column with no other decision is no feature, in words."""
    if column.kind == "empty":
        return (
            "always missing in the sample; its rule warns when a day fills it (a new field: a "
            "feature then only if it is known when the model predicts)"
        )
    if column.kind == "string":
        return (
            f"text of {column.distinct} distinct values in {column.present} rows (free text or "
            f"an identifier: a category needs at most {margins.category_limit} values, each "
            "seen twice on average); its rule is a range of lengths"
        )
    return f"a {column.kind} column; add it to the features by hand if the model should see it"


def check_name(name: str, out: str | None) -> None:
    """``StepError`` unless ``name`` can be the domain's package: a lowercase identifier that no
    installed module already owns (a package in ``out`` itself, written before, may)."""
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise StepError(
            f"NAME {name!r} must be a lowercase Python identifier (letters, digits, _), "
            "the name of the domain's package"
        )
    spec = importlib.util.find_spec(name)
    folder = Path(out or name).resolve()
    origin = Path(spec.origin).resolve() if spec and spec.origin else None
    if spec is not None and (origin is None or folder not in origin.parents):
        raise StepError(
            f"NAME {name!r} is already an installed module ({spec.origin}); choose another, "
            "the domain's package would shadow it"
        )


def init_domain(
    name: str,
    sample: str,
    *,
    out: str | None = None,
    force: bool = False,
    label: str | None = None,
    task: str | None = None,
    time_column: str | None = None,
    key: str | None = None,
    classes: str | None = None,
    time_zone: str = "",
    date_format: str | None = None,
    margins: Margins | None = None,
) -> InitResult:
    """Draft the domain and write its folder whole, or raise with nothing written."""
    folder, source = Path(out or name).resolve(), Path(sample).resolve()
    if "://" not in sample and (folder == source.parent or folder in source.parents):
        raise StepError(
            f"the sample {source} lies inside {folder}, which init-domain would replace; "
            "choose another --out"
        )
    if folder.is_file() or (folder.is_dir() and any(folder.iterdir()) and not force):
        raise StepError(
            f"{folder} exists and is not empty; pass --force to replace it, or choose --out"
        )
    draft = draft_domain(
        name,
        sample,
        out=out,
        label=label,
        task=task,
        time_column=time_column,
        key=key,
        classes=classes,
        time_zone=time_zone,
        date_format=date_format,
        margins=margins,
    )
    with Lake(str(folder.parent)).staged_dir(folder.name) as staged:
        files = write_files(draft, Path(staged))
        evaluated = check_on_sample(draft, Path(staged))
    return InitResult(draft=draft, files=files, evaluated=evaluated)


def write_files(draft: DomainDraft, folder: Path) -> list[str]:
    """Render the domain's files into ``folder``; their paths relative to it."""
    import jinja2

    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    env.filters["py"] = python_literal
    env.filters["tojson"] = json.dumps
    env.filters["py_lines"] = python_lines
    env.filters["py_dict"] = python_dict
    env.filters["wrap"] = wrap
    files: dict[str, str | jinja2.Template] = {
        f"{draft.name}/__init__.py": f'"""The {draft.name} domain (see domain.py)."""\n',
        f"{draft.name}/domain.py": env.from_string(domain_templates.DOMAIN_MODULE),
        f"expectations/{draft.name}.json": json.dumps(draft.suite, indent=2) + "\n",
        "feature_repo/feature_store.yaml": env.from_string(domain_templates.FEATURE_STORE),
        "feature_repo/features.py": env.from_string(domain_templates.FEATURES_MODULE),
        "settings.yaml": env.from_string(domain_templates.SETTINGS),
        "tuning.yaml": env.from_string(domain_templates.TUNING),
    }
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else content.render(d=draft)
        if path.suffix == ".py":
            compile(text, str(path), "exec")  # a template that renders bad Python is a bug here
        path.write_text(text)
    return list(files)


def python_literal(value: Any) -> str:
    """``value`` as Python source, strings in double quotes (as the formatter writes them)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple):
        items = [python_literal(v) for v in value]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    if isinstance(value, list):
        return f"[{', '.join(python_literal(v) for v in value)}]"
    return repr(value)


def python_lines(values: list[str] | tuple[str, ...]) -> str:
    """A list or tuple as Python source, one item a line (as the formatter writes long ones)."""
    empty, (opening, closing) = not values, ("[", "]") if isinstance(values, list) else ("(", ")")
    if empty:
        return opening + closing
    return "\n".join([opening, *(f"    {python_literal(v)}," for v in values), closing])


def python_dict(values: dict[str, Any]) -> str:
    """A dict as Python source, one item a line (empty: ``{}``)."""
    if not values:
        return "{}"
    items = [f"    {python_literal(k)}: {python_literal(v)}," for k, v in values.items()]
    return "\n".join(["{", *items, "}"])


def wrap(text: str, prefix: str = "") -> str:
    """Paragraphs of ``text`` filled to the line length, each line starting with ``prefix``."""
    width = 100 - (0 if prefix else 4)  # a docstring's closing quotes stay inside the line
    return f"\n{prefix.rstrip()}\n".join(
        textwrap.fill(paragraph, width, initial_indent=prefix, subsequent_indent=prefix)
        for paragraph in text.split("\n\n")
    )


def check_on_sample(draft: DomainDraft, folder: Path) -> int:
    """Run the written suite on the sample, read as the file source reads a day of it; the
    number of expectations. ``StepError`` when the sample fails its own suite."""
    from pipeline_steps.domain.sources import conform, with_row_keys
    from pipeline_steps.quality.file_check import read_any
    from pipeline_steps.quality.suites import as_frame, describe, load_suite, run_suite

    suite = load_suite(folder / "expectations" / f"{draft.name}.json")
    schema = draft.profile.schema()
    read = read_any(draft.sample, schema)
    if draft.row_key:
        read = with_row_keys(read, draft.row_key, draft.sample)
    table = pa.Table.from_batches([conform(batch, schema) for batch in read.to_batches()])
    # The sample as one partition: no trailing days to bound its row count; ingested now.
    parameters = {
        "row_count_min": 0,
        "row_count_max": table.num_rows,
        "ingested_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    outcome = run_suite(draft.name, as_frame(table), suite, parameters)
    if outcome.failures:
        raise StepError(describe(f"sample {draft.sample}", outcome.failures))
    return outcome.evaluated
