"""What any domain builds on: the generic sources it can read from
(:mod:`pipeline_steps.domain.sources`), event times and physical types. The domains themselves
live outside the package (the shipped examples under ``examples/``).

The contract a domain implements lives in :mod:`pipeline_steps.core.domain`. Modules here import
only :mod:`pipeline_steps.core`; the steps reach a domain through ``domain.module`` in the
settings, never by importing it.
"""
