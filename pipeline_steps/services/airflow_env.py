"""What the Airflow CLI needs to see the deployment's DAGs on the embedded default, wherever it
runs: ``eval "$(trainyard airflow-env)"`` in a shell, then ``airflow dags list``, ``airflow
standalone`` or any other ``airflow`` command. ``make airflow`` starts Airflow with exactly this
environment.

Each value is the environment's own when set (``TRAINYARD_HOME``, ``TRAINYARD_CONFIG``, a DAG
folder, a domains folder), else the embedded default's:

- ``TRAINYARD_HOME`` (``./.trainyard``) and ``AIRFLOW_HOME`` (``$TRAINYARD_HOME/airflow``);
- ``TRAINYARD_CONFIG``, the default domain, when set (unset, the shipped examples are the
  domains, as ``orchestration.example_domains`` gives them);
- the DAG folder (the project's ``dags/``), the domains folder (``--domains``: a folder of
  settings files or of domain folders, each of the latter put on ``PYTHONPATH``, as
  ``trainyard init-domain`` writes them);
- the LocalExecutor, no Airflow examples, the ``admin`` user, and the API server's port
  (``--port``), which the tasks reach the Execution API on too;
- the venv's ``bin/`` first on ``PATH`` (the steps run its ``trainyard``).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from pipeline_steps.core.settings import PROJECT_ROOT, SettingsError, trainyard_home

DEFAULT_PORT = 8080
DOMAINS_DIR = "TRAINYARD_ORCHESTRATION__DOMAINS_DIR"


def airflow_environment(
    environ: Mapping[str, str] | None = None,
    *,
    port: int | None = None,
    dags: str | Path | None = None,
    domains: str | Path | None = None,
) -> dict[str, str]:
    """The variables, in the order they are printed. ``SettingsError`` for a port out of
    range or a DAG or domains folder that is not one."""
    environ = os.environ if environ is None else environ
    if port is None:
        given = environ.get("AIRFLOW__API__PORT", str(DEFAULT_PORT))
        if not given.isdigit():
            raise SettingsError(f"AIRFLOW__API__PORT {given!r}: a TCP port is 1 to 65535")
        port = int(given)
    if not 1 <= port <= 65535:
        raise SettingsError(f"--port {port}: a TCP port is 1 to 65535")
    home = trainyard_home(environ)
    dag_folder = _folder(
        "--dags", dags or environ.get("AIRFLOW__CORE__DAGS_FOLDER") or PROJECT_ROOT / "dags"
    )
    env = {
        "TRAINYARD_HOME": str(home),
        "AIRFLOW_HOME": environ.get("AIRFLOW_HOME") or str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dag_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": environ.get("AIRFLOW__CORE__EXECUTOR") or "LocalExecutor",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": (
            environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS") or "admin:admin"
        ),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
    }
    if environ.get("TRAINYARD_CONFIG"):
        env["TRAINYARD_CONFIG"] = environ["TRAINYARD_CONFIG"]
    domain_folder = domains or environ.get(DOMAINS_DIR)
    paths = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if domain_folder:
        folder = _folder("--domains", domain_folder)
        env[DOMAINS_DIR] = str(folder)
        # a domain folder as init-domain writes it holds its package beside its settings
        packages = [str(s.parent) for s in sorted(folder.glob("*/settings.yaml"))]
        paths = [*packages, *(p for p in paths if p not in packages)]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    bin_dir = str(Path(sys.executable).parent)
    rest = [p for p in environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *rest])
    return env


def _folder(option: str, value: str | Path) -> Path:
    folder = Path(value).expanduser().resolve()
    if not folder.is_dir():
        raise SettingsError(f"{option} {folder} is not a folder")
    return folder


def shell_exports(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines a POSIX shell evaluates, each value quoted."""
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in env.items())
