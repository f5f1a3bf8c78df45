"""A domain's runs, opened from a notebook (or any Python session), as the pipeline left them.

    from pipeline_steps.commands.notebook import open_domain, open_run

    domain = open_domain("examples/hotel_rates/settings.yaml")   # or TRAINYARD_CONFIG's
    domain.runs()                     # one row per run: day, trigger, decision, metrics
    run = domain.latest()             # or open_run("scheduled__2017-05-02...", config=...)
    run.settings, run.manifests       # what the run was given and what each step recorded
    run.training_set(rows=5_000)      # a seeded sample of the frozen training set
    run.holdout()                     # the frozen holdout the evaluation judged on
    run.model()                       # the run's model, ready to score raw feature rows
    run.evaluation, run.report        # the evaluation's tables; its HTML report
    run.score(run.model())            # the task's metrics of any model on that holdout
    variant = run.train_variant("longer", epochs=8)
    run.compare(variant, domain.champion_model())
    run.submit_command(epochs=8)      # the ``trainyard submit`` of such a job

``train_variant`` trains in this process on the run's own frozen sets (its features manifest is
copied to a run of its own, ``notebook__<name>__<run>``): nothing is registered, no alias moves,
and the run's MLflow run is tagged like any other training. Everything is read from the lake
and the MLflow store the settings name; no Airflow is needed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_steps.commands.report import RecordedRun, read_run, recorded_runs
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake, safe_run_key
from pipeline_steps.core.manifests import (
    EvaluateManifest,
    FeaturesManifest,
    HoldoutMetrics,
    Manifest,
    TrainManifest,
    to_json,
)
from pipeline_steps.core.settings import Settings, load_settings
from pipeline_steps.core.step_registry import FEATURES, INGEST, TRAIN

VARIANT_PREFIX = "notebook__"
"""The run ids of variants trained from a notebook: ``notebook__<name>__<run>``."""


@dataclass(frozen=True)
class Run:
    """One run of a domain: its settings and what each of its steps recorded."""

    ctx: RunContext
    recorded: RecordedRun

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def manifests(self) -> dict[str, Manifest]:
        """Each step's manifest, by step, for the steps that recorded one."""
        return {step: getattr(self.recorded, step) for step in self.recorded.steps_run}

    @property
    def features(self) -> FeaturesManifest:
        return self._needs(FeaturesManifest)

    @property
    def trained(self) -> TrainManifest:
        return self._needs(TrainManifest)

    @property
    def evaluation(self) -> EvaluateManifest | None:
        """The evaluation's tables (challenger, champion, baselines, slices); None when the run
        was not evaluated (a variant, a run that stopped earlier)."""
        return self.recorded.evaluate

    @property
    def report(self) -> str | None:
        """The evaluation's HTML report (a path or URL in the lake)."""
        return self.evaluation.report if self.evaluation else None

    def training_set(self, rows: int | None = None, seed: int = 13) -> pd.DataFrame:
        """The frozen training set, whole, or a seeded sample of ``rows`` rows of it."""
        frame = self.ctx.lake.read_table_at(self.features.sets.train.path).to_pandas()
        if rows is not None and rows < len(frame):
            frame = frame.sample(n=rows, random_state=seed).reset_index(drop=True)
        return frame

    def holdout(self) -> pd.DataFrame:
        """The frozen holdout the run's evaluation judged on."""
        return self.ctx.lake.read_table_at(self.features.sets.holdout.path).to_pandas()

    def model(self) -> Any:
        """The run's trained model (an MLflow pyfunc predicting from raw feature rows)."""
        import mlflow.pyfunc

        self._connect()
        return mlflow.pyfunc.load_model(self.trained.model_uri)

    def score(self, model: Any, holdout: pd.DataFrame | None = None) -> HoldoutMetrics:
        """The task's metrics of ``model`` (a loaded pyfunc, or a model URI) on this run's
        holdout (or on ``holdout``), as the evaluate step computes them."""
        from pipeline_steps.evaluation.metrics import holdout_metrics
        from pipeline_steps.steps.evaluate import score

        self._connect()
        features = self.features
        rows = self.holdout() if holdout is None else holdout
        uri, loaded = (model, None) if isinstance(model, str) else ("the model given", model)
        predictions = score(
            uri, rows, features.feature_columns, features.task, features.classes, loaded=loaded
        )
        labels = rows[features.label].to_numpy()
        return holdout_metrics(
            labels,
            predictions,
            features.task,
            features.classes,
            self.settings.gate.min_class_rows,
        )

    def compare(self, *models: Any, holdout: pd.DataFrame | None = None) -> pd.DataFrame:
        """One row per model (a :class:`Run`, a loaded pyfunc or a model URI; this run's first
        when none is given): the task's metrics on this run's frozen holdout."""
        holdout = self.holdout() if holdout is None else holdout
        rows = {}
        for number, model in enumerate(models or (self,)):
            name, scored = (
                (model.run_id, model.model())
                if isinstance(model, Run)
                else (model if isinstance(model, str) else f"model {number + 1}", model)
            )
            rows[name] = to_json(self.score(scored, holdout))
        from pipeline_steps.core.tasks import task_spec

        frame = pd.DataFrame.from_dict(rows, orient="index")
        wanted = ["rows", *task_spec(self.features.task).metrics]
        return frame[[c for c in wanted if c in frame.columns and frame[c].notna().any()]]

    def train_variant(self, name: str, **train: Any) -> Run:
        """Train a variant of this run on its own frozen sets, in this process, with ``train``
        over its train settings (e.g. ``epochs=8``, ``hyperparameters={"hidden": [256]}``,
        checked as the settings loader checks them): a run of its own,
        ``notebook__<name>__<run>``, whose model nothing registers. ``StepError`` when the run
        has no frozen sets; ``SettingsError`` naming a refused setting."""
        from pipeline_steps.steps.train import train as run_training

        self._needs(FeaturesManifest)
        settings = self.settings.with_train(train)
        run_id = f"{VARIANT_PREFIX}{name}__{self.run_id}"
        ctx = RunContext(run_id=run_id, logical_date=self.ctx.logical_date, settings=settings)
        lake = ctx.lake
        for step in (INGEST, FEATURES):  # what the training reads of its run
            recorded = lake.read_json(self.ctx.run_dir, f"{step.name}.json")
            lake.write_json(recorded, ctx.run_dir, f"{step.name}.json")
        trained = f"{TRAIN.name}.json"
        if lake.exists(ctx.run_dir, trained):  # a variant of that name trained before
            lake.remove(ctx.run_dir, trained)
        run_training(ctx)
        return open_run(run_id, settings=settings)

    def submit_command(self, **values: Any) -> str:
        """The ``trainyard submit`` that runs a job of this domain for this run's day with the
        training form's ``values`` (e.g. ``epochs=8``, ``learning_rate=0.001``)."""
        from pipeline_steps.commands.job_commands import FLAGS

        day = str(self.ctx.logical_date)
        argv = ["trainyard", "submit", self.settings.domain.name, "--day", day]
        for field, value in values.items():
            flag, text = FLAGS.get(field), _form_text(value)
            argv += [flag, text] if flag else ["--set", f"{field}={text}"]
        return shlex.join(argv)

    def submit(self, **values: Any) -> dict[str, Any]:
        """Submit that job over Airflow's REST API (``TRAINYARD_AIRFLOW_URL``, ``_USER``,
        ``_PASSWORD``), within the team's quota: the run Airflow created, as ``trainyard
        submit`` prints it. ``JobRefused`` naming what is refused."""
        from pipeline_steps.commands.jobs import api_from_environment, find_domain, submit

        domain = find_domain(self.settings.domain.name)
        texts = {field: _form_text(value) for field, value in values.items()}
        return submit(api_from_environment(), domain, str(self.ctx.logical_date), texts)

    def _needs(self, cls: type[Any]) -> Any:
        found = getattr(self.recorded, cls.STEP)
        if found is None:
            raise StepError(f"run {self.run_id} has no {cls.STEP} manifest (it did not get there)")
        return found

    def _connect(self) -> None:
        from pipeline_steps.core.tracking import connect

        connect(self.settings.mlflow)


@dataclass(frozen=True)
class Domain:
    """A domain's runs, as its lake holds them, and its champion."""

    settings: Settings

    @property
    def lake(self) -> Lake:
        return Lake(self.settings.lake_root, self.settings.ingest.pins)

    def runs(self) -> pd.DataFrame:
        """One row per run, oldest first: run id, day, trigger, the steps it ran, its
        training's and evaluation's headline figures and the gate's decision."""
        rows = []
        for run in recorded_runs(self.lake):
            train, evaluation = run.train, run.evaluate
            metric = self._primary_metric(run)
            rows.append(
                {
                    "run_id": run.ingest.run_id,
                    "day": run.ingest.logical_date,
                    "trigger": run.trigger.kind if run.trigger else None,
                    "steps": ",".join(run.steps_run),
                    "val_loss": train.best_val_loss if train else None,
                    "metric": metric,
                    "challenger": _metric(evaluation and evaluation.challenger, metric),
                    "champion": _metric(evaluation and evaluation.champion, metric),
                    "decision": run.promote.decision if run.promote else None,
                }
            )
        return pd.DataFrame(rows)

    def _primary_metric(self, run: RecordedRun) -> str | None:
        """The gate's first primary metric for the run's task."""
        if run.features is None:
            return None
        return self.settings.gate.metrics_for(run.features.task)[0]

    def latest(self) -> Run:
        """The newest run that trained (``StepError`` when none did)."""
        trained = [run for run in recorded_runs(self.lake) if run.train is not None]
        if not trained:
            raise StepError(f"no run of {self.settings.domain.name} in {self.lake.root} trained")
        return _run(self.settings, str(trained[-1].ingest.run_id), trained[-1])

    def champion(self) -> Any | None:
        """The registered model's champion version (MLflow's ``ModelVersion``); None when it
        has none yet."""
        from pipeline_steps.core.tracking import connect

        client = connect(self.settings.mlflow)
        mlflow = self.settings.mlflow
        try:
            return client.get_model_version_by_alias(mlflow.registered_model, mlflow.champion_alias)
        except Exception:  # no such model or alias yet
            return None

    def champion_model(self) -> str:
        """The champion's model URI (``models:/<model>@<alias>``), for ``Run.compare``;
        ``StepError`` when there is no champion."""
        if self.champion() is None:
            raise StepError(f"{self.settings.mlflow.registered_model} has no champion yet")
        mlflow = self.settings.mlflow
        return f"models:/{mlflow.registered_model}@{mlflow.champion_alias}"


def open_domain(config: str | Path | None = None) -> Domain:
    """The domain of the settings file ``config`` (default ``TRAINYARD_CONFIG``'s)."""
    return Domain(load_settings(config))


def open_run(
    run_id: str, config: str | Path | None = None, settings: Settings | None = None
) -> Run:
    """The run ``run_id`` of the domain of ``config`` (or ``settings``); ``StepError`` when
    its lake holds no such run."""
    settings = settings or load_settings(config)
    lake = Domain(settings).lake
    recorded = read_run(lake, safe_run_key(run_id))
    if recorded is None:
        raise StepError(f"no run {run_id!r} in {lake.root}/runs (trainyard report lists them)")
    return _run(settings, run_id, recorded)


def _run(settings: Settings, run_id: str, recorded: RecordedRun) -> Run:
    """The run ``run_id`` whose manifests the lake gave as ``recorded``."""
    day = date.fromisoformat(recorded.ingest.logical_date)
    return Run(RunContext(run_id=run_id, logical_date=day, settings=settings), recorded)


def _form_text(value: Any) -> str:
    """A training form's value as ``trainyard submit`` takes it (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _metric(scored: Any, metric: str | None) -> float | None:
    """A scored model's value of ``metric`` (None without either)."""
    if scored is None or metric is None:
        return None
    value = getattr(scored.metrics, metric, None)
    return float(value) if value is not None else None


__all__ = ["Domain", "Run", "open_domain", "open_run"]
