"""What ``trainyard init-domain`` checks before it makes a column a feature.

- **Sources of the label.** A column from which the label follows on the sample (the label is a
  function of it, or it predicts the label almost perfectly on rows it has not seen) is a copy
  of the answer, not a feature: a model trained on it scores well on the holdout and is useless
  on the rows it is meant for. Each column is judged alone, as a one-column model fitted on
  every other row and scored on the rest (``LEAK_SCORE``).
- **Strong features.** A kept column that alone predicts much of the label is named for review:
  only the team knows whether it is recorded before the outcome or with it.
- **Identifiers.** Integer columns named as identifiers (``user_id``, ``movieId``) or unique
  per row number things; their values have no order, and a growing id leaves any range the
  sample shows, so they are no numeric feature and get no range rule.
- **Integer codes.** Integer columns named as codes (``policePrecinct``, ``region``) with a
  dozen values at most are categories, not amounts.
- **Multi-valued text.** A string column of delimited values (``Drama|Comedy``) becomes 0/1
  flags of its most common values, one feature each.

Each decision carries its reason, printed by the command and written into the draft.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipeline_steps.core.tasks import task_spec
from pipeline_steps.quality.leak_checks import OneColumn, one_column_fit, pair_fit, together
from pipeline_steps.quality.sample_profile import (
    IDENTIFIER_NAME,
    ColumnProfile,
    Roles,
    SampleProfile,
)

LEAK_SCORE = {"classification": 0.98, "regression": 0.995}
"""A column whose one-column model reaches this balanced accuracy (classification) or R²
(regression) on the rows it was not fitted on is a source of the label. A real entity explains
much of a regression label on its own (a state's daily births, R² 0.985), a copy of the label in
64 bins nearly all of it (R² above 0.999); measured in docs/init-domain.md."""
REVIEW_SHARE = 0.4
"""A kept column whose one-column score goes this share of the way from chance to perfect is
named for review (``strong_features``): a binary label's balanced accuracy of 0.7, an R² of
0.4."""
CLASS_LEAK_SCORE = 0.99
"""A column whose one-column model tells one class from the rest with this balanced accuracy
(that class against the rest) on the rows it was not fitted on is a source of that class."""
PAIR_COLUMNS = 4
"""Most columns a near-perfect combination is searched among for pairs (those with the largest
drop-out losses)."""
PAIR_ADVICE = (
    "a combination that gives the label away unless both are known before the outcome. The gate "
    "refuses a near-perfect model; move one of them to LEFT_OUT"
)
"""What every verdict on a pair of columns advises, whichever check found the pair."""
CODE_NAME = re.compile(
    r"(precinct|district|ward|zone|region|code|category|type|class|group|sector|division|"
    r"cluster|segment|status|tier)s?$",
    re.IGNORECASE,
)
"""Names of integer columns that may code categories: ``policePrecinct``, ``region``."""
CODE_VALUES = 12
"""Most values an integer code column may have to be drafted as a category."""
DELIMITERS = ("|", ";")
"""Delimiters of multi-valued text."""
MULTI_VALUED_SHARE = 0.2
"""Least share of a column's values holding a delimiter for it to count as multi-valued."""
MAX_TOKENS = 200
"""Most distinct values a multi-valued column may hold (more: it is free text)."""
FLAGS = 20
"""Most flags drafted per multi-valued column: its most common values."""
FLAG_SHARE = 0.01
"""Least share of rows a value must appear in to become a flag."""


@dataclass(frozen=True, slots=True)
class MultiValued:
    """A column of delimited values and the values drafted as flags."""

    column: str
    delimiter: str
    values: tuple[str, ...]
    reason: str

    def flag(self, value: str) -> str:
        """The flag's column name: ``genres_drama``; other characters become ``_``."""
        slug = re.sub(r"[^0-9a-z]+", "_", value.lower()).strip("_") or "value"
        return f"{self.column}_{slug}"


def one_column_fits(
    profile: SampleProfile, roles: Roles, columns: list[str]
) -> dict[str, OneColumn]:
    """How well each of ``columns`` alone predicts the label on sample rows it was not fitted
    on (:func:`pipeline_steps.quality.leak_checks.one_column_fit`); columns with too few
    labelled rows to judge are left out."""
    label = profile.table.column(roles.label)
    fits = {}
    for name in columns:
        column = profile.column(name, "--label")
        fitted = one_column_fit(profile.table.column(name), column.numeric, label, roles.task)
        if fitted is not None:
            fits[name] = fitted
    return fits


def one_column_scores(profile: SampleProfile, roles: Roles, columns: list[str]) -> dict[str, float]:
    """Each column's one-column score: balanced accuracy (classification) or R²."""
    return {name: fit.score for name, fit in one_column_fits(profile, roles, columns).items()}


def leak_score(task: str) -> float:
    """The one-column score from which a column is a source of the label, for ``task``."""
    return LEAK_SCORE["regression" if task_spec(task).real_valued else "classification"]


def label_sources(
    profile: SampleProfile,
    roles: Roles,
    columns: list[str],
    scores: dict[str, float] | None = None,
) -> dict[str, str]:
    """The columns among ``columns`` from which the label follows on the sample, each with why
    (``scores``: their ``one_column_scores``, computed when not given). A part of a composite
    key names the entity and is never one: an entity may explain much of its label (a state's
    births) and is known before the label is."""
    found = {}
    threshold = leak_score(roles.task)
    measure = _measure(roles.task)
    if scores is None:
        scores = one_column_scores(profile, roles, columns)
    for name, score in scores.items():
        if score >= threshold and name not in roles.key_columns:
            found[name] = (
                f"a source of the label: {name} alone predicts {roles.label} with {measure} "
                f"{score:.3f} on sample rows it was not fitted on (at least {threshold}); a "
                "model would learn the answer from it"
            )
    return found


def class_sources(
    fits: dict[str, OneColumn], roles: Roles, leaks: set[str], numeric: set[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The columns (``fits`` less ``leaks`` and the key's parts) that give one class away: their
    one-column model tells that class from the rest with at least ``CLASS_LEAK_SCORE``,
    however little it says of the other classes. Two maps of column to why: the ``numeric``
    ones, left out (a lab value fixed for two classes and varying for the third, a size
    measured only for the most severe class, a price only one size has: measurements taken with
    the outcome), and the categories, kept for review (a category naming one class may be the
    thing itself: the one pizza sold in XL)."""
    left_out, review = {}, {}
    for name, fit in fits.items():
        if name in leaks or name in roles.key_columns:
            continue
        given = {c: s for c, s in fit.classes.items() if s >= CLASS_LEAK_SCORE}
        if not given or len(given) >= max(len(roles.classes), 2):
            continue
        shown = ", ".join(f"{c!r} {s:.3f}" for c, s in sorted(given.items()))
        figure = (
            f"{name} alone tells {shown} from the other {roles.label} values (balanced accuracy "
            "of that class against the rest, on sample rows it was not fitted on; at least "
            f"{CLASS_LEAK_SCORE}); over all classes {fit.score:.3f}"
        )
        if name in numeric:
            left_out[name] = (
                f"a source of the label for one class: {figure}. A model would learn that "
                "class from it"
            )
        else:
            review[name] = (
                f"kept, review: {figure}. A category that names one class may be the thing "
                "itself; if it is recorded with the outcome, move it to LEFT_OUT"
            )
    return left_out, review


def combination_sources(
    profile: SampleProfile, roles: Roles, categorical: list[str], numeric: list[str]
) -> tuple[float | None, dict[str, str]]:
    """How well the kept columns together predict the label (a small tree model on sample
    rows it was not fitted on), and, when near perfect (``leak_score``), the columns it rests
    on, each with why: those without which the model falls below that score (each column's
    drop-out), and among them the pairs that alone reach it (a price that, with the product's
    name, names the size)."""
    columns = [*categorical, *numeric]
    numbers = set(numeric)
    threshold = leak_score(roles.task)
    measure = _measure(roles.task)
    everything = together(profile.table, columns, numbers, roles.label, roles.task)
    if len(columns) < 2 or everything is None:
        return everything, {}
    if everything < threshold:
        return everything, _pairs(profile, roles, categorical, numeric)
    without = {
        name: together(
            profile.table, [c for c in columns if c != name], numbers, roles.label, roles.task
        )
        for name in columns
    }
    losses = {n: everything - s for n, s in without.items() if s is not None}
    needed = sorted(
        (n for n, s in without.items() if s is not None and s < threshold),
        key=lambda n: -losses[n],
    )[:PAIR_COLUMNS]
    found: dict[str, str] = {}
    for first, second in itertools.combinations(needed, 2):
        pair = together(profile.table, [first, second], numbers, roles.label, roles.task)
        if pair is None or pair < threshold:
            continue
        for name, other in ((first, second), (second, first)):
            found.setdefault(
                name,
                f"kept, review: with {other} it predicts {roles.label} with {measure} "
                f"{pair:.3f} on sample rows they were not fitted on (a small tree model; all "
                f"kept columns {everything:.3f}, {without[name]:.3f} without {name}): "
                + PAIR_ADVICE,
            )
    for name in [] if found else needed:  # a pair that alone is near perfect explains it
        found.setdefault(
            name,
            f"kept, review: a small tree model on all kept columns predicts {roles.label} with "
            f"{measure} {everything:.3f} on sample rows it was not fitted on, {without[name]:.3f} "
            f"without {name}: the near-perfect score rests on it. Unless it is known before "
            "the outcome, move it to LEFT_OUT",
        )
    return everything, found


def _pairs(
    profile: SampleProfile, roles: Roles, categorical: list[str], numeric: list[str]
) -> dict[str, str]:
    """The kept columns that, two by two, give the label away (``pair_fit`` at least
    ``leak_score``) though the tree model on all of them did not find it (a small sample), each
    with why."""
    label, threshold = profile.table.column(roles.label), leak_score(roles.task)
    numbers = set(numeric)
    found: dict[str, str] = {}
    for first, second in itertools.combinations([*categorical, *numeric], 2):
        score = pair_fit(
            profile.table.column(first),
            profile.table.column(second),
            (first in numbers, second in numbers),
            label,
            roles.task,
        )
        if score is None or score < threshold:
            continue
        for name, other in ((first, second), (second, first)):
            found.setdefault(
                name,
                f"kept, review: with {other} it predicts {roles.label} with "
                f"{_measure(roles.task)} {score:.3f}, each sample row predicted by the other "
                "rows with its pair of values: " + PAIR_ADVICE,
            )
    return found


def strong_features(scores: dict[str, float], roles: Roles, leaks: set[str]) -> dict[str, str]:
    """The kept columns (``scores`` less ``leaks``) that alone predict much of the label, each
    with a note to review it: no copy of the label, but a column recorded at or after the
    outcome (a search decided at the same stop, a delay known on arrival) would leak it, and
    only the team knows when each column is known. Much: ``REVIEW_SHARE`` of the way from
    chance (one over the classes; an R² of 0) to a perfect score."""
    chance = 0.0 if task_spec(roles.task).real_valued else 1 / max(len(roles.classes), 2)
    found = {}
    for name, score in sorted(scores.items(), key=lambda item: -item[1]):
        if name in leaks or name in roles.key_columns:
            continue
        if (score - chance) / (1 - chance) >= REVIEW_SHARE:
            found[name] = (
                f"kept, review: {name} alone predicts {roles.label} with {_measure(roles.task)} "
                f"{score:.3f} on sample rows it was not fitted on; no copy of the label (from "
                f"{leak_score(roles.task)}), but if it is recorded at or after the outcome the "
                "model learns what it cannot know when it predicts: then move it to LEFT_OUT"
            )
    return found


def _measure(task: str) -> str:
    return "R²" if task_spec(task).real_valued else "balanced accuracy"


def identifiers(profile: SampleProfile, columns: list[str]) -> dict[str, str]:
    """The integer columns among ``columns`` that identify things rather than measure them,
    each with why: named as identifiers, or unique per row."""
    found = {}
    for name in columns:
        column = profile.column(name, "--key")
        if column.kind != "integer":
            continue
        if IDENTIFIER_NAME.search(name):
            found[name] = (
                f"an identifier: integer values named as one ({column.distinct} distinct); "
                "their numbers have no order and new ones leave the sample's range, so it is "
                "no numeric feature and gets no range rule"
            )
        elif column.distinct == column.present >= 20 and column.missing == 0:
            found[name] = (
                f"an identifier: its {column.distinct} integer values are unique per row (a row "
                "number); no numeric feature, no range rule"
            )
    return found


def constant_where_labelled(
    profile: SampleProfile, roles: Roles, columns: list[str]
) -> dict[str, str]:
    """The columns among ``columns`` that hold one value (or none) on every sample row whose
    label is known, each with why: the model trains on those rows only, so such a column tells
    it nothing, however it varies where the label is missing (Minneapolis' ``MDC`` is ``other``
    exactly where ``personSearch`` is)."""
    labelled = pc.is_valid(profile.table.column(roles.label))
    unlabelled = len(labelled) - (pc.sum(labelled).as_py() or 0)
    found = {}
    for name in columns:
        values = profile.table.column(name).filter(labelled)
        kept = pc.unique(values.drop_null())
        if len(kept) <= 1 and profile.column(name, "--label").distinct > len(kept):
            one = f"one value, {kept[0].as_py()!r}," if len(kept) else "no value"
            found[name] = (
                f"{one} on every row with a {roles.label} (its other values lie on the "
                f"{unlabelled} rows without one): it tells the model nothing"
            )
    return found


def integer_codes(profile: SampleProfile, columns: list[str]) -> dict[str, str]:
    """The integer columns among ``columns`` whose few values name things rather than count
    them (a police precinct 1..5, a region code), each with why: named as a code
    (``CODE_NAME``) with at most ``CODE_VALUES`` values. They are categories: as numbers, a
    model would read precinct 4 as twice precinct 2."""
    found = {}
    for name in columns:
        column = profile.column(name, "--key")
        if column.kind != "integer" or not CODE_NAME.search(name):
            continue
        if 2 <= column.distinct <= CODE_VALUES:
            found[name] = (
                f"a category: {column.distinct} whole values named as codes "
                f"({_number_range(column)}); a model would read them as amounts. Move it to "
                "NUMERIC if its numbers count or measure"
            )
    return found


def _number_range(column: ColumnProfile) -> str:
    return f"{column.low:g}..{column.high:g}" if column.low is not None else "no values"


_CLOCK = re.compile(r"^\s*([01]?\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d+)?)?\s*$")


def clock_columns(profile: SampleProfile, columns: list[str]) -> list[str]:
    """The text columns among ``columns`` whose every value is a clock time, ``HH:MM`` or
    ``HH:MM:SS`` (a till's time of day beside its date column): each becomes an hour-of-day
    feature, never free text."""
    found = []
    for name in columns:
        column = profile.column(name, "--key")
        if column.kind != "string" or not column.present:
            continue
        values = profile.table.column(name).drop_null().cast(pa.string())
        if pc.all(pc.match_substring_regex(values, _CLOCK.pattern)).as_py():
            found.append(name)
    return found


CLOCK_NAME = re.compile(r"(time|clock|hhmm)$", re.IGNORECASE)
"""Names of integer columns that may hold clock times as ``HHMM`` whole numbers (``dep_time``:
517 is 05:17)."""


def integer_clocks(profile: SampleProfile, columns: list[str], *, named: bool = True) -> list[str]:
    """The integer columns among ``columns`` whose values are all clock times written as
    ``HHMM`` whole numbers (0..2400, the last two digits under 60), at least 20 distinct, and
    (``named``) whose names say time (``CLOCK_NAME``): each becomes an hour-of-day feature."""
    found = []
    for name in columns:
        column = profile.column(name, "--key")
        unnamed = named and not CLOCK_NAME.search(name)
        if column.kind != "integer" or column.distinct < 20 or unnamed:
            continue
        values = profile.table.column(name).drop_null().cast(pa.int64())
        minutes = pc.subtract(values, pc.multiply(pc.divide(values, 100), 100))
        valid = pc.and_(
            pc.and_(pc.greater_equal(values, 0), pc.less_equal(values, 2400)),
            pc.less(minutes, 60),
        )
        if pc.all(valid).as_py():
            found.append(name)
    return found


def multi_valued(profile: SampleProfile, columns: list[str]) -> dict[str, MultiValued]:
    """The string columns among ``columns`` that hold delimited values, with their flags."""
    found = {}
    for name in columns:
        column = profile.column(name, "--key")
        if column.kind != "string" or not column.present:
            continue
        values = profile.table.column(name).drop_null()
        for delimiter in DELIMITERS:
            holding = pc.sum(pc.match_substring(values, delimiter)).as_py() or 0
            if holding < MULTI_VALUED_SHARE * len(values):
                continue
            tokens = Counter(
                token.strip()
                for text in values.to_pylist()
                for token in text.split(delimiter)
                if token.strip()
            )
            if len(tokens) > MAX_TOKENS:
                break
            common = [t for t, n in tokens.most_common(FLAGS) if n >= FLAG_SHARE * len(values)]
            if not common:
                break
            found[name] = MultiValued(
                column=name,
                delimiter=delimiter,
                values=tuple(common),
                reason=(
                    f"multi-valued text: {holding} of {len(values)} values list several, split "
                    f"by {delimiter!r}, from {len(tokens)} distinct values; its "
                    f"{len(common)} most common (each in at least {FLAG_SHARE:.0%} of rows) "
                    "become 0/1 flags"
                ),
            )
            break
    return found
