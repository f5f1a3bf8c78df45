# Stands in for `postgres:16` where no image registry is reachable: Debian's PostgreSQL 15 with
# the environment and layout of the official image that docker-compose.yaml uses
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, /docker-entrypoint-initdb.d/*.sql run once on
# an empty data directory, data in /var/lib/postgresql/data, `pg_isready` on PATH).
ARG BASE_IMAGE=trainyard-base:bookworm
FROM ${BASE_IMAGE}

# the official image's uid and gid (999), so a volume keeps its owner across rebuilds; no cluster
# of the package's own: the entrypoint makes one in the volume
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/postgresql --shell /bin/bash \
       postgres \
    && mkdir -p /etc/postgresql-common/createcluster.d \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/no-main.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && mkdir -p /var/lib/postgresql/data /docker-entrypoint-initdb.d /run/postgresql \
    && chown postgres:postgres /var/lib/postgresql/data /run/postgresql \
    && chmod 700 /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
