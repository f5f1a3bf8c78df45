"""The order of a label's classes, as ``init-domain`` drafts it.

A label of grades, severities or bands has an order, and its class indices should keep it (a
model or a report that reads classes as ordered then reads them right). The order is, first
that which it finds:

1. the one given (``--classes low,mid,high``), which must name each of the sample's classes
   once and may name classes the sample lacks (a rare class a month did not show);
2. numbers (``1``, ``2.5``) by value;
3. words of one known scale (``low < medium < high``, ``No Cloud < Some Cloud < Overcast``);
4. text that starts with numbers, such as bands (``<18``, ``18-24``, ``65+``; ``Category 1``),
   by its first number;
5. otherwise alphabetical, and the draft says no order was found.

Words of a scale and bands are an order the values themselves state, so ``init-domain`` drafts
such a label as an ``ordinal`` task; so too whole numbers that run without a gap over at most
``ORDINAL_NUMBERS`` values (ratings 1..5, grades 0..3). Other numbers (codes with gaps, many
values) and alphabetical classes stay ``multiclass`` (:func:`states_order`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline_steps.core.errors import StepError

SCALES: tuple[tuple[str, ...], ...] = (
    ("none", "very low", "low", "medium", "high", "very high"),
    ("very low", "low", "moderate", "high", "very high"),
    ("low", "mid", "high"),
    ("lowest", "lower", "middle", "upper", "highest"),
    ("none", "minimal", "mild", "moderate", "severe", "critical"),
    ("minor", "moderate", "major", "critical"),
    ("trivial", "minor", "major", "critical", "blocker"),
    ("very poor", "poor", "fair", "average", "good", "very good", "excellent"),
    ("bad", "average", "good"),
    ("never", "rarely", "sometimes", "often", "usually", "always"),
    ("strongly disagree", "disagree", "neutral", "agree", "strongly agree"),
    ("very unlikely", "unlikely", "neutral", "likely", "very likely"),
    ("very dissatisfied", "dissatisfied", "neutral", "satisfied", "very satisfied"),
    ("xxs", "xs", "s", "m", "l", "xl", "xxl", "xxxl"),
    ("extra small", "small", "medium", "large", "extra large"),
    ("tiny", "small", "medium", "large", "huge"),
    ("short", "medium", "long"),
    ("slow", "medium", "fast"),
    ("cold", "cool", "mild", "warm", "hot"),
    ("early", "on time", "late"),
    ("no cloud", "some cloud", "overcast"),
    ("clear", "partly cloudy", "mostly cloudy", "cloudy", "overcast"),
    ("first", "second", "third", "fourth", "fifth"),
    ("fair", "good", "very good", "premium", "ideal"),
    ("primary", "secondary", "tertiary"),
    ("elementary", "middle school", "high school", "college", "graduate"),
    ("infant", "child", "teen", "adult", "senior"),
    ("daily", "weekly", "monthly", "yearly"),
)
"""Ordinal vocabularies, each in its order; a label's classes are ordered by one when all of its
values (in any case, ``_`` and ``-`` read as spaces) are words of that scale."""

_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")
_ABOVE = re.compile(r"^\s*(>|over\b|above\b|more than\b)|\+\s*$", re.IGNORECASE)
_BELOW = re.compile(r"^\s*(<|under\b|below\b|less than\b)", re.IGNORECASE)


ORDINAL_NUMBERS = 10
"""The most whole-number classes drafted as an ordinal label (beyond: multiclass)."""


@dataclass(frozen=True)
class ClassOrder:
    """The classes in the order of their indices, and why in that order; ``found`` names the
    rule that found it (``given``, ``numbers``, ``scale``, ``bands``), empty for alphabetical."""

    classes: tuple[str, ...]
    reason: str
    found: str = ""


def states_order(order: ClassOrder) -> bool:
    """Whether the values state their order: words of a scale, bands, or whole numbers that
    run without a gap over 3..``ORDINAL_NUMBERS`` values; an order given by ``--classes`` is
    the user's and says nothing of the task."""
    if order.found in ("scale", "bands"):
        return True
    if order.found != "numbers" or not 3 <= len(order.classes) <= ORDINAL_NUMBERS:
        return False
    values = [float(c) for c in order.classes]
    whole = all(v.is_integer() for v in values)
    return whole and values[-1] - values[0] == len(values) - 1


def class_order(values: Iterable[object], given: str | None = None) -> ClassOrder:
    """The classes of a label whose sample holds ``values`` (each once), in their order;
    ``given``, a comma-separated order (``--classes``), must name every class of the sample
    once and may name more. Raises ``StepError`` naming ``--classes`` when it does not."""
    classes = [str(v) for v in values]
    if given is not None:
        named = _given(classes, given)
        absent = [c for c in named if c not in classes]
        reason = "in the order given by --classes"
        if absent:
            reason += f" ({', '.join(absent)}: not in the sample, declared for later days)"
        return ClassOrder(named, reason, "given")
    for order, how, found in (
        (_by_number, "numbers, by value", "numbers"),
        (_by_scale, "words of an ordered scale", "scale"),
        (_by_leading_number, "bands, by their first number", "bands"),
    ):
        ordered = order(classes)
        if ordered is not None:
            return ClassOrder(tuple(ordered), f"in order ({how})", found)
    return ClassOrder(
        tuple(sorted(classes)),
        "alphabetical: no order found; give --classes a,b,c if the classes have one",
    )


def _given(classes: list[str], given: str) -> tuple[str, ...]:
    order = [c.strip() for c in given.split(",")]
    repeated = sorted({c for c in order if order.count(c) > 1})
    missing = [c for c in classes if c not in order]
    blank = "" in order
    if repeated or missing or blank:
        said = {"repeats {}": repeated, "leaves out {}": missing}
        problems = [text.format(", ".join(map(repr, v))) for text, v in said.items() if v]
        problems += ["names an empty class"] if blank else []
        raise StepError(
            f"--classes {given!r} {'; '.join(problems)}: give each of the sample's classes "
            f"once ({', '.join(sorted(classes))}), and any class later days may bring"
        )
    return tuple(order)


def _by_number(classes: list[str]) -> list[str] | None:
    try:
        return sorted(classes, key=float)
    except ValueError:
        return None


def _words(value: str) -> str:
    return " ".join(value.lower().replace("_", " ").replace("-", " ").split())


def _by_scale(classes: list[str]) -> list[str] | None:
    words = {c: _words(c) for c in classes}
    if len(set(words.values())) < len(classes):
        return None
    for scale in SCALES:
        normal = [_words(w) for w in scale]
        if all(w in normal for w in words.values()):
            return sorted(classes, key=lambda c: normal.index(words[c]))
    return None


def _by_leading_number(classes: list[str]) -> list[str] | None:
    """Bands such as ``<18``, ``18-24``, ``65+``, ``Category 3``: ordered by their first number,
    a band below a number before the band from it and one above after; ``None`` unless every
    class holds a number and no two share their place."""
    places: dict[str, tuple[float, int]] = {}
    for value in classes:
        number = _NUMBER.search(value)
        if number is None:
            return None
        side = -1 if _BELOW.search(value) else 1 if _ABOVE.search(value) else 0
        places[value] = (float(number.group().replace(",", ".")), side)
    if len(set(places.values())) < len(classes):
        return None
    return sorted(classes, key=lambda c: places[c])
