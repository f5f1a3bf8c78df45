"""The foundation: settings, step manifests, the lake, the run context, tracking, provenance and
usage metering, plus the domain contract every example implements.

Every other package may import from here; modules in ``core`` import only each other and
third-party libraries, never a step, a library package, Airflow or a command.
"""
