# Stands in for `prom/prometheus` and `prom/pushgateway` where no image registry is reachable:
# Debian's `prometheus` (2.42) and `prometheus-pushgateway` packages, as the production profile
# on one machine runs them (scripts/prometheus.sh). One image for both services:
# containers/offline/compose.yaml gives each its entrypoint. Like the official images: the
# `nobody` user, `wget` for the health checks, the database in /prometheus.
ARG BASE_IMAGE=trainyard-base:bookworm
FROM ${BASE_IMAGE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus prometheus-pushgateway wget \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && mkdir /prometheus /pushgateway && chown nobody:nogroup /prometheus /pushgateway
WORKDIR /prometheus
USER nobody
EXPOSE 9090 9091
ENTRYPOINT ["prometheus"]
