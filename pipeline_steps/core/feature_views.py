"""A domain's Feast side, declared in the domain module and built into Feast objects here.

A domain lists its feature views as :class:`FeatureViewSpec` values (``Domain.feature_views``):
each view's name, the entities it is keyed by, how long a value holds, the offline source it
reads and its fields with their types. The declaration is plain data, derived in the domain
module from its column roles (a drafted domain: its numeric columns and flags, less
``LEFT_OUT``), so a column is named in one place. From it:

- :func:`feast_definitions` builds the Feast ``Entity``, ``FeatureView`` and ``FeatureService``
  objects the features step applies to its store (no definitions file to keep in step; the
  ``feast`` CLI reads the same objects through a repository file calling it);
- :func:`source_columns` gives the columns an offline source is written with: the view's join
  keys, its event time and exactly its fields;
- :func:`check_feature_views` refuses a view left without a field, or a domain left without any
  feature, with one ``StepError`` naming the domain module and what to change.

Feast is imported only when objects are built (:mod:`pipeline_steps.core.feast_import`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feast_import import import_feast
from pipeline_steps.core.feast_sources import offline_source

FieldType = Literal["float64", "int64", "string"]
"""A field's Feast type: ``Float64``, ``Int64`` or ``String`` (strings are categorical
features, the others numeric)."""
EVENT_TIMESTAMP = "event_timestamp"
"""The event-time column of every declared offline source."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureField:
    """One feature of a view: a column of its offline source."""

    name: str
    dtype: FieldType = "float64"
    description: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class EntitySpec:
    """What a view's rows are keyed by: a column of the entity rows and of the source."""

    name: str
    """The entity's name and join key."""
    value_type: Literal["int64", "string"] = "string"
    description: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureViewSpec:
    """A Feast feature view as a domain declares it."""

    name: str
    entities: tuple[EntitySpec, ...]
    source: str
    """The offline source: ``$TRAINYARD_FEAST_DIR/sources/<source>.parquet``, the name under
    which ``Domain.feature_sources`` returns its rows."""
    fields: tuple[FeatureField, ...]
    ttl: timedelta = timedelta(0)
    """How long a value holds for an entity row; 0: until a newer row of the same key."""
    description: str = ""
    source_name: str = ""
    """The Feast data source's name; empty: ``<source>_source``."""

    @property
    def join_keys(self) -> list[str]:
        return [entity.name for entity in self.entities]

    @property
    def data_source_name(self) -> str:
        return self.source_name or f"{self.source}_source"


def numeric_fields(
    columns: list[str] | tuple[str, ...],
    integer: list[str] | tuple[str, ...] = (),
    left_out: list[str] | tuple[str, ...] = (),
) -> tuple[FeatureField, ...]:
    """Fields of the ``columns`` not ``left_out``, in order: ``int64`` for those in ``integer``,
    else ``float64`` (a drafted domain's view: its numeric columns and flags)."""
    leave = set(left_out)
    return tuple(
        FeatureField(name=c, dtype="int64" if c in integer else "float64")
        for c in columns
        if c not in leave
    )


def check_feature_views(
    where: str, views: tuple[FeatureViewSpec, ...], row_features: list[str]
) -> None:
    """``StepError`` naming ``where`` (the domain module) when a declared view has no field, or
    when the domain has no feature at all (no row feature and no view field)."""
    for view in views:
        if not view.fields:
            raise StepError(
                f"{where}: the Feast feature view {view.name!r} has no field left (every column "
                "it was built from is in LEFT_OUT or no column of its list): keep at least one "
                "of its columns (a drafted domain: one of NUMERIC or FLAGS not in LEFT_OUT)"
            )
    if not row_features and not any(view.fields for view in views):
        raise StepError(
            f"{where}: the domain has no feature left (no row feature, no Feast field): keep "
            "at least one column out of LEFT_OUT"
        )


def source_columns(view: FeatureViewSpec) -> list[str]:
    """The columns the view's offline source is written with: join keys, event time, fields."""
    return [*view.join_keys, EVENT_TIMESTAMP, *(f.name for f in view.fields)]


def sources_folder() -> Path:
    """Where the features step writes offline sources: ``$TRAINYARD_FEAST_DIR/sources``
    (``./data/sources`` outside a step)."""
    return Path(os.environ.get("TRAINYARD_FEAST_DIR", "data")) / "sources"


def feast_definitions(
    service: str, views: tuple[FeatureViewSpec, ...], description: str = ""
) -> list[Any]:
    """The Feast objects of the declared ``views``: each distinct entity, each view over its
    offline source (see :func:`pipeline_steps.core.feast_sources.offline_source`), and the
    feature service ``service`` over all views, in that order."""
    import_feast()
    from feast import Entity, FeatureService, FeatureView, Field, ValueType
    from feast.types import Float64, Int64, String

    types = {"float64": Float64, "int64": Int64, "string": String}
    values = {"int64": ValueType.INT64, "string": ValueType.STRING}
    entities: dict[str, Any] = {}
    for view in views:
        for entity in view.entities:
            entities.setdefault(
                entity.name,
                Entity(
                    name=entity.name,
                    join_keys=[entity.name],
                    value_type=values[entity.value_type],
                    description=entity.description,
                ),
            )
    folder = sources_folder()
    built: list[Any] = [
        FeatureView(
            name=view.name,
            entities=[entities[e.name] for e in view.entities],
            ttl=view.ttl,
            schema=[
                Field(name=f.name, dtype=types[f.dtype], description=f.description)
                for f in view.fields
            ],
            source=offline_source(view.data_source_name, str(folder / f"{view.source}.parquet")),
            description=view.description,
        )
        for view in views
    ]
    return [
        *entities.values(),
        *built,
        FeatureService(name=service, features=built, description=description),
    ]
