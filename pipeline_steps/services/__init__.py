"""The production profile as real processes on one machine (``trainyard services up|down``).

Imports the foundation only (settings); the commands import it.
"""
