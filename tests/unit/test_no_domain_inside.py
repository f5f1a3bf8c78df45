"""The platform holds no domain: the shipped examples live under examples/, each a package of
its own, and nothing in pipeline_steps/ names one (a domain's names come from its ``Domain``
and its settings file)."""

from __future__ import annotations

import re

import pytest

from pipeline_steps.core.domain import load_domain
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import load_settings
from tests.conftest import ROOT

PACKAGE = ROOT / "pipeline_steps"
EXAMPLE_WORDS = re.compile(r"flight", re.IGNORECASE)


def test_no_module_of_the_package_names_the_flights_example() -> None:
    named = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if EXAMPLE_WORDS.search(line)
    ]
    assert not named, "the flights example is named inside pipeline_steps:\n" + "\n".join(named)


def test_the_defaults_name_no_domain_and_say_which_setting_to_set() -> None:
    settings = load_settings(environ={})
    assert settings.domain.module == ""
    with pytest.raises(StepError, match=r"domain\.module is not set.*settings file"):
        load_domain(settings.domain.module)


def test_the_flights_example_is_a_domain_of_its_own_settings_file() -> None:
    settings = load_settings(ROOT / "examples" / "flight_delay" / "settings.yaml", environ={})
    domain = load_domain(settings.domain.module)
    assert (settings.domain.name, domain.labelled_dataset) == ("flight_delay", "flights")
    for path in (
        settings.validation.expectations_dir,
        settings.features.feature_repo,
        settings.tuning.search_space,
    ):
        assert (ROOT / path).exists(), path
