"""What a user runs: ``trainyard`` (one step of a run), ``replay``, ``report``, ``predict`` and
``rollback``.

The top of the package: commands may import anything below them; nothing in ``pipeline_steps``
imports a command.
"""
