# Airflow 3 with trainyard installed, for docker-compose.yaml: the CeleryExecutor's workers run
# the steps as local subprocesses (runtime local) against the object store, PostgreSQL and the
# MLflow server.
FROM apache/airflow:3.3.2-python3.11

USER root
COPY --chown=airflow:0 . /opt/trainyard
USER airflow
# apache-airflow pinned to the image's own version (AIRFLOW_VERSION) so that installing trainyard
# never moves it; the Celery provider runs the workers; [production] brings the PostgreSQL,
# Redis and object-store clients.
RUN pip install --no-cache-dir "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" apache-airflow-providers-celery \
      -e "/opt/trainyard[production]" \
 && mkdir -p -m 700 /opt/airflow/auth
ENV TRAINYARD_VALIDATION__EXPECTATIONS_DIR=/opt/trainyard/expectations \
    TRAINYARD_FEATURES__FEATURE_REPO=/opt/trainyard/feature_repo
