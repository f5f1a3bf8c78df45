"""What the Spark engine refuses before a cluster's executors could trip on it, and the
properties that let them read the object store the driver reads."""

from __future__ import annotations

import socket

import pytest

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import EngineSettings
from pipeline_steps.engines.spark_storage import check_cluster, s3a_properties, spark_url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_master_no_one_answers_at_is_named() -> None:
    master = f"spark://127.0.0.1:{_free_port()}"
    settings = EngineSettings(name="spark", spark_master=master, spark_dir="s3://lake/spark")
    with pytest.raises(StepError, match=rf"engine.spark_master {master}: no Spark master answers"):
        check_cluster(settings)


def test_a_scratch_folder_on_the_drivers_disk_is_refused_for_a_cluster(tmp_path) -> None:
    with socket.socket() as master:
        master.bind(("127.0.0.1", 0))
        master.listen()
        url = f"spark://127.0.0.1:{master.getsockname()[1]}"
        for spark_dir in ("", str(tmp_path)):
            settings = EngineSettings(name="spark", spark_master=url, spark_dir=spark_dir)
            with pytest.raises(StepError, match=r"engine.spark_dir .*do not share the driver's"):
                check_cluster(settings)
    # local mode: executors are the driver's threads, any folder does
    check_cluster(EngineSettings(name="spark", spark_master="local[2]", spark_dir=str(tmp_path)))


def test_the_engine_refuses_a_lake_path_on_the_drivers_disk_on_a_cluster() -> None:
    from pipeline_steps.engines.spark import SparkEngine

    cluster = SparkEngine(None, EngineSettings(name="spark", spark_master="spark://h:7077"))
    with pytest.raises(StepError, match=r"lake.root /srv/lake/x.parquet: a path on the driver's"):
        cluster.shared("/srv/lake/x.parquet", "lake.root")
    assert cluster.shared("s3://lake/x.parquet", "lake.root") == "s3a://lake/x.parquet"
    local = SparkEngine(None, EngineSettings(name="spark", spark_master="local[2]"))
    assert local.shared("/srv/lake/x.parquet", "lake.root") == "/srv/lake/x.parquet"


def test_s3a_properties_carry_the_drivers_endpoint_and_keys(tmp_path) -> None:
    (tmp_path / "hadoop-aws-3.3.1.jar").write_bytes(b"")
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    settings = EngineSettings(name="spark")
    props = s3a_properties(settings, env, jars_dir=tmp_path)
    assert props["spark.jars"] == str(tmp_path / "hadoop-aws-3.3.1.jar")
    assert props["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert props["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert props["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert props["spark.hadoop.fs.s3a.access.key"] == "id"
    # the 3.3 connector cannot read the newer client's durations ("60s")
    assert props["spark.hadoop.fs.s3a.threads.keepalivetime"] == "60"
    # jars of the user's own: theirs, no compatibility settings of ours
    own = EngineSettings(name="spark", spark_conf={"spark.jars.packages": "org.apache.hadoop:x"})
    mine = s3a_properties(own, env, jars_dir=tmp_path)
    assert "spark.jars" not in mine and "spark.hadoop.fs.s3a.threads.keepalivetime" not in mine
    assert spark_url("s3://b/k") == "s3a://b/k" and spark_url("/x") == "/x"
