"""The trigger forms of a domain's training and tuning DAGs: Airflow Params, each bound to one
setting and derived from its declaration (label, group, doc, type, bounds, choices), so the
form accepts what the settings loader accepts.

Defaults come from the settings the DAG was parsed with, so a scheduled run (which takes the
defaults) trains exactly as configured. Every value reaches the steps as ``--set section.key=...``
in the argv (the same argv for every runtime), where the settings loader validates it again.
Rules that tie two fields together (a forced promotion needs a reason) are checked by the
settings loader in the run's first task, since a Param's JSON schema sees only its own value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline_steps.core.models import BUILTIN_MODELS
from pipeline_steps.core.setting_spec import Declared, FormName, form_entries
from pipeline_steps.core.settings import Settings

PRIORITY = "priority"
"""The conf key (the training form's Param) of a job's priority."""


@dataclass(frozen=True)
class FormField:
    """One Param of the form: the setting it sets and its JSON schema (without the default)."""

    setting: str
    title: str
    description: str
    schema: dict[str, Any]
    section: str


def declared_schema(d: Declared) -> dict[str, Any]:
    """The JSON schema of a declared setting: its type, bounds, choices and length, so the form
    accepts exactly what the settings loader accepts (a text field may come back empty as
    null, meaning the empty string)."""
    spec = d.spec
    if spec.choices:
        return {"type": _JSON_TYPES.get(d.type, "string"), "enum": list(spec.choices)}
    if d.type is str:
        text: dict[str, Any] = {"type": ["string", "null"]}
        if spec.max_length is not None:
            text["maxLength"] = spec.max_length
        return text
    kind: dict[str, Any] = {"type": _JSON_TYPES[d.type]}
    for key, bound in (
        ("minimum", spec.minimum),
        ("maximum", spec.maximum),
        ("exclusiveMinimum", spec.above),
        ("exclusiveMaximum", spec.below),
    ):
        if bound is not None and d.type is not bool:
            kind[key] = bound
    return kind


_JSON_TYPES: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def declared_form(form: FormName) -> dict[str, FormField]:
    """The Params of a DAG's trigger form, from the settings declared on it (``form=`` of
    :func:`pipeline_steps.core.setting_spec.setting`), in the settings' order."""
    return {
        entry.param or d.name: FormField(
            f"{section}.{d.name}",
            entry.label,
            d.spec.doc.replace("``", ""),
            declared_schema(d),
            entry.group,
        )
        for section, d, entry in form_entries(Settings, form)
    }


FORM: dict[str, FormField] = declared_form("training")
"""The trigger form of a domain's training DAG."""

TUNING_FORM: dict[str, FormField] = declared_form("tuning")
"""The trigger form of a domain's tuning DAG (besides the day to tune on)."""


def setting_value(settings: Settings, key: str) -> Any:
    """The value of ``section.key`` in ``settings``."""
    section, _, name = key.partition(".")
    return getattr(getattr(settings, section), name)


def form_defaults(settings: Settings, form: dict[str, FormField] = FORM) -> dict[str, Any]:
    """Each Param's default: the setting's configured value."""
    return {name: setting_value(settings, f.setting) for name, f in form.items()}


def form_params(settings: Settings, form: dict[str, FormField]) -> dict[str, Any]:
    """A DAG's ``params``: one ``airflow.sdk.Param`` per form field."""
    from airflow.sdk import Param

    defaults = form_defaults(settings, form)
    return {
        name: Param(
            defaults[name],
            title=f.title,
            description=f"{f.description} (setting {f.setting})",
            section=f.section,
            **schema(f, settings),
        )
        for name, f in form.items()
    }


def schema(f: FormField, settings: Settings) -> dict[str, Any]:
    """The field's JSON schema; the model's choices are the registered models and the
    configured one (an import path of the user's own model appears without any edit here)."""
    if f.setting != "train.model":
        return f.schema
    return {"type": "string", "enum": list(dict.fromkeys([*BUILTIN_MODELS, settings.train.model]))}


def training_params(settings: Settings) -> dict[str, Any]:
    """``<domain>_training``'s ``params``."""
    return form_params(settings, FORM)


def set_arguments(form: dict[str, FormField] = FORM) -> list[str]:
    """``--set section.key=<param as JSON>`` per form field, as Jinja templates of the argv."""
    argv: list[str] = []
    for name, f in form.items():
        value = f"(params.{name} or '')" if _nullable(f) else f"params.{name}"
        argv += ["--set", f"{f.setting}={{{{ {value} | tojson }}}}"]
    return argv


def _nullable(f: FormField) -> bool:
    """A text field the form may send empty as null; it means the empty string."""
    kinds = f.schema["type"]
    return isinstance(kinds, list) and "null" in kinds


def overrides_of(params: dict[str, Any], settings: Settings) -> list[tuple[str, Any, Any]]:
    """``(setting, value, default)`` for every form value that differs from its default."""
    defaults = form_defaults(settings)
    changed = []
    for name, f in FORM.items():
        value = params.get(name, defaults[name])
        if value is None and _nullable(f):
            value = ""
        if value != defaults[name]:
            changed.append((f.setting, value, defaults[name]))
    return changed
