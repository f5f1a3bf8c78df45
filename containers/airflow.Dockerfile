# Airflow 3 with trainyard installed, for docker-compose.yaml: the CeleryExecutor's workers run
# the steps as local subprocesses (runtime local) against the object store, PostgreSQL and the
# MLflow server.
#
#   docker build -f containers/airflow.Dockerfile -t trainyard-airflow:0.1.0 .
#
# Without a registry: BASE_IMAGE=trainyard-airflow-base:3.3.2 (containers/airflow-base.Dockerfile)
# and a torch wheel in containers/wheels/, installed instead of downloading one
# (scripts/offline-images.sh builds both).
ARG BASE_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${BASE_IMAGE}

# The dependencies first, from pyproject.toml alone (an empty package and README stand in for
# the code and the docs), so that a change to either rebuilds only the last layers.
USER root
RUN mkdir -p /opt/trainyard/pipeline_steps /tmp/wheels \
 && touch /opt/trainyard/pipeline_steps/__init__.py /opt/trainyard/README.md \
 && chown -R airflow:0 /opt/trainyard
COPY --chown=airflow:0 pyproject.toml /opt/trainyard/
COPY containers/wheels/ /tmp/wheels/
USER airflow
# apache-airflow pinned to the image's own version (AIRFLOW_VERSION) so that installing trainyard
# never moves it; the Celery provider runs the workers; [production] brings the PostgreSQL,
# Redis and object-store clients. The torch installed first stays: the dependencies would
# otherwise swap a CPU build for PyPI's CUDA one. trainyard is installed editable, so the code
# copied below is what runs.
RUN if ls /tmp/wheels/torch-*.whl > /dev/null 2>&1; \
      then pip install --no-cache-dir /tmp/wheels/torch-*.whl; \
      else pip install --no-cache-dir "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu; fi \
 && python -c "from importlib.metadata import version; print('torch==' + version('torch'))" \
      > /tmp/torch.txt \
 && pip install --no-cache-dir --constraint /tmp/torch.txt "apache-airflow==${AIRFLOW_VERSION}" \
      apache-airflow-providers-celery -e "/opt/trainyard[production]" \
 && rm -rf /tmp/torch.txt /opt/trainyard/pipeline_steps/__init__.py \
 && mkdir -p -m 700 /opt/airflow/auth
COPY --chown=airflow:0 README.md /opt/trainyard/
COPY --chown=airflow:0 pipeline_steps /opt/trainyard/pipeline_steps
COPY --chown=airflow:0 dags /opt/trainyard/dags
COPY --chown=airflow:0 examples /opt/trainyard/examples
# the examples' domain packages, installed as a team installs its own
RUN pip install --no-cache-dir --no-deps -e /opt/trainyard/examples/flight_delay \
      -e /opt/trainyard/examples/hotel_rates
COPY --chown=airflow:0 containers/airflow_init.py containers/airflow_health.py /opt/trainyard/containers/
# No TRAINYARD_* setting of a domain here: the environment reaches every domain's steps. The
# default domain is the flights example's settings file (a step of another domain names its own
# with --config); the examples' paths are relative to /opt/trainyard, where the tasks run.
ENV TRAINYARD_CONFIG=/opt/trainyard/examples/flight_delay/settings.yaml
WORKDIR /opt/trainyard
