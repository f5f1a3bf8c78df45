"""The engines that run the data steps beside the embedded default (DuckDB and Arrow in
``core``): ``spark`` (:mod:`pipeline_steps.engines.spark`, the session;
:mod:`pipeline_steps.engines.spark_join`, the point-in-time join through Feast's Spark store).

Imports ``core`` only; the steps and the quality checks import it, lazily, when
``engine.name`` is ``spark``: pyspark is an optional extra."""
