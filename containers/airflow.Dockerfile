# Airflow 3 with trainyard installed, for docker-compose.yaml: the CeleryExecutor's workers run
# the steps as local subprocesses (runtime local) against the object store, PostgreSQL and the
# MLflow server.
#
#   docker build -f containers/airflow.Dockerfile -t trainyard-airflow:0.1.0 .
#
# Without a registry: BASE_IMAGE=trainyard-airflow-base:3.3.2 (containers/airflow-base.Dockerfile)
# and a torch wheel in containers/wheels/, installed instead of downloading one.
ARG BASE_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${BASE_IMAGE}

USER root
COPY --chown=airflow:0 . /opt/trainyard
USER airflow
# apache-airflow pinned to the image's own version (AIRFLOW_VERSION) so that installing trainyard
# never moves it; the Celery provider runs the workers; [production] brings the PostgreSQL,
# Redis and object-store clients.
# The torch installed first stays: the dependencies would otherwise swap a CPU build for PyPI's
# CUDA one.
RUN if ls /opt/trainyard/containers/wheels/torch-*.whl > /dev/null 2>&1; \
      then pip install --no-cache-dir /opt/trainyard/containers/wheels/torch-*.whl; \
      else pip install --no-cache-dir "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu; fi \
 && python -c "from importlib.metadata import version; print('torch==' + version('torch'))" \
      > /tmp/torch.txt \
 && pip install --no-cache-dir --constraint /tmp/torch.txt "apache-airflow==${AIRFLOW_VERSION}" \
      apache-airflow-providers-celery -e "/opt/trainyard[production]" \
 && mkdir -p -m 700 /opt/airflow/auth
ENV TRAINYARD_VALIDATION__EXPECTATIONS_DIR=/opt/trainyard/expectations \
    TRAINYARD_FEATURES__FEATURE_REPO=/opt/trainyard/feature_repo
