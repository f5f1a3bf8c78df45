"""Data quality: Great Expectations suites, chunked validation, custom expectations, drift."""
