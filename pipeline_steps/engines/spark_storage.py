"""Where a Spark application's files live when its executors run on other machines.

In ``local[*]`` the executors are threads of the step's process and read what the driver writes
anywhere. On a cluster (``spark://``, ``k8s://``) they share no disk with the driver: the lake,
``engine.spark_dir`` (the entity rows, the Feast offline sources and the joined rows the step
writes) and every intermediate file live on object storage, read by Spark through Hadoop's
``s3a://`` file system and by the driver through fsspec (``s3://``). The same object has both
names; :func:`spark_url` gives Spark's.

Hadoop's S3 connector is not part of the pyspark wheel. ``make venv`` puts ``hadoop-aws`` and
the AWS SDK it was built against under ``<venv>/share/trainyard/spark-jars``
(:mod:`pipeline_steps.engines.s3a_jars`); any other jars, e.g. a ``hadoop-aws`` matching the
cluster's Hadoop, can be given instead through ``engine.spark_conf`` (``spark.jars`` or
``spark.jars.packages``). The connector reads the endpoint and credentials the driver's fsspec
reads: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import EngineSettings

JARS_DIR = Path(sys.prefix) / "share" / "trainyard" / "spark-jars"
OBJECT_SCHEMES = ("s3://", "s3a://")
_HADOOP_AWS_3_3 = "hadoop-aws-3.3."

# hadoop-aws 3.3 reads these as plain numbers; the Hadoop 3.4+ client that pyspark 4 ships
# defaults them with units ("60s"), which 3.3's connector cannot parse.
_UNITLESS_S3A_DEFAULTS = {
    "fs.s3a.connection.timeout": "200000",  # ms
    "fs.s3a.connection.establish.timeout": "30000",  # ms
    "fs.s3a.threads.keepalivetime": "60",  # s
    "fs.s3a.multipart.purge.age": "86400",  # s
}
# the environment the driver's fsspec and the executors' Python workers read S3 and MLflow by
EXECUTOR_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_REGISTRY_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_S3_ENDPOINT_URL",
)


def is_object_url(path: str) -> bool:
    return path.startswith(OBJECT_SCHEMES)


CLUSTER_MASTERS = ("spark://", "k8s://", "yarn", "mesos://")


def is_cluster(master: str) -> bool:
    """Whether executors run outside the driver's process: a standalone, Kubernetes, YARN or
    Mesos master (``local`` is the driver's own threads; Spark refuses any other)."""
    return master.startswith(CLUSTER_MASTERS)


def spark_url(path: str) -> str:
    """``path`` as Spark names it: ``s3://`` objects through Hadoop's ``s3a://``."""
    return "s3a://" + path[len("s3://") :] if path.startswith("s3://") else path


def fsspec_url(path: str) -> str:
    """``path`` as the driver's fsspec names it: ``s3a://`` objects as ``s3://``."""
    return "s3://" + path[len("s3a://") :] if path.startswith("s3a://") else path


def bundled_jars(folder: Path = JARS_DIR) -> list[Path]:
    return sorted(folder.glob("*.jar")) if folder.is_dir() else []


def s3a_properties(
    settings: EngineSettings,
    environ: Mapping[str, str] | None = None,
    jars_dir: Path | None = None,
) -> dict[str, str]:
    """The Spark properties that let driver and executors read and write ``s3a://``: the jars
    (trainyard's unless ``engine.spark_conf`` names its own), the endpoint and credentials of
    the environment. Empty when no jar provides the connector."""
    env = os.environ if environ is None else environ
    own = "spark.jars" in settings.spark_conf or "spark.jars.packages" in settings.spark_conf
    jars = [] if own else bundled_jars(jars_dir or JARS_DIR)
    if not own and not jars:
        return {}
    props: dict[str, str] = {}
    if jars:
        props["spark.jars"] = ",".join(str(j) for j in jars)
        if any(j.name.startswith(_HADOOP_AWS_3_3) for j in jars):
            props.update({f"spark.hadoop.{k}": v for k, v in _UNITLESS_S3A_DEFAULTS.items()})
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        props["spark.hadoop.fs.s3a.endpoint"] = endpoint
        props["spark.hadoop.fs.s3a.path.style.access"] = "true"
        props["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            endpoint.startswith("https://")
        ).lower()
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        props["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
        props["spark.hadoop.fs.s3a.access.key"] = env["AWS_ACCESS_KEY_ID"]
        props["spark.hadoop.fs.s3a.secret.key"] = env["AWS_SECRET_ACCESS_KEY"]
    region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION")
    if region:
        props["spark.hadoop.fs.s3a.endpoint.region"] = region
    return props


def cluster_properties(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a cluster's executors need besides: the S3 and MLflow variables the driver has
    (``spark.executorEnv.*``), so that their Python workers read the same store and registry;
    shuffle blocks fetched from the executor that wrote them, never read from its disk by
    another executor on the same host (two workers of one machine do not share their disks
    either)."""
    env = os.environ if environ is None else environ
    return {
        **{f"spark.executorEnv.{k}": env[k] for k in EXECUTOR_ENV if env.get(k)},
        "spark.shuffle.readHostLocalDisk": "false",
    }


def check_cluster(settings: EngineSettings) -> None:
    """Refuse, naming the setting, what a cluster's executors could not reach: a master no one
    answers at, a scratch folder on the driver's own disk, an object store that refuses the
    credentials. Nothing to check in ``local`` mode; the engine refuses a lake path on the
    driver's disk when it is handed one."""
    master = settings.spark_master
    if not is_cluster(master):
        return
    if master.startswith("spark://"):
        _check_master(master)
    if not is_object_url(settings.spark_dir):
        shown = settings.spark_dir or "(empty: a temporary folder on the driver)"
        raise StepError(
            f"engine.spark_dir {shown}: the executors of {master} do not share the driver's "
            "disk; give an s3:// folder every executor can read"
        )
    if (
        not bundled_jars()
        and "spark.jars" not in settings.spark_conf
        and ("spark.jars.packages" not in settings.spark_conf)
    ):
        raise StepError(
            f"engine.spark_master {master}: Spark has no s3a:// connector; run `make venv` "
            f"(it puts hadoop-aws under {JARS_DIR}) or name one in engine.spark_conf spark.jars"
        )
    _check_store(settings.spark_dir, "engine.spark_dir")


def _check_master(master: str) -> None:
    for address in master[len("spark://") :].split(","):
        parts = urlsplit(f"//{address}")
        host, port = parts.hostname or "", parts.port or 7077
        try:
            with socket.create_connection((host, port), timeout=5):
                return
        except OSError as exc:
            reason = exc
    raise StepError(
        f"engine.spark_master {master}: no Spark master answers at {address} ({reason})"
    )


def _check_store(url: str, setting: str) -> None:
    import fsspec

    target = fsspec_url(url)
    try:
        fs, path = fsspec.core.url_to_fs(target)
        fs.ls(path.split("/", 1)[0], detail=False)
    except PermissionError as exc:
        raise StepError(
            f"{setting} {url}: the object store refused the credentials "
            f"(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY): {exc}"
        ) from exc
    except FileNotFoundError as exc:
        raise StepError(f"{setting} {url}: no such bucket: {exc}") from exc
    except OSError as exc:
        raise StepError(f"{setting} {url}: the object store did not answer: {exc}") from exc
