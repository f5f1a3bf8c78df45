"""The shipped example domain (:mod:`pipeline_steps.domain.flights`) and the generic sources any
domain can read from (:mod:`pipeline_steps.domain.sources`).

The contract a domain implements lives in :mod:`pipeline_steps.core.domain`. Modules here import
only :mod:`pipeline_steps.core`; the steps reach a domain through ``domain.module`` in the
settings, never by importing it.
"""
