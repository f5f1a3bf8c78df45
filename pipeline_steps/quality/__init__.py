"""Data quality: Great Expectations suites, chunked validation, custom expectations, the drift
monitor's calibrated statistics."""
