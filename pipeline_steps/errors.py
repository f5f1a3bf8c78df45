"""The errors a user sees: each names the file, setting, partition or step that is wrong."""

from __future__ import annotations


class StepError(RuntimeError):
    """A step cannot go on; the message says what is wrong and where, for the task log."""
