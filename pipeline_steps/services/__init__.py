"""The production profile as real processes on one machine (``trainyard services up|down``)."""
