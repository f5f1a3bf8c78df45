"""Feast definitions of the flight-delay example for the feast CLI, built from
``flight_delay.domain`` (``FEATURE_VIEWS``): nothing to edit here.

The features step builds the same objects from the domain, writes the offline sources under
``$TRAINYARD_FEAST_DIR/sources`` from the validated partitions and applies them; it does not
read this file. By hand, the example's package on PYTHONPATH:
``TRAINYARD_FEAST_DIR=/tmp/flight_delay-feast feast -c examples/flight_delay/feature_repo apply``.
"""

from __future__ import annotations

from flight_delay.domain import DOMAIN

from pipeline_steps.core.domain import declared_definitions

# Each entity, feature view and the feature service under a name of its own for the feast CLI,
# which looks for Feast objects among a module's names.
globals().update({f"{type(o).__name__}_{o.name}": o for o in declared_definitions(DOMAIN) or []})
