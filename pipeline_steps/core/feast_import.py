"""Feast, imported the way ``python -O`` imports it.

Feast decorates its classes with typeguard's ``@typechecked``, which at import time reads each
decorated function's source, rewrites it with run-time type checks and compiles it again: 2.7 s
of CPU of the 5.5 s ``import feast`` takes here, paid again by every step process that builds
features or serves them. Those checks are typeguard's development aid (it turns them off itself
under ``-O``); trainyard's calls into Feast are typed and tested. :func:`import_feast` imports
Feast once per process with ``typechecked`` standing aside, then puts it back, so any other
package's use of typeguard is left as it was.
"""

from __future__ import annotations

import sys
from typing import Any


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typechecked`` as ``python -O`` has it: the target unchanged (also as a factory)."""
    if target is None:
        return _unchecked
    return target


def import_feast() -> None:
    """Import ``feast`` and the modules it loads, without typeguard's instrumentation; nothing
    when the process imported Feast already."""
    if "feast" in sys.modules:
        return
    try:
        import typeguard
    except ImportError:  # a Feast without typeguard: nothing to stand aside
        import feast

        return
    checked = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        import feast  # noqa: F401
    finally:
        typeguard.typechecked = checked
