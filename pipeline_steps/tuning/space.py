"""The search space of a study: a YAML file naming the train settings a trial draws.

``parameters`` are drawn by every trial; ``architectures`` maps a model (a registered name such
as ``mlp`` or the import path of the user's own, :mod:`pipeline_steps.core.models`) to the
parameters only it has, drawn after the trial drew that model. A parameter is a train setting or
a hyperparameter the model declares, checked against that declaration: a range (``low``,
``high``, optional ``log``; ints for int values) or a set of ``choices`` (lists allowed, e.g.
``hidden_dims``); ``grid`` lists the values of a range that the grid sampler tries. Every
problem is a ``SpaceError`` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline_steps.core.fingerprints import json_sha256
from pipeline_steps.core.models import BUILTIN_MODELS, Hyperparameter, ModelError, ModelSpec
from pipeline_steps.core.models import resolve as resolve_model
from pipeline_steps.core.settings import TrainSettings

NOT_TUNABLE = frozenset(
    {
        "model",
        "hyperparameters",
        "epochs",
        "seed",
        "device",
        "nproc_per_node",
        "params_from",
        "max_restarts",
    }
)
"""Settings a trial does not draw: the model is drawn through ``architectures``, the epochs are
the pruner's budget, the rest are how and where training runs, not what it learns."""

_KEYS = frozenset({"low", "high", "log", "choices", "grid"})


class SpaceError(ValueError):
    """The search space file is unreadable or names something it cannot; the message says
    which file and key."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Parameter:
    """One drawn train setting: a range (``low``..``high``) or a set of ``choices``."""

    name: str
    kind: str
    """``int``, ``float`` or ``categorical``."""
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()
    grid: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """Draw the value for ``trial`` (an Optuna trial), as the setting takes it."""
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log)
        return decode(trial.suggest_categorical(self.name, [encode(c) for c in self.choices]))

    def grid_values(self) -> list[Any]:
        return [encode(v) for v in (self.choices or self.grid)]


def encode(value: Any) -> Any:
    """An Optuna categorical value: lists become their JSON text (Optuna keeps scalars only)."""
    return json.dumps(value) if isinstance(value, list | tuple) else value


def decode(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("["):
        return json.loads(value)
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchSpace:
    """What a trial draws, read from ``path``."""

    path: str
    shared: tuple[Parameter, ...]
    architectures: dict[str, tuple[Parameter, ...]]
    sha256: str

    @property
    def name(self) -> str:
        """The file's stem: part of the study name."""
        return Path(self.path).stem

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Draw one trial's train settings (``{setting: value}``)."""
        drawn = {p.name: p.suggest(trial) for p in self.shared}
        if self.architectures:
            model = trial.suggest_categorical("model", list(self.architectures))
            drawn["model"] = model
            drawn |= {p.name: p.suggest(trial) for p in self.architectures[model]}
        return drawn

    def grid(self) -> dict[str, list[Any]]:
        """The grid sampler's search space; ``SpaceError`` when a range has no ``grid``."""
        grid: dict[str, list[Any]] = {}
        if self.architectures:
            grid["model"] = list(self.architectures)
        for p in (*self.shared, *(p for ps in self.architectures.values() for p in ps)):
            if not p.choices and not p.grid:
                raise SpaceError(
                    f"{self.path}: parameter {p.name!r} needs 'grid' (the values to try) or "
                    "'choices' for tuning.sampler=grid"
                )
            grid[p.name] = p.grid_values()
        return grid


def _train_fields() -> dict[str, Any]:
    hints = typing.get_type_hints(TrainSettings)
    return {f.name: hints[f.name] for f in dataclasses.fields(TrainSettings)}


def _parameter(
    path: str, where: str, name: str, spec: Any, declared: Hyperparameter | None = None
) -> Parameter:
    """One parameter: a train setting, or the model's ``declared`` hyperparameter."""
    fields = _train_fields()
    if declared is not None:
        fields = {**fields, name: declared.type}
    elif name not in fields or name == "hyperparameters":
        raise SpaceError(
            f"{path}: {where}{name!r} is not a train setting or a hyperparameter of the model; "
            f"settings: {', '.join(sorted(set(fields) - {'hyperparameters'}))}"
        )
    if name in NOT_TUNABLE:
        raise SpaceError(f"{path}: {where}{name!r} cannot be tuned ({NOT_TUNABLE_REASON[name]})")
    if not isinstance(spec, dict):
        raise SpaceError(f"{path}: {where}{name!r} must be a mapping with low/high or choices")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise SpaceError(
            f"{path}: {where}{name!r} has unknown key(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_KEYS))}"
        )
    label = f"{path}: {where}{name!r}"
    if "choices" in spec:
        choices = spec["choices"]
        if set(spec) - {"choices"}:
            raise SpaceError(f"{label}: 'choices' cannot be combined with low/high/log/grid")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{label}: 'choices' must be a non-empty list")
        for choice in choices:
            _check_value(label, name, choice, declared)
        return Parameter(name=name, kind="categorical", choices=tuple(choices))
    kind = {int: "int", float: "float"}.get(fields[name])
    if kind is None:
        raise SpaceError(f"{label}: a range needs a number setting; give 'choices' instead")
    if "low" not in spec or "high" not in spec:
        raise SpaceError(f"{label}: a range needs both 'low' and 'high'")
    low, high, log = spec["low"], spec["high"], spec.get("log", False)
    numbers = (low, high)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
        raise SpaceError(f"{label}: 'low' and 'high' must be numbers")
    if kind == "int" and not all(float(v).is_integer() for v in numbers):
        raise SpaceError(f"{label}: {name} is an int setting; 'low' and 'high' must be ints")
    if not low < high:
        raise SpaceError(f"{label}: 'low' ({low}) must be below 'high' ({high})")
    if not isinstance(log, bool):
        raise SpaceError(f"{label}: 'log' must be true or false")
    if log and low <= 0:
        raise SpaceError(f"{label}: a log-scale range needs 'low' above 0")
    grid = spec.get("grid", [])
    if not isinstance(grid, list) or any(not low <= g <= high for g in grid):
        raise SpaceError(f"{label}: 'grid' must be a list of values between low and high")
    for value in (low, high, *grid):
        _check_value(label, name, int(value) if kind == "int" else float(value), declared)
    return Parameter(
        name=name, kind=kind, low=float(low), high=float(high), log=log, grid=tuple(grid)
    )


NOT_TUNABLE_REASON = {
    "model": "the model is drawn from the keys of 'architectures'",
    "epochs": "the epochs are each trial's budget, set per study run",
    "seed": "trials share the seed so that they differ only by what they draw",
    "device": "where training runs is not a model choice",
    "nproc_per_node": "where training runs is not a model choice",
    "params_from": "a trial draws its parameters from the study",
    "max_restarts": "fault tolerance is not a model choice",
}


def _check_value(label: str, name: str, value: Any, declared: Hyperparameter | None) -> None:
    """The value must be one the train setting or the model's hyperparameter accepts on its own
    (rules tying two values together, like heads dividing the token width, are checked per
    trial when it is drawn)."""
    from pipeline_steps.core.settings import SettingsError, build_section

    if declared is not None:
        try:
            declared.coerce(list(value) if isinstance(value, tuple) else value, name)
        except ModelError as exc:
            raise SpaceError(f"{label}: value {value!r} is not valid ({exc})") from exc
        return
    try:
        build_section(TrainSettings, {name: value}, "train")
    except SettingsError as exc:
        if "must divide" not in str(exc):
            raise SpaceError(f"{label}: value {value!r} is not valid ({exc})") from exc


def load_space(path: str | Path, model: str = "mlp") -> SearchSpace:
    """Read and check a search space file against the models' declarations; ``model`` is
    ``train.model``, whose hyperparameters ``parameters`` may name when the space has no
    ``architectures``. ``SpaceError`` names the file and the bad key."""
    where = str(path)
    file = Path(path)
    if not file.is_file():
        raise SpaceError(f"search space file {where} does not exist (setting tuning.search_space)")
    try:
        document = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise SpaceError(f"search space file {where} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise SpaceError(f"{where}: expected a mapping with 'parameters' and 'architectures'")
    unknown = sorted(set(document) - {"parameters", "architectures"})
    if unknown:
        raise SpaceError(
            f"{where}: unknown top-level key(s) {', '.join(unknown)}; "
            "known: parameters, architectures"
        )
    shared_specs = document.get("parameters") or {}
    arch_specs = document.get("architectures") or {}
    if not isinstance(shared_specs, dict) or not isinstance(arch_specs, dict):
        raise SpaceError(f"{where}: 'parameters' and 'architectures' must be mappings")
    models = {arch: _model(where, arch) for arch in arch_specs} or {model: _model(where, model)}
    shared = []
    for name, spec in shared_specs.items():
        declared = [m.hyperparameter(name) for m in models.values()]
        owners = [a for a, d in zip(models, declared, strict=True) if d is not None]
        if owners and len(owners) < len(models):
            raise SpaceError(
                f"{where}: parameters.{name} is a hyperparameter of {', '.join(owners)} only; "
                f"move it under architectures.{owners[0]}"
            )
        shared.append(_parameter(where, "parameters.", name, spec, declared[0]))
    architectures: dict[str, tuple[Parameter, ...]] = {}
    for arch, specs in arch_specs.items():
        params = []
        for name, spec in (specs or {}).items():
            own = models[arch].hyperparameter(name)
            if own is None and (owner := _builtin_owner(name)):
                raise SpaceError(
                    f"{where}: architectures.{arch}.{name} is not a hyperparameter of {arch}; "
                    f"it belongs to {owner}"
                )
            if name in shared_specs:
                raise SpaceError(f"{where}: architectures.{arch}.{name} is also under 'parameters'")
            params.append(_parameter(where, f"architectures.{arch}.", name, spec, own))
        architectures[arch] = tuple(params)
    if not shared and not architectures:
        raise SpaceError(f"{where}: the search space draws nothing")
    return SearchSpace(
        path=where,
        shared=tuple(shared),
        architectures=architectures,
        sha256=json_sha256(document),
    )


def _model(where: str, reference: str) -> ModelSpec:
    try:
        return resolve_model(reference)
    except ModelError as exc:
        raise SpaceError(
            f"{where}: architectures.{reference} is not a model ({exc}); registered: "
            f"{', '.join(BUILTIN_MODELS)}, or an import path package.module:name"
        ) from exc


def _builtin_owner(name: str) -> str | None:
    """The built-in model that declares ``name``, for a message about a misplaced parameter."""
    for builtin in BUILTIN_MODELS:
        if resolve_model(builtin).hyperparameter(name) is not None:
            return builtin
    return None
