"""docs/data-contract.md is the suites' own words: regenerate it when a suite changes."""

from pathlib import Path

import pytest
from flight_delay.domain import SCHEMAS

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import load_settings
from pipeline_steps.quality.contract import contract
from tests.conftest import FLIGHTS_CONFIG, ROOT

DOC = Path(__file__).parents[2] / "docs" / "data-contract.md"
CONFIG = str(FLIGHTS_CONFIG.relative_to(ROOT))


def test_committed_contract_matches_the_suites() -> None:
    assert DOC.read_text() == contract(load_settings(CONFIG), CONFIG), (
        f"run: python -m pipeline_steps.quality.contract --config {CONFIG} > docs/data-contract.md"
    )


def test_every_column_has_a_rule_beyond_its_type() -> None:
    text = contract(load_settings(CONFIG))
    for dataset, schema in SCHEMAS.items():
        section = text.split(f"## {dataset}\n", 1)[1].split("\n## ", 1)[0]
        for name in schema.names:
            rules = [line for line in section.splitlines() if line.startswith(f"| `{name}` |")]
            kinds = {line.split("`")[3].split("(")[0] for line in rules}
            assert kinds - {"column_values_to_be_in_type_list"}, f"{dataset}.{name} has no rule"


def test_the_contract_is_of_the_configured_domain() -> None:
    """Another domain's settings give its own datasets' tables, from its own suites."""
    text = contract(load_settings(str(ROOT / "examples" / "hotel_rates" / "settings.yaml")))
    assert "## bookings\n" in text and "## flights\n" not in text


def test_a_dataset_without_a_suite_is_named(tmp_path) -> None:
    settings = load_settings(CONFIG, overrides=[f"validation.expectations_dir={tmp_path}"])
    with pytest.raises(StepError, match=r"flights\.json: no suite of dataset 'flights'"):
        contract(settings)
