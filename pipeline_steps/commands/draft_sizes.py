"""How large a drafted domain's holdout and training epochs are, from its sample's rate of rows.

The defaults fit the shipped binary example: 900 rows a day, a one-day holdout of 200 positive ones,
a month of training rows in batches of 512. A smaller domain needs more holdout days for the gate to
decide on (``gate.min_positives`` positive rows, or ``gate.min_rows`` rows), and more passes over
its training set an epoch for enough optimizer steps (``train.min_steps_per_epoch``, not smaller
batches: batches of 32 trained a worse network than 100 batches of 512 on the same rows). A
window whose rows to fit do not fill two batches of 512 gets a smaller batch (``train.batch_size``,
a power of two at most half of them): the train step refuses a set smaller than one batch, and
a tuning trial draws up to twice the batch.
``init-domain`` drafts them into ``settings.yaml`` and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline_steps.core.settings import FeatureSettings, GateSettings, TrainSettings
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.quality.sample_profile import Roles, SampleProfile

HOLDOUT_ROOM = 1.5
"""The holdout is drafted to hold this many times what the gate needs, on a day-average rate:
days vary."""
MAX_HOLDOUT_DAYS = 30
"""The longest holdout drafted."""
BATCH_ROOM = 2
"""A window's rows to fit hold at least this many drafted batches: a tuning trial draws up to
twice the batch (``tuning.yaml``)."""
MIN_BATCH = 8
"""The smallest batch drafted."""


@dataclass(frozen=True, slots=True)
class Sizes:
    """``evaluate.holdout_days``, ``features.window_days``, ``train.min_steps_per_epoch`` and
    ``train.batch_size``, with why."""

    holdout_days: int
    window_days: int
    min_steps_per_epoch: int
    holdout_note: str
    steps_note: str
    batch_size: int = TrainSettings().batch_size


def _rarest_judged(
    profile: SampleProfile, roles: Roles, spanned: int, min_class_rows: int
) -> tuple[str, int, float, list[str]] | None:
    """For a task whose gate averages a metric over classes (macro-F1): the rarest class a
    holdout of at most ``MAX_HOLDOUT_DAYS`` holds ``min_class_rows`` rows of, the days it
    needs, its rows a day, and the rarer classes no drafted holdout can judge; None for other
    tasks."""
    spec = task_spec(roles.task)
    if not any(m.per_class and m.name in spec.gate_metrics for m in spec.metric_list):
        return None
    counts = profile.column(roles.label, "--label").counts
    rates = sorted(
        ((str(c), counts.get(c, 0) / spanned) for c in counts if counts.get(c, 0) > 0),
        key=lambda item: item[1],
    )
    unjudged: list[str] = []
    for name, rate in rates:
        days = max(1, math.ceil(HOLDOUT_ROOM * min_class_rows / rate))
        if days <= MAX_HOLDOUT_DAYS:
            return name, days, rate, unjudged
        unjudged.append(name)
    return None


def draft_sizes(profile: SampleProfile, roles: Roles) -> Sizes:
    """The holdout, window and epoch length for a domain whose sample is ``profile``."""
    gate, window = GateSettings(), FeatureSettings().window_days
    spanned = (roles.last_day - roles.first_day).days + 1
    label = profile.column(roles.label, "--label")
    if task_spec(roles.task).counts_positives:
        needed, what = gate.min_positives, f"positive ({roles.positive!r}) rows"
        seen = label.counts.get(roles.positive, 0)
        setting = "gate.min_positives"
    else:
        needed, what, seen, setting = gate.min_rows, "rows", label.present, "gate.min_rows"
    per_day = seen / spanned
    holdout = MAX_HOLDOUT_DAYS
    if per_day > 0:
        holdout = min(MAX_HOLDOUT_DAYS, max(1, math.ceil(HOLDOUT_ROOM * needed / per_day)))
    by_rows = holdout
    rarest = _rarest_judged(profile, roles, spanned, gate.min_class_rows)
    holdout = max(holdout, rarest[1]) if rarest else holdout
    window = max(window, 3 * holdout)
    holdout_note = (
        f"The sample has {per_day:.1f} {what} a day; the gate decides on at least {needed} "
        f"({setting}), so the holdout is {by_rows} day(s), {HOLDOUT_ROOM:g} x what a day-average "
        f"needs, of a {window}-day window."
    )
    if rarest and holdout > by_rows:
        name, days, rate, unjudged = rarest
        holdout_note = (
            f"The sample has {per_day:.1f} {what} a day; the gate decides on at least {needed} "
            f"({setting}), which {by_rows} day(s) hold; but the rarest class the gate judges, "
            f"{name!r} ({rate:.1f} rows a day), needs {days} day(s) for "
            f"gate.min_class_rows={gate.min_class_rows} ({HOLDOUT_ROOM:g} x a day-average)"
            + (f"; rarer, never judged: {', '.join(map(repr, unjudged))}" if unjudged else "")
            + f"; so the holdout is {holdout} day(s) of a {window}-day window."
        )
    if per_day * holdout < needed:
        holdout_note = (
            f"The sample has {per_day:.1f} {what} a day; the gate decides on at least {needed} "
            f"({setting}), which the longest holdout drafted, {holdout} days (about "
            f"{per_day * holdout:.0f}), does not hold: until you lower {setting} or lengthen "
            f"the holdout, every decision is undecided and no model is promoted."
        )
    train = TrainSettings()
    train_rows = label.present / spanned * (window - holdout)
    fitting = train_rows * (1 - train.validation_fraction)
    batch = train.batch_size
    smaller = ""
    if fitting < BATCH_ROOM * batch:
        batch = max(MIN_BATCH, 2 ** int(math.log2(max(fitting / BATCH_ROOM, 1))))
        smaller = (
            f" {fitting:,.0f} rows to fit do not hold batches of {train.batch_size} twice (a "
            f"trial draws up to twice the batch): the batch is {batch}"
            + (
                f", at most 1/{BATCH_ROOM} of them."
                if batch * BATCH_ROOM <= fitting
                else ", the smallest drafted, which they do not hold twice: lengthen "
                "features.window_days (the train step refuses a window with fewer rows to fit "
                "than a batch)."
            )
        )
    one_pass = fitting / batch
    floor = train.min_steps_per_epoch
    if one_pass < floor:
        steps_note = (
            f"About {train_rows:,.0f} training rows in the window at the sample's rate: one pass "
            f"in batches of {batch} is {one_pass:.0f} optimizer step(s), so each epoch "
            f"passes over the set again until it has {floor} (a network trained on few steps "
            "loses to the logistic baseline)."
        )
    else:
        steps_note = (
            f"About {train_rows:,.0f} training rows in the window at the sample's rate: one pass "
            f"in batches of {batch} is {one_pass:.0f} optimizer steps, at least the "
            f"{floor} an epoch needs."
        )
    return Sizes(holdout, window, floor, holdout_note, steps_note + smaller, batch)
