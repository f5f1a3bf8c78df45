"""The engines that run the data steps: ``local`` (DuckDB and Arrow, the embedded default) and
``spark`` (:mod:`pipeline_steps.engines.spark`)."""
