# Airflow 3 with trainyard installed, for docker-compose: the scheduler runs the steps as local
# subprocesses (runtime local) against the shared lake volume, Postgres and the MLflow server.
FROM apache/airflow:3.3.2-python3.11

USER root
COPY --chown=airflow:0 . /opt/trainyard
USER airflow
RUN pip install --no-cache-dir "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir -e "/opt/trainyard[production]"
ENV TRAINYARD_VALIDATION__EXPECTATIONS_DIR=/opt/trainyard/expectations \
    TRAINYARD_FEATURES__FEATURE_REPO=/opt/trainyard/feature_repo
