"""The trigger form of ``flight_delay_training``: Airflow Params, each bound to one setting.

Defaults come from the settings the DAG was parsed with, so a scheduled run (which takes the
defaults) trains exactly as configured. Every value reaches the steps as ``--set section.key=...``
in the argv (the same argv for every runtime), where the settings loader validates it again.
Rules that tie two fields together (a forced promotion needs a reason) are checked by the
settings loader in the run's first task, since a Param's JSON schema sees only its own value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline_steps.settings import Settings


@dataclass(frozen=True)
class FormField:
    """One Param of the form: the setting it sets and its JSON schema (without the default)."""

    setting: str
    title: str
    description: str
    schema: dict[str, Any]
    section: str


FORM: dict[str, FormField] = {
    "model": FormField(
        "train.model",
        "Model",
        "Architecture: mlp (embeddings + MLP) or ft_transformer (feature tokens + Transformer).",
        {"type": "string", "enum": ["mlp", "ft_transformer"]},
        "Training",
    ),
    "epochs": FormField(
        "train.epochs",
        "Epochs",
        "Most passes over the training set; early stopping may end sooner.",
        {"type": "integer", "minimum": 1, "maximum": 200},
        "Training",
    ),
    "learning_rate": FormField(
        "train.learning_rate",
        "Learning rate",
        "AdamW peak learning rate.",
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "Training",
    ),
    "batch_size": FormField(
        "train.batch_size",
        "Batch size",
        "Examples per forward pass on each process.",
        {"type": "integer", "minimum": 1, "maximum": 65536},
        "Training",
    ),
    "nproc_per_node": FormField(
        "train.nproc_per_node",
        "Processes per node",
        "torchrun processes per node (CPU processes, or one per GPU).",
        {"type": "integer", "minimum": 1, "maximum": 64},
        "Training",
    ),
    "window_days": FormField(
        "features.window_days",
        "Window (days)",
        "Trailing validated days in the training window, the holdout day included.",
        {"type": "integer", "minimum": 2, "maximum": 366},
        "Data",
    ),
    "pin_raw_version": FormField(
        "ingest.pin_version",
        "Pin raw version",
        "Use this raw version of the day's partitions instead of ingesting (0: ingest; the "
        "newest version wins). Versions are listed under raw/<dataset>/date=D/.",
        {"type": "integer", "minimum": 0},
        "Data",
    ),
    "skip_promotion": FormField(
        "promotion.skip",
        "Skip promotion",
        "Train, register and evaluate, but leave the champion where it is.",
        {"type": "boolean"},
        "Promotion",
    ),
    "force_promotion": FormField(
        "promotion.force",
        "Force promotion",
        "Make this run's model the champion whatever the gate says. Needs a reason; the "
        "reason and your user name are recorded on the model version.",
        {"type": "boolean"},
        "Promotion",
    ),
    "force_reason": FormField(
        "promotion.reason",
        "Reason for forcing",
        "Required when forcing a promotion: why the gate is overridden.",
        {"type": ["string", "null"], "maxLength": 500},
        "Promotion",
    ),
}


def setting_value(settings: Settings, key: str) -> Any:
    """The value of ``section.key`` in ``settings``."""
    section, _, name = key.partition(".")
    return getattr(getattr(settings, section), name)


def form_defaults(settings: Settings) -> dict[str, Any]:
    """Each Param's default: the setting's configured value."""
    return {name: setting_value(settings, f.setting) for name, f in FORM.items()}


def training_params(settings: Settings) -> dict[str, Any]:
    """The DAG's ``params``: one ``airflow.sdk.Param`` per form field."""
    from airflow.sdk import Param

    defaults = form_defaults(settings)
    return {
        name: Param(
            defaults[name],
            title=f.title,
            description=f"{f.description} (setting {f.setting})",
            section=f.section,
            **f.schema,
        )
        for name, f in FORM.items()
    }


def set_arguments() -> list[str]:
    """``--set section.key=<param as JSON>`` per form field, as Jinja templates of the argv."""
    argv: list[str] = []
    for name, f in FORM.items():
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
