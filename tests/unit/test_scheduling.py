"""The units pytest-xdist hands out: every module sharing a costly thing with others is in one
unit with them, and the longest units go first."""

import re

from tests.conftest import ROOT
from tests.scheduling import UNITS, unit_of

SHARED_MARKERS = re.compile(r"pytest\.mark\.(containers|deployment|spark)\b")


def test_every_module_marked_for_a_shared_unit_is_in_one() -> None:
    marked = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if SHARED_MARKERS.search(path.read_text()) and path.parent.name not in ("unit",)
    }
    assert marked, "no module carries a shared unit's marker"
    alone = sorted(module for module in marked if unit_of(f"{module}::test") == module)
    assert not alone, (
        f"marked containers, deployment or spark, but not in scheduling.UNITS: {alone}"
    )


def test_a_module_is_its_own_unit_unless_it_shares_one() -> None:
    assert unit_of("tests/unit/test_lake.py::test_x[a-b]") == "tests/unit/test_lake.py"
    assert unit_of("tests/containers/test_compose.py::test_y") == "deployments"
    assert unit_of("tests/integration/test_production_profile.py::test_z") == "deployments"
    assert unit_of("tests/data/test_spark_validation.py::test_w") == unit_of(
        "tests/engines/test_spark_engine.py::test_v"
    )
    assert set(UNITS.values()) == {"deployments", "spark", "spark-cluster"}
