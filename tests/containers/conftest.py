"""The container tier: the images built from this checkout and run on a real Docker engine."""

from __future__ import annotations

import pytest

from tests.containers.engine import build_images, require_engine


@pytest.fixture(scope="session")
def images() -> None:
    """The profile's images, built (or brought up to date) once per session."""
    require_engine()
    build_images()
