"""A day without data in a domain where that is ordinary, as a DAG run: the training DAG of a
domain from a settings file in the domains folder (Mesa Airlines' real flights of June 2013,
exported with pandas; no Saturday flights) ends its run for a Saturday with ``wait_for_data``
and every step skipped, and the run itself successful (not failed, not retried)."""

from datetime import date

import pytest
from airflow.dag_processing.dagbag import DagBag

from tests.conftest import ROOT
from tests.data.test_sparse_days import write_export
from tests.pipeline_runs import dag_test

pytestmark = pytest.mark.slow
SETTINGS = """\
domain:
  module: flight_delay.domain
  name: mesa_flights
  empty_days: skip
validation:
  expectations_dir: {examples}/expectations
features:
  feature_repo: {examples}/feature_repo
ingest:
  source: file
  path: {export}/{{dataset}}.parquet
  date_column: flight_date
  datasets: [flights]
"""


def test_an_ordinary_empty_day_ends_the_run_skipped(airflow_env, monkeypatch, tmp_path) -> None:
    export = write_export(tmp_path)
    domains = tmp_path / "domains"
    domains.mkdir()
    (domains / "mesa_flights.yaml").write_text(
        SETTINGS.format(export=export, examples=ROOT / "examples" / "flight_delay")
    )
    monkeypatch.setenv("TRAINYARD_ORCHESTRATION__DOMAINS_DIR", str(domains))

    run = dag_test("mesa_flights_training", date(2013, 6, 8))
    dag = DagBag(dag_folder=str(ROOT / "dags")).get_dag("mesa_flights_training")
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states.pop("trigger") in ("success", "TaskInstanceState.SUCCESS")
    assert set(states) == set(dag.task_ids) - {"trigger"}
    assert all("skipped" in state.lower() for state in states.values()), states
