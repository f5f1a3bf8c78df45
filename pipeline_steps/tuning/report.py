"""``trainyard tuning``: a study in a few lines (the newest, or one by name)."""

from __future__ import annotations

from collections import Counter

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import Settings
from pipeline_steps.tuning.results import read_best
from pipeline_steps.tuning.study import open_study


def shown_url(url: str) -> str:
    """A storage URL fit to print: its password masked."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: print only its scheme
        return url.split("://", 1)[0] + "://…"


def describe_study(settings: Settings, name: str | None = None) -> str:
    """The study's trials by state, its best trial and where to look further. Without ``name``
    the study whose best trial was recorded last."""
    import optuna

    lake = Lake(settings.lake_root)
    if name is None:
        name = read_best(lake, settings).study
    try:
        study = open_study(settings, name)
    except KeyError as exc:
        raise StepError(f"no study {name!r} in {shown_url(settings.tuning.storage)}") from exc
    states = Counter(t.state.name.lower() for t in study.get_trials(deepcopy=False))
    lines = [
        f"study {name}",
        f"  storage {shown_url(settings.tuning.storage)}",
        "  trials  " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())),
    ]
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if done:
        best = study.best_trial
        lines.append(f"  best    trial {best.number}: validation loss {best.value:.5f}")
        for key, value in sorted(best.user_attrs.get("trainyard.settings", {}).items()):
            lines.append(f"          train.{key} = {value}")
    pruned = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.PRUNED,))
    if pruned:
        epochs = sorted(len(t.intermediate_values) for t in pruned)
        lines.append(f"  pruned  after {', '.join(map(str, epochs))} epoch(s)")
    lines += [
        f"  mlflow  experiment {settings.tuning.experiment}, run 'study {name}' "
        f"(artifacts: optimization_history.png, param_importances.png, trials.csv)",
        f"  lake    {lake.path('tuning', 'best', settings.mlflow.registered_model + '.json')}"
        " (train.params_from: tuning trains with it)",
    ]
    return "\n".join(lines)
