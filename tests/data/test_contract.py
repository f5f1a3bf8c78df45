"""docs/data-contract.md is the suites' own words: regenerate it when a suite changes."""

from pathlib import Path

from pipeline_steps.domain.flights import SCHEMAS
from pipeline_steps.quality.contract import contract

DOC = Path(__file__).parents[2] / "docs" / "data-contract.md"


def test_committed_contract_matches_the_suites() -> None:
    assert DOC.read_text() == contract(), (
        "run: python -m pipeline_steps.quality.contract > docs/data-contract.md"
    )


def test_every_column_has_a_rule_beyond_its_type() -> None:
    text = contract()
    for dataset, schema in SCHEMAS.items():
        section = text.split(f"## {dataset}\n", 1)[1].split("\n## ", 1)[0]
        for name in schema.names:
            rules = [line for line in section.splitlines() if line.startswith(f"| `{name}` |")]
            kinds = {line.split("`")[3].split("(")[0] for line in rules}
            assert kinds - {"column_values_to_be_in_type_list"}, f"{dataset}.{name} has no rule"
