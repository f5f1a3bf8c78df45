"""The engines that run the data steps, one module each, chosen once per step from
``engine.name`` (:func:`pipeline_steps.engines.base.open_engine`): ``local``
(:mod:`pipeline_steps.engines.local`, DuckDB and Arrow in the step's own process, the embedded
default) and ``spark`` (:mod:`pipeline_steps.engines.spark`, the step as a Spark driver).
:mod:`pipeline_steps.engines.base` says what an engine does.

Imports ``core`` and ``quality``; the steps import it. pyspark is an optional extra, imported
only by the Spark engine's modules.
"""
