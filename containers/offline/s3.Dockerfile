# Stands in for MinIO where no image registry is reachable: moto's S3 server from PyPI, as the
# production profile on one machine runs it (`trainyard services up`). It keeps everything in
# memory: a restart of the `s3` service loses the lake and the models' artifacts.
ARG BASE_IMAGE=trainyard-base:bookworm
FROM ${BASE_IMAGE}

ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv && pip install "moto[server]>=5,<6"
USER 10001
EXPOSE 9000
CMD ["moto_server", "-H", "0.0.0.0", "-p", "9000"]
