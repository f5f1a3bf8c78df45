"""The one declaration of a setting: its doc, the values it may take, whether it changes what a
run computes, and its place on a trigger form.

A settings section declares each field once::

    window_days: int = setting(
        30,
        doc="Trailing window of validated days, holdout day included.",
        minimum=2,
        maximum=3660,
        form=FormEntry("Window (days)", "Data"),
    )

and everything else reads that declaration: the section's checks (:func:`check_declared`,
called from its ``__post_init__``), the trigger forms' Params
(``pipeline_steps.orchestration.params``), the train step's runtime set
(:func:`runtime_settings`) and the tables of docs/configuration.md
(``python -m pipeline_steps.core.settings_docs``). The declaration rides in the field's
``dataclasses.field(metadata=...)``, so nothing parses source. A field of a ``Literal`` type
takes its choices from the type.

Only the standard library is imported: DAG files parse through the settings.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

FormName = Literal["training", "tuning"]
METADATA_KEY = "trainyard.setting"


class DeclarationError(ValueError):
    """A value breaks its setting's declared bounds or choices; the message names the key.

    The settings module re-raises it as its ``SettingsError``."""


@dataclass(frozen=True, slots=True)
class FormEntry:
    """A setting's Param on a DAG's trigger form."""

    label: str
    """The Param's title, e.g. ``Window (days)``."""
    group: str
    """The form's section the Param appears in, e.g. ``Data``."""
    param: str = ""
    """The Param's name (the run conf's key); empty: the setting's own name."""
    form: FormName = "training"
    """The DAG whose form shows it: ``training`` or ``tuning``."""


@dataclass(frozen=True, slots=True)
class Setting:
    """What a settings field declares besides its type and default."""

    doc: str
    """What the setting means; the docs table and the form's description show it."""
    minimum: float | None = None
    """Smallest value allowed (of each item, for a tuple of numbers)."""
    maximum: float | None = None
    """Largest value allowed."""
    above: float | None = None
    """The value must be greater than this (an open lower bound)."""
    below: float | None = None
    """The value must be smaller than this (an open upper bound)."""
    choices: tuple[Any, ...] = ()
    """The only values allowed (of each item, for a tuple); a ``Literal`` type declares them
    itself."""
    max_length: int | None = None
    """Longest text allowed."""
    runtime: bool = False
    """Whether the setting changes only how a run goes (processes, logging, timeouts), never
    what it computes: a finished training is valid for any value of it."""
    forms: tuple[FormEntry, ...] = ()
    """The trigger forms the setting appears on."""
    path: bool = False
    """A file or folder: a relative path written in a settings file is read from that file's
    folder (so a domain's file works from any working directory); one from the environment or
    ``--set`` from the working directory."""

    def bounds_text(self) -> str:
        """The bounds in words (``at least 2 and at most 3660``), empty when there are none."""
        words = []
        if self.minimum is not None:
            words.append(f"at least {self.minimum:g}")
        if self.above is not None:
            words.append(f"above {self.above:g}")
        if self.maximum is not None:
            words.append(f"at most {self.maximum:g}")
        if self.below is not None:
            words.append(f"below {self.below:g}")
        return " and ".join(words)

    def check(self, value: Any, key: str) -> None:
        """``DeclarationError`` naming ``key`` when ``value`` breaks the bounds or choices."""
        items = value if isinstance(value, tuple) else (value,)
        if self.choices:
            strangers = [v for v in items if v not in self.choices]
            if strangers:
                known = ", ".join(repr(c) for c in self.choices)
                got = value if not isinstance(value, tuple) else strangers
                raise DeclarationError(f"{key} must be one of {known}, got {got!r}")
        if self.max_length is not None and isinstance(value, str) and len(value) > self.max_length:
            raise DeclarationError(
                f"{key} must be at most {self.max_length} characters, got {len(value)}"
            )
        if not self.bounds_text():
            return
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int | float):
                continue
            if isinstance(item, float) and not math.isfinite(item):
                # a rate, share, margin or duration is a finite number
                raise DeclarationError(f"{key} must be a finite number, got {value!r}")
            if not self._within(item):
                raise DeclarationError(f"{key} must {self._rule()}, got {value!r}")

    def _rule(self) -> str:
        if self.minimum == 0 and self.bounds_text() == "at least 0":
            return "not be negative"
        return f"be {self.bounds_text()}"

    def _within(self, item: float) -> bool:
        return (
            (self.minimum is None or item >= self.minimum)
            and (self.above is None or item > self.above)
            and (self.maximum is None or item <= self.maximum)
            and (self.below is None or item < self.below)
        )


def setting(
    default: Any = dataclasses.MISSING,
    *,
    doc: str,
    default_factory: Any = dataclasses.MISSING,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    choices: tuple[Any, ...] = (),
    max_length: int | None = None,
    runtime: bool = False,
    form: FormEntry | tuple[FormEntry, ...] = (),
    path: bool = False,
) -> Any:
    """A settings field with its declaration (:class:`Setting`) as metadata; ``doc`` is
    required, so no setting goes undocumented."""
    declaration = Setting(
        doc=" ".join(doc.split()),
        minimum=minimum,
        maximum=maximum,
        above=above,
        below=below,
        choices=tuple(choices),
        max_length=max_length,
        runtime=runtime,
        forms=form if isinstance(form, tuple) else (form,),
        path=path,
    )
    metadata = {METADATA_KEY: declaration}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True)
class Declared:
    """One declared field of a section, its choices completed from a ``Literal`` type."""

    name: str
    type: Any
    default: Any
    spec: Setting


_DECLARED: dict[type, tuple[Declared, ...]] = {}


def declared(cls: type) -> tuple[Declared, ...]:
    """The declared fields of the settings section ``cls``, in order (cached per class)."""
    if cls not in _DECLARED:
        hints = typing.get_type_hints(cls)
        found = []
        for f in dataclasses.fields(cls):
            spec = f.metadata.get(METADATA_KEY)
            if spec is None:
                continue
            literal = _literal_choices(hints[f.name])
            if literal and not spec.choices:
                spec = dataclasses.replace(spec, choices=literal)
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[operator]
            found.append(Declared(f.name, hints[f.name], default, spec))
        _DECLARED[cls] = tuple(found)
    return _DECLARED[cls]


def _literal_choices(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    return ()


def check_declared(section: Any, name: str, error: type[Exception] = DeclarationError) -> None:
    """Check every declared field of ``section`` (a settings section named ``name``) against
    its bounds and choices; ``error`` (the settings module's own) names the first that breaks
    them as ``<name>.<field>``."""
    for d in declared(type(section)):
        try:
            d.spec.check(getattr(section, d.name), f"{name}.{d.name}")
        except DeclarationError as exc:
            raise error(str(exc)) from None


def undeclared(cls: type) -> list[str]:
    """The fields of ``cls`` without a declaration (a test keeps this empty)."""
    return [f.name for f in dataclasses.fields(cls) if METADATA_KEY not in f.metadata]


def path_settings(cls: type) -> frozenset[str]:
    """The fields of section ``cls`` declared ``path``: files or folders."""
    return frozenset(d.name for d in declared(cls) if d.spec.path)


def runtime_settings(cls: type) -> frozenset[str]:
    """The fields of section ``cls`` declared ``runtime``: they change how a run goes, not
    what it computes."""
    return frozenset(d.name for d in declared(cls) if d.spec.runtime)


def form_entries(sections: Any, form: FormName) -> Iterator[tuple[str, Declared, FormEntry]]:
    """``(section name, field, entry)`` of each setting on ``form``, sections in the order of
    ``sections`` (the ``Settings`` class), fields in their declared order."""
    hints = typing.get_type_hints(sections)
    for section in dataclasses.fields(sections):
        for d in declared(hints[section.name]):
            for entry in d.spec.forms:
                if entry.form == form:
                    yield section.name, d, entry
