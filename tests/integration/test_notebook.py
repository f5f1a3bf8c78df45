"""The example notebook, executed as a data scientist runs it (nbclient, this environment's
kernel) on a lake where a run trained and promoted a champion: it opens the domain and the
newest run, trains a variant on the run's frozen sets, compares the three models on the frozen
holdout and prints the job's ``trainyard submit``; nothing is registered by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIRST_DAY, ROOT, WINDOW
from tests.pipeline_runs import run_all, run_context

pytestmark = pytest.mark.slow
NOTEBOOK = ROOT / "examples" / "notebooks" / "compare_a_variant.ipynb"


def _outputs(notebook: object) -> str:
    texts = []
    for cell in notebook.cells:  # type: ignore[attr-defined]
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.append(json.dumps(output.get("data", {})))
    return "\n".join(texts)


def test_the_example_notebook_trains_a_variant_and_compares_it_with_the_champion(
    ready_lake_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from mlflow import MlflowClient
    from nbclient import NotebookClient

    from pipeline_steps.core.settings import load_settings

    environ = {
        "TRAINYARD_HOME": str(ready_lake_home),
        "TRAINYARD_FEATURES__WINDOW_DAYS": str(WINDOW),
        "TRAINYARD_TRAIN__EPOCHS": "4",
        "TRAINYARD_GATE__MIN_AUC": "0.5",
        "TRAINYARD_GATE__BASELINES_MUST_BEAT": "[]",
        "TRAINYARD_VALIDATION__DATA_DOCS": "false",
        "VARIANT_EPOCHS": "2",
    }
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    ctx = run_context(settings, "scheduled__first", FIRST_DAY, "scheduled")
    run_all(ctx)
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    model = settings.mlflow.registered_model
    champion = client.get_model_version_by_alias(model, settings.mlflow.champion_alias)

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute(cwd=str(ready_lake_home))
    shown = _outputs(notebook)
    assert f"champion: {champion.version}" in shown, shown[-3000:]
    assert "notebook__longer__scheduled__first epochs: 2" in shown, shown[-3000:]
    # the comparison: the run, the variant and the champion, by the task's metrics
    assert "models:/flight_delay@champion" in shown and "auc" in shown, shown[-3000:]
    assert "trainyard submit flight_delay --day 2013-06-04 --epochs 2" in shown, shown[-3000:]
    # the variant registered nothing and moved no alias
    versions = client.search_model_versions(f"name = '{model}'")
    assert [v.version for v in versions] == [champion.version]
    again = client.get_model_version_by_alias(model, settings.mlflow.champion_alias)
    assert again.version == champion.version
