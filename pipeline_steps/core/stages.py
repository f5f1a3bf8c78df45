"""The stages a model version went through (``staging``, ``champion``, ``retired``,
``replaced``), as records on the version: read here, written by
:mod:`pipeline_steps.evaluation.release`, read by the champion's history and
:func:`pipeline_steps.core.tracking.champion_as_of`."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

log = logging.getLogger(__name__)

Stage = Literal["staging", "champion", "retired", "replaced"]
STAGE_TAG = "trainyard.stage"
"""The version's stage now: ``staging``, ``champion``, ``retired`` or ``replaced``."""
STAGE_RECORD_PREFIX = "trainyard.stages."
"""``trainyard.stages.<n>``: the n-th stage the version entered, as JSON (``stage``, ``at``,
``by``, ``day``, ``reason``)."""


def stage_records(tags: dict[str, str]) -> list[dict[str, Any]]:
    """The stages a version entered, oldest first; an unreadable record is left out."""
    found = []
    for key, value in tags.items():
        if not key.startswith(STAGE_RECORD_PREFIX):
            continue
        try:
            number, record = int(key.removeprefix(STAGE_RECORD_PREFIX)), json.loads(value)
        except (ValueError, json.JSONDecodeError):
            log.warning("tag %s is not a stage record; left out", key)
            continue
        if isinstance(record, dict):
            found.append((number, record))
    return [record for _, record in sorted(found, key=lambda pair: pair[0])]
