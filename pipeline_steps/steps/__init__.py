"""The pipeline steps: one module (or package) per step, pure functions of a run context."""
