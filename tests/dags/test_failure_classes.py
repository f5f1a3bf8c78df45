"""Bad data and bad configuration fail a task at once; a lost connection, a killed process or a
preempted pod is retried. The class travels in the step's exit code and failure line."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline_steps.commands import cli
from pipeline_steps.core.errors import (
    EXIT_PERMANENT,
    EXIT_TRANSIENT,
    StepError,
    failure_class,
    is_transient,
)
from pipeline_steps.orchestration.failures import pod_outcome
from pipeline_steps.orchestration.runners import LocalStepOperator


class _RestError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status

    def get_http_status_code(self) -> int:
        return self.status


def _raised_from(cause: BaseException) -> StepError:
    try:
        raise StepError("sql source failed") from cause
    except StepError as exc:
        return exc


def test_connection_failures_are_transient_and_data_errors_are_not() -> None:
    import sqlalchemy.exc

    assert is_transient(ConnectionRefusedError(111, "refused"))
    assert is_transient(TimeoutError())
    assert is_transient(_raised_from(ConnectionResetError()))
    assert is_transient(sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("gone")))
    assert is_transient(_RestError(503)) and is_transient(_RestError(429))
    assert not is_transient(_RestError(400))
    assert not is_transient(StepError("flights partition of 2013-06-03 failed its suite"))
    assert not is_transient(_raised_from(ValueError("bad value")))


@pytest.mark.parametrize(
    ("raised", "code", "kind"),
    [
        (StepError("flights 2013-06-03 quarantined: 12 rows with dep_time > 2400"), 2, "permanent"),
        (ConnectionRefusedError(111, "Connection refused"), 75, "transient"),
        (_RestError(503), 75, "transient"),
    ],
)
def test_the_cli_exit_code_and_line_carry_the_class(
    monkeypatch, capsys, raised, code, kind
) -> None:
    def step(ctx):
        raise raised

    monkeypatch.setattr(cli, "step_function", lambda name: step)
    argv = ["step", "validate", "--run-id", "r1", "--logical-date", "2013-06-03"]
    assert cli.main(argv) == code
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"trainyard step validate failed ({kind}): ")
    assert failure_class(1, [line]) == kind  # what torchrun's exit code 1 hides


def test_bad_configuration_is_permanent(capsys) -> None:
    argv = ["step", "train", "--run-id", "r1", "--logical-date", "2013-06-03"]
    assert cli.main([*argv, "--set", "train.epochs=ten"]) == EXIT_PERMANENT
    assert "failed (permanent): setting train.epochs" in capsys.readouterr().err


def test_a_bug_keeps_its_traceback_and_is_retried(monkeypatch) -> None:
    monkeypatch.setattr(cli, "step_function", lambda name: lambda ctx: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main(["step", "ingest", "--run-id", "r1", "--logical-date", "2013-06-03"])
    assert failure_class(1, ["Traceback ...", "ZeroDivisionError"]) == "transient"


def _operator(tmp_path: Path, code: str) -> LocalStepOperator:
    script = tmp_path / "step.py"
    script.write_text(code)
    return LocalStepOperator(task_id="x", step="train", argv=[sys.executable, str(script)])


def test_local_tasks_fail_at_once_on_permanent_and_retry_the_rest(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    permanent = _operator(tmp_path, "import sys; sys.exit(2)")
    with pytest.raises(AirflowFailException, match="not retried"):
        permanent.execute(context={})
    # torchrun exits 1 whatever its worker's code: the failure line decides
    under_torchrun = _operator(
        tmp_path,
        "import sys; print('trainyard step train failed (permanent): no training rows', "
        "file=sys.stderr); sys.exit(1)",
    )
    with pytest.raises(AirflowFailException, match="no training rows"):
        under_torchrun.execute(context={})
    for code in (f"import sys; sys.exit({EXIT_TRANSIENT})", "import os; os.kill(os.getpid(), 9)"):
        with pytest.raises(AirflowException, match="will be retried") as raised:
            _operator(tmp_path, code).execute(context={})
        assert not isinstance(raised.value, AirflowFailException)


def _pod(code: int, message: str = "") -> SimpleNamespace:
    terminated = SimpleNamespace(exit_code=code, message=message)
    status = SimpleNamespace(name="base", state=SimpleNamespace(terminated=terminated))
    return SimpleNamespace(status=SimpleNamespace(container_statuses=[status]))


def test_a_pod_keeps_the_class_of_its_step(monkeypatch, make_settings) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from pipeline_steps.orchestration import step_task

    assert pod_outcome(_pod(2, "x"), "base") == (2, "x")

    def failed(self, pod, remote_pod, *args, **kwargs):
        raise AirflowException("Pod trainyard-validate returned a failure.")

    monkeypatch.setattr(KubernetesPodOperator, "cleanup", failed)
    task = step_task("validate", make_settings("orchestration.runtime=kubernetes"))
    line = "trainyard step validate failed (permanent): suite failed"
    with pytest.raises(AirflowFailException, match="suite failed"):
        task.cleanup(None, _pod(2, line))
    with pytest.raises(AirflowException, match="will be retried") as preempted:
        task.cleanup(None, _pod(137))
    assert not isinstance(preempted.value, AirflowFailException)
