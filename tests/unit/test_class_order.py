"""A multiclass label's classes keep their order: numbers, known scales, bands, or as given."""

from __future__ import annotations

import pytest

from pipeline_steps.core.errors import StepError
from pipeline_steps.quality.class_order import class_order


@pytest.mark.parametrize(
    ("values", "ordered", "why"),
    [
        (["10", "2", "1.5"], ("1.5", "2", "10"), "numbers"),
        (["high", "low", "mid"], ("low", "mid", "high"), "scale"),
        (["High", "Medium", "Low", "Very High"], ("Low", "Medium", "High", "Very High"), "scale"),
        (["Overcast", "No Cloud", "Some Cloud"], ("No Cloud", "Some Cloud", "Overcast"), "scale"),
        (["severe", "mild", "moderate"], ("mild", "moderate", "severe"), "scale"),
        (["XL", "s", "M"], ("s", "M", "XL"), "scale"),
        (
            ["strongly_agree", "neutral", "Disagree"],
            ("Disagree", "neutral", "strongly_agree"),
            "scale",
        ),
        (["25-34", "65+", "<18", "18-24"], ("<18", "18-24", "25-34", "65+"), "bands"),
        (
            ["Category 10", "Category 2", "Category 1"],
            ("Category 1", "Category 2", "Category 10"),
            "bands",
        ),
        (["under 5", "5 to 10", "over 10"], ("under 5", "5 to 10", "over 10"), "bands"),
    ],
)
def test_ordered_classes_keep_their_order(values: list[str], ordered: tuple, why: str) -> None:
    order = class_order(values)
    assert order.classes == ordered
    assert order.reason.startswith("in order") and why.rstrip("s") in order.reason


@pytest.mark.parametrize(
    "values",
    [
        ["Approach", "Climb", "Taxi"],  # phases of a flight: no known scale
        ["low", "medium", "blue"],  # one word outside every scale
        ["A1", "B1", "C2"],  # two classes share their first number
        ["low", "Low", "mid"],  # two spellings of one word
    ],
)
def test_classes_without_an_order_are_alphabetical_and_say_so(values: list[str]) -> None:
    order = class_order(values)
    assert order.classes == tuple(sorted(values))
    assert order.reason.startswith("alphabetical") and "--classes" in order.reason


def test_the_given_order_wins() -> None:
    order = class_order(["a", "b", "c"], given="c, a,b")
    assert order.classes == ("c", "a", "b")
    assert order.reason == "in the order given by --classes"


def test_a_given_order_may_declare_classes_the_sample_lacks() -> None:
    order = class_order(["mild", "severe"], given="mild,moderate,severe")
    assert order.classes == ("mild", "moderate", "severe")
    assert "moderate: not in the sample, declared for later days" in order.reason


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("a,b", "leaves out 'c'"),
        ("a,b,b,c", "repeats 'b'"),
        ("a,b,,c", "names an empty class"),
    ],
)
def test_a_given_order_must_name_every_class_once(given: str, says: str) -> None:
    with pytest.raises(StepError, match="--classes") as caught:
        class_order(["a", "b", "c"], given=given)
    assert says in str(caught.value) and "(a, b, c)" in str(caught.value)
