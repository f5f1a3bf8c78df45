"""Upstream schema changes: a partition's columns against the dataset's schema and against the
previous raw version, each change judged by the ``validation`` settings.

Against the schema (the domain's column types, which the suite's column set mirrors): an added
column follows ``validation.added_columns`` (``warn_and_drop`` leaves it out of the suite run and
of ``validated/``), a removed or renamed one stops the run, a widened type follows
``validation.widened_types``; any other type change is left to the suite's type expectations.
Against the previous version, changes are recorded only: they say what moved upstream since the
last ingest. A reordered column set is harmless (suites and features select columns by name) and
is recorded as ``kept``.
"""

from __future__ import annotations

import pyarrow as pa

from pipeline_steps.core.manifests import SchemaAction, SchemaChange
from pipeline_steps.core.settings import ValidationSettings


def widens(before: pa.DataType, after: pa.DataType) -> bool:
    """Whether ``after`` holds every value of ``before``: a wider integer or float, an integer
    become a float, a string or binary become its large form."""
    if pa.types.is_integer(before) and pa.types.is_integer(after):
        same_sign = pa.types.is_signed_integer(before) == pa.types.is_signed_integer(after)
        return after.bit_width > before.bit_width and (
            same_sign or pa.types.is_signed_integer(after)
        )
    if pa.types.is_integer(before) and pa.types.is_floating(after):
        return True
    if pa.types.is_floating(before) and pa.types.is_floating(after):
        return after.bit_width > before.bit_width
    return (pa.types.is_string(before) and pa.types.is_large_string(after)) or (
        pa.types.is_binary(before) and pa.types.is_large_binary(after)
    )


def compare(
    partition: pa.Schema,
    reference: pa.Schema,
    against: str,
    actions: dict[str, SchemaAction] | None = None,
) -> list[SchemaChange]:
    """The columns of ``partition`` that differ from ``reference``; ``actions`` maps a change
    kind to what validation does about it (default ``kept``)."""
    actions = actions or {}
    names, known = partition.names, reference.names

    def change(column: str, kind: str, before: str | None, after: str | None) -> SchemaChange:
        return SchemaChange(
            column=column,
            change=kind,  # type: ignore[arg-type]
            against=against,  # type: ignore[arg-type]
            before=before,
            after=after,
            action=actions.get(kind, "kept"),
        )

    changes = [
        change(c, "added", None, str(partition.field(c).type)) for c in names if c not in known
    ]
    changes += [
        change(c, "removed", str(reference.field(c).type), None) for c in known if c not in names
    ]
    for column in (c for c in names if c in known):
        before, after = reference.field(column).type, partition.field(column).type
        if before != after:
            kind = "widened" if widens(before, after) else "retyped"
            changes.append(change(column, kind, str(before), str(after)))
    shared = [c for c in names if c in known]
    expected = [c for c in known if c in names]
    for position, (column, was) in enumerate(zip(shared, expected, strict=True)):
        if column != was:
            changes.append(change(column, "reordered", str(expected.index(column)), str(position)))
    return changes


def judge(
    dataset: str,
    partition: pa.Schema,
    schema: pa.Schema | None,
    previous: pa.Schema | None,
    settings: ValidationSettings,
) -> list[SchemaChange]:
    """Changes against the dataset's schema (judged by the settings) and against the previous
    raw version (recorded). Without a declared schema the previous version is judged instead."""
    actions: dict[str, SchemaAction] = {
        "added": "dropped"
        if settings.policy(dataset, "added_columns") == "warn_and_drop"
        else "failed",
        "removed": "failed",
        "widened": "warned" if settings.policy(dataset, "widened_types") == "warn" else "failed",
    }
    if schema is None:
        return compare(partition, previous, "previous", actions) if previous is not None else []
    judged = compare(partition, schema, "schema", actions)
    return judged + (compare(partition, previous, "previous") if previous is not None else [])
