"""Bounds that allow for the chance variation of a day's size: missing shares and drafted value
sets (``validation.share_noise``), row counts (``validation.row_count_noise``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scipy.stats import binom

from pipeline_steps.core.settings import ValidationSettings
from pipeline_steps.quality.suites import chance_share, known_min
from pipeline_steps.quality.trailing import trailing_bounds

NOISY = replace(ValidationSettings(), share_noise=3.0, row_count_noise=3.0)


def test_a_share_beyond_chance_is_one_a_binomial_count_reaches_on_few_days() -> None:
    allowed = chance_share(0.1, 6, 3.0)
    # a day of 6 rows at a 10 % rate misses 3 values on 1.6 % of days, 4 on 0.13 %
    assert allowed == pytest.approx(3 / 6)
    assert binom.sf(3, 6, 0.1) < 0.0014 < binom.sf(2, 6, 0.1)
    assert chance_share(0.1, 10_000, 3.0) == pytest.approx(0.109, abs=0.001)
    assert chance_share(0.1, 6, 0.0) == 0.1  # without noise: the rate alone


def test_a_small_day_may_miss_what_a_large_day_may_not() -> None:
    trailing = [(6, {"speed": 0.15})] * 14
    small = trailing_bounds(trailing, NOISY, rows=2)["speed_present_min"]
    large = trailing_bounds(trailing, NOISY, rows=600)["speed_present_min"]
    assert small == 0.0  # both values of a 2-row day missing happens by chance
    assert large == pytest.approx(1 - (3 * 0.15 + 0.2), abs=1e-6)  # the fixed bound holds
    # a column all missing is still refused on a day of a dozen rows
    assert trailing_bounds(trailing, NOISY, rows=12)["speed_present_min"] > 0
    # without share_noise the day's size changes nothing (the shipped flights suites)
    plain = ValidationSettings()
    assert trailing_bounds(trailing, plain, rows=2) == trailing_bounds(trailing, plain, rows=600)


def test_a_column_never_missing_in_its_history_may_still_miss_rarely() -> None:
    trailing = [(10, {"state": 0.0})] * 10
    one_row = trailing_bounds(trailing, NOISY, rows=1)["state_present_min"]
    assert one_row == 0.0  # half a missing value in 100 trailing rows: a 1-row day may miss it
    assert trailing_bounds(trailing, NOISY, rows=50)["state_present_min"] >= 0.7


def test_a_column_never_missing_is_refused_all_missing_on_a_day_of_two_rows() -> None:
    # bird strikes: an operator on every one of 84 trailing strikes, then a day of 2 without
    trailing = [(6, {"operator": 0.0})] * 14
    two_rows = trailing_bounds(trailing, NOISY, rows=2)["operator_present_min"]
    assert 0 < two_rows <= 0.5  # one of two missing is chance, both are not
    rate = NOISY.null_share_factor * 0.5 / 84
    assert binom.sf(1, 2, rate) < 0.00135 < binom.sf(0, 2, rate)


def test_a_value_set_lets_a_small_day_hold_a_rare_value() -> None:
    by_size = {"rate": 0.05, "allowed": 0.3, "present": 1.0}
    assert known_min(by_size, None, 3.0) == pytest.approx(0.7)
    assert known_min(by_size, 1, 3.0) == 0.0  # one row, one rare value: chance
    assert known_min(by_size, 6, 3.0) == pytest.approx(0.5)  # 6 of 6 unseen: refused
    assert known_min(by_size, 500, 3.0) == pytest.approx(0.7)


def test_row_counts_of_a_sparse_domain_have_a_lower_bound_and_room_for_chance() -> None:
    trailing = [(5, {})] * 14
    bounds = trailing_bounds(trailing, replace(NOISY, row_count_low=0.2), rows=5)
    assert bounds["row_count_min"] == 0  # 5 a day: a day of 0..1 is chance
    assert bounds["row_count_max"] == 17  # 2 x 5 + 3 x sqrt(5)
    busy = trailing_bounds([(900, {})] * 14, replace(NOISY, row_count_low=0.2), rows=900)
    assert busy["row_count_min"] == 180  # 0.2 x 900: beyond chance (900 - 3 x 30)


def test_a_bursty_source_widens_its_row_count_bounds_by_its_own_spread() -> None:
    # ratings arrive in sessions: 13 quiet days and one of a user rating a catalogue
    trailing = [(10, {})] * 13 + [(200, {})]
    bounds = trailing_bounds(trailing, NOISY, rows=150)
    mean = (13 * 10 + 200) / 14
    assert bounds["row_count_max"] > mean * 2 + 3 * mean**0.5  # beyond the Poisson allowance
    assert bounds["row_count_max"] >= 150  # another session that size is ordinary


def test_a_sparse_source_is_judged_against_as_many_days_with_rows_as_a_daily_one() -> None:
    from datetime import date, timedelta

    from pipeline_steps.quality.suite_draft import row_counts, trailing_window

    first = date(2024, 1, 1)
    daily = {first + timedelta(n): 5 for n in range(28)}
    assert trailing_window(daily) == (14, (28, 28))
    every_third = {first + timedelta(3 * n): 5 for n in range(10)}  # 10 days with rows of 28
    assert trailing_window(every_third) == (40, (10, 28))  # 14 / (10 / 28)
    assert row_counts(every_third).trailing_days == 40
    rare = {first: 5, first + timedelta(200): 5}
    assert trailing_window(rare)[0] == 90  # at most 90 days


def test_a_steady_source_refuses_a_day_of_a_few_rows_despite_its_weekly_rhythm() -> None:
    # Minneapolis' stops: about 140 a day, fewer at weekends (a spread of about 29)
    trailing = [(n, {}) for n in (150, 160, 145, 170, 120, 95, 100) * 2]
    bounds = trailing_bounds(trailing, replace(NOISY, row_count_low=0.18), rows=5)
    assert 5 < bounds["row_count_min"] <= 0.18 * 137
    # a source of sessions keeps no lower bound: days of 1 rating are ordinary
    sessions = [(n, {}) for n in (1, 3, 40, 2, 1, 177, 5, 2, 12, 1)]
    assert trailing_bounds(sessions, NOISY, rows=1)["row_count_min"] == 0


def test_a_day_with_exactly_the_allowed_missing_count_passes() -> None:
    """A day of 9 rows that may miss 2 values (a share of 2/9): the least share present is
    rounded down (0.777777), never up past 7/9 (0.777778 refused such a day of Minneapolis'
    use-of-force rows, 2 of 9 without a race)."""
    plain = ValidationSettings()
    share = (2 / 9 - plain.null_share_floor) / plain.null_share_factor
    bound = trailing_bounds([(9, {"race": share})] * 14, plain, rows=9)["race_present_min"]
    assert bound == 0.777777 and bound <= 7 / 9
    assert known_min({"allowed": 2 / 9, "rate": 0.0}, None, 0.0) <= 7 / 9
