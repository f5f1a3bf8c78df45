"""The trigger form of ``<domain>_training``: Airflow Params, each bound to one setting.

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
from pipeline_steps.core.settings import Settings


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
        "The model: a registered one (mlp: embeddings + MLP; ft_transformer: feature tokens + "
        "Transformer) or the configured import path of your own; another model than the "
        "configured one trains with its declared default hyperparameters.",
        {"type": "string", "enum": list(BUILTIN_MODELS)},
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


TUNING_FORM: dict[str, FormField] = {
    "trials": FormField(
        "tuning.trials",
        "Trials",
        "Finished trials (complete or pruned) the study should hold; a run adds the missing "
        "ones, so running it again continues the study.",
        {"type": "integer", "minimum": 1, "maximum": 1000},
        "Study",
    ),
    "parallel_trials": FormField(
        "tuning.parallel_trials",
        "Parallel trials",
        "Trials training at the same time (each a task: a process or a pod).",
        {"type": "integer", "minimum": 1},
        "Study",
    ),
    "sampler": FormField(
        "tuning.sampler",
        "Sampler",
        "How trials draw parameters: tpe (Bayesian), random, grid, gp (Gaussian process).",
        {"type": "string", "enum": ["tpe", "random", "grid", "gp"]},
        "Study",
    ),
    "pruner": FormField(
        "tuning.pruner",
        "Pruner",
        "Stops unpromising trials from their per-epoch validation loss.",
        {"type": "string", "enum": ["none", "median", "hyperband"]},
        "Study",
    ),
    "search_space": FormField(
        "tuning.search_space",
        "Search space file",
        "YAML file of the parameters the trials draw (the domain's tuning.yaml).",
        {"type": "string", "minLength": 1},
        "Study",
    ),
    "time_budget_s": FormField(
        "tuning.time_budget_s",
        "Time budget (s)",
        "No trial starts later than this after the run began; 0: no budget.",
        {"type": "integer", "minimum": 0},
        "Study",
    ),
    "epochs": FormField(
        "train.epochs",
        "Epochs per trial",
        "Most epochs a trial trains (the pruner's budget).",
        {"type": "integer", "minimum": 1, "maximum": 200},
        "Training",
    ),
}
"""The trigger form of ``<domain>_tuning`` (besides the day to tune on)."""


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
    return {**f.schema, "enum": list(dict.fromkeys([*BUILTIN_MODELS, settings.train.model]))}


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
