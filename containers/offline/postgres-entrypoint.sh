#!/bin/sh
# The official postgres image's start-up, as much of it as docker-compose.yaml uses: on an empty
# data directory, initdb with POSTGRES_USER / POSTGRES_PASSWORD (password auth over TCP),
# POSTGRES_DB created and /docker-entrypoint-initdb.d/*.sql run against it; then the server.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  password_file="$(mktemp)"
  trap 'rm -f "$password_file"' EXIT
  printf '%s\n' "$POSTGRES_PASSWORD" > "$password_file"
  initdb --username="$POSTGRES_USER" --pwfile="$password_file" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 > /dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  # a server on the socket only while the databases are made
  pg_ctl --wait --silent -o "-c listen_addresses=''" start
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres --quiet \
      -c "CREATE DATABASE \"$POSTGRES_DB\""
  fi
  for script in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$script" ] || continue
    echo "running $script"
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" --quiet \
      -f "$script"
  done
  pg_ctl --wait --silent -m fast stop
fi

if [ "${1:-}" = postgres ]; then
  shift
  exec postgres -c listen_addresses='*' "$@"
fi
exec "$@"
