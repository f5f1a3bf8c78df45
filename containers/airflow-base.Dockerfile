# Airflow from PyPI on the Debian base of scripts/base-image.sh, for machines that reach no image
# registry (the compose profile's default is the public apache/airflow image). Laid out where
# containers/airflow.Dockerfile and docker-compose.yaml rely on that image: the `airflow` user
# (uid 50000, group 0), AIRFLOW_HOME=/opt/airflow with its logs/ (a fresh named volume mounted
# there takes its owner from the image), AIRFLOW_VERSION set, `airflow` and `python`
# on PATH, pip installing as that user.
#
#   scripts/base-image.sh
#   docker build -f containers/airflow-base.Dockerfile -t trainyard-airflow-base:3.3.2 containers/
#   docker build -f containers/airflow.Dockerfile \
#     --build-arg BASE_IMAGE=trainyard-airflow-base:3.3.2 -t trainyard-airflow:0.1.0 .
ARG BASE_IMAGE=trainyard-base:bookworm
FROM ${BASE_IMAGE}

ARG AIRFLOW_VERSION=3.3.2
ENV AIRFLOW_VERSION=${AIRFLOW_VERSION} \
    AIRFLOW_HOME=/opt/airflow \
    PATH=/home/airflow/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# dumb-init as the first process, as in the public image: it forwards signals and reaps the
# steps' orphaned processes (DUMB_INIT_SETSID=0 lets Celery finish its tasks on stop)
RUN apt-get update \
    && apt-get install -y --no-install-recommends dumb-init \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && useradd --uid 50000 --gid 0 --create-home --home-dir /home/airflow airflow \
    && mkdir -p /opt/airflow/logs /opt/airflow/dags /opt/airflow/plugins /opt/airflow/config \
    && chown -R 50000:0 /opt/airflow \
    && chmod -R 775 /opt/airflow
USER airflow
WORKDIR /opt/airflow
RUN python3 -m venv /home/airflow/venv \
    && pip install --upgrade pip \
    && pip install "apache-airflow==${AIRFLOW_VERSION}"
ENTRYPOINT ["/usr/bin/dumb-init", "--"]
CMD ["airflow", "--help"]
