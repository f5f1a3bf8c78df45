"""The model registry: the one extension point for models.

``train.model`` names a built-in model (``mlp``, ``ft_transformer``) or the import path
``package.module:name`` of a :class:`ModelSpec` in the user's own code. A spec declares its
hyperparameters once (type, default, bounds or choices, what each means) and how the model is
built from the preprocessed batch (:class:`BatchShape`) and those values. The settings loader
checks ``train.<hyperparameter>`` against the declaration, the trigger form lists the models,
the tuning search space is checked against it, and the registered model records the reference
and the values it was built with (and ships the user's package with it).

A user's model is one file::

    from pipeline_steps.core.models import BatchShape, Hyperparameter, model

    @model(hyperparameters=[Hyperparameter("width", int, 64, low=4, high=1024)])
    def wide(shape: BatchShape, *, width: int):
        from mypackage.networks import Wide   # torch is imported when the model is built

        return Wide(shape, width)

and ``train.model: mypackage.wide_model:wide``. This module imports no torch: settings and DAG
parsing read declarations only. Built-in models are resolved lazily by dotted path (as
Metaflow's plugin registry does), so declaring them here imports nothing heavy.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_steps.core.tasks import TASKS

BUILTIN_MODELS: dict[str, str] = {
    "mlp": "pipeline_steps.core.builtin_models:MLP",
    "ft_transformer": "pipeline_steps.core.builtin_models:FT_TRANSFORMER",
}
"""Registered names → the import path of their spec."""


class ModelError(ValueError):
    """A model reference or hyperparameter value is not valid; the message names it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchShape:
    """What a model is built from: the preprocessed batch's description.

    A batch is ``codes`` (int64 [n, len(cardinalities)], category codes, 0 = out of vocabulary)
    and ``numeric`` (float32 [n, numeric_width]: standardised values then missing flags). The
    model returns ``[n, outputs]``: one logit (binary), one value (regression, on the
    standardised label) or one logit per class (multiclass)."""

    cardinalities: list[int]
    numeric_width: int
    outputs: int = 1
    task: str = "binary"


@dataclass(frozen=True, slots=True)
class Hyperparameter:
    """One value a model is built with: its type, default and the values it may take."""

    name: str
    type: type
    """``int``, ``float``, ``bool``, ``str``, or ``tuple`` (a list of ints, e.g. widths)."""
    default: Any
    low: float | None = None
    """Smallest value (ints, floats, and each item of a tuple)."""
    high: float | None = None
    """Largest value; for a float an open bound when ``open_high``."""
    choices: tuple[Any, ...] = ()
    """The only values allowed, when given."""
    doc: str = ""
    open_high: bool = False

    def coerce(self, value: Any, where: str) -> Any:
        """``value`` as this hyperparameter takes it; ``ModelError`` naming ``where``."""
        import yaml

        try:
            if isinstance(value, str) and self.type is not str:
                value = yaml.safe_load(value)
            if self.type is bool:
                if not isinstance(value, bool):
                    raise TypeError
            elif self.type is int:
                if isinstance(value, bool) or not float(value).is_integer():
                    raise TypeError
                value = int(value)
            elif self.type is float:
                if isinstance(value, bool):
                    raise TypeError
                value = float(value)
            elif self.type is tuple:
                if not isinstance(value, list | tuple) or not value:
                    raise TypeError
                if any(isinstance(v, bool) or not float(v).is_integer() for v in value):
                    raise TypeError
                value = tuple(int(v) for v in value)
            elif self.type is str and not isinstance(value, str):
                raise TypeError
        except (TypeError, ValueError):
            kind = "a list of ints" if self.type is tuple else self.type.__name__
            raise ModelError(f"{where} expects {kind}, got {value!r}") from None
        self._check_bounds(value, where)
        return value

    def _check_bounds(self, value: Any, where: str) -> None:
        if self.choices and value not in self.choices:
            raise ModelError(f"{where} must be one of {list(self.choices)}, got {value!r}")
        items = value if isinstance(value, tuple) else (value,)
        if self.type is bool or self.type is str:
            return
        for item in items:
            if self.low is not None and item < self.low:
                raise ModelError(f"{where} must be at least {self.low:g}, got {value!r}")
            if self.high is not None and (
                item >= self.high if self.open_high else item > self.high
            ):
                bound = "below" if self.open_high else "at most"
                raise ModelError(f"{where} must be {bound} {self.high:g}, got {value!r}")

    def describe(self) -> str:
        """``int in [1, 8], default 2``: the declaration as the docs and errors show it."""
        kind = "list of ints" if self.type is tuple else self.type.__name__
        if self.choices:
            allowed = f" in {list(self.choices)}"
        elif self.low is not None or self.high is not None:
            close = ")" if self.open_high else "]"
            allowed = f" in [{_bound(self.low)}, {_bound(self.high)}{close}"
        else:
            allowed = ""
        return f"{kind}{allowed}, default {self.default!r}"


def _bound(value: float | None) -> str:
    return "…" if value is None else f"{value:g}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A model's declaration: its hyperparameters and how it is built."""

    build: Callable[..., Any] | str
    """``build(shape, **hyperparameters) -> torch.nn.Module``, or its import path."""
    hyperparameters: tuple[Hyperparameter, ...] = ()
    description: str = ""
    tasks: tuple[str, ...] = TASKS
    """The tasks it can learn (its head adapts to ``shape.outputs``): every built-in task."""
    check: Callable[[Mapping[str, Any]], str | None] | None = None
    """A rule tying hyperparameters together: returns why the values are refused, or None."""
    reference: str = field(default="", compare=False)
    """How ``train.model`` named it (set by :func:`resolve`)."""

    @property
    def defaults(self) -> dict[str, Any]:
        return {h.name: h.default for h in self.hyperparameters}

    def hyperparameter(self, name: str) -> Hyperparameter | None:
        return next((h for h in self.hyperparameters if h.name == name), None)

    def values(self, given: Mapping[str, Any], where: str = "train") -> dict[str, Any]:
        """The defaults with ``given`` over them, each checked; ``ModelError`` naming the key
        (``train.<name>``) for an unknown name, a bad value, or a rule the values break."""
        values = self.defaults
        for name, value in given.items():
            declared = self.hyperparameter(name)
            if declared is None:
                known = ", ".join(h.name for h in self.hyperparameters) or "none"
                raise ModelError(
                    f"{where}.{name} is not a hyperparameter of model {self.reference}; "
                    f"its hyperparameters: {known}"
                )
            values[name] = declared.coerce(value, f"{where}.{name}")
        if self.check is not None and (why := self.check(values)):
            raise ModelError(f"model {self.reference}: {why}")
        return values

    def build_model(self, shape: BatchShape, values: Mapping[str, Any]) -> Any:
        """The model (a ``torch.nn.Module``) for ``shape`` with ``values``."""
        build = _import(self.build, "model builder") if isinstance(self.build, str) else self.build
        return build(shape, **dict(values))


def model(
    *,
    hyperparameters: Sequence[Hyperparameter] = (),
    description: str = "",
    tasks: Sequence[str] = TASKS,
    check: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> Callable[[Callable[..., Any]], ModelSpec]:
    """Declare ``build(shape, **hyperparameters)`` as a model (a decorator)."""

    def declare(build: Callable[..., Any]) -> ModelSpec:
        names = [h.name for h in hyperparameters]
        if len(set(names)) != len(names):
            raise ModelError(f"model {build.__qualname__} declares a hyperparameter twice")
        return ModelSpec(
            build=build,
            hyperparameters=tuple(hyperparameters),
            description=description or (build.__doc__ or "").strip().split("\n")[0],
            tasks=tuple(tasks),
            check=check,
        )

    return declare


def is_import_path(reference: str) -> bool:
    return ":" in reference


def resolve(reference: str) -> ModelSpec:
    """The spec ``train.model`` names: a built-in name or ``package.module:name``.
    ``ModelError`` says what is wrong: an unknown name, a module that does not import, or an
    object that is not a :class:`ModelSpec`."""
    if reference in BUILTIN_MODELS:
        path = BUILTIN_MODELS[reference]
    elif is_import_path(reference):
        path = reference
    else:
        raise ModelError(
            f"train.model {reference!r} is unknown; registered: {', '.join(BUILTIN_MODELS)}, "
            "or the import path package.module:name of your own model"
        )
    spec = _import(path, "train.model")
    if not isinstance(spec, ModelSpec):
        raise ModelError(
            f"train.model {reference!r} is a {type(spec).__name__}, not a model declared with "
            "pipeline_steps.core.models.model(...)"
        )
    return _with_reference(spec, reference)


def _with_reference(spec: ModelSpec, reference: str) -> ModelSpec:
    from dataclasses import replace

    return spec if spec.reference == reference else replace(spec, reference=reference)


def _import(path: str, what: str) -> Any:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ModelError(f"{what} {path!r} must be package.module:name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelError(
            f"{what} {path!r}: module {module_name} cannot be imported ({exc}); is its folder "
            "on PYTHONPATH or its package installed?"
        ) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ModelError(f"{what} {path!r}: module {module_name} has no {attribute}") from None


def code_paths(reference: str) -> list[str]:
    """The folder of the top-level package (or the module file) behind an import-path model,
    shipped inside the registered model so it loads where the package is not installed; none
    for built-in models (they come with trainyard)."""
    if not is_import_path(reference):
        return []
    top = reference.partition(":")[0].split(".")[0]
    module = sys.modules.get(top) or importlib.import_module(top)
    location = getattr(module, "__file__", None)
    if location is None:  # a namespace package
        return [str(Path(p)) for p in getattr(module, "__path__", [])][:1]
    path = Path(location)
    return [str(path.parent if path.name == "__init__.py" else path)]
