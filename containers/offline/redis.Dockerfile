# Stands in for `redis:7` where no image registry is reachable: Debian's Redis 7 with the official
# image's layout that docker-compose.yaml uses (the `redis` user, data in /data, `redis-cli`).
ARG BASE_IMAGE=trainyard-base:bookworm
FROM ${BASE_IMAGE}

# the official image's uid and gid (999), so a volume keeps its owner across rebuilds
RUN groupadd --system --gid 999 redis \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/redis --shell /usr/sbin/nologin \
       redis \
    && apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && mkdir /data && chown redis:redis /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server"]
