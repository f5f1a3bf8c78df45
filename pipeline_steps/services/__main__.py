"""``python -m pipeline_steps.services up|down|status`` (also ``trainyard services ...``)."""

from __future__ import annotations

import sys

from pipeline_steps.services.cli import main

sys.exit(main())
