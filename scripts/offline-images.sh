#!/usr/bin/env bash
# Every image the production profile runs, built where no image registry is reachable: the
# Debian base (scripts/base-image.sh), the step and Airflow images on it, and the stand-ins for
# postgres, redis, MinIO, Prometheus and its Pushgateway that containers/offline/compose.yaml
# names. Docker's layer cache keeps what has not changed, so a second run rebuilds only the code
# layers; an image whose inputs (its Dockerfile, build arguments, base image and the files it
# copies) hash as they did when the engine's image was built, labelled org.trainyard.inputs, is
# not rebuilt at all.
#
#   scripts/offline-images.sh          # then: docker compose -f docker-compose.yaml \
#                                      #   -f containers/offline/compose.yaml up -d --no-build
#
# The step and Airflow images install a torch wheel put in containers/wheels/. When there is
# none, a CPU wheel of torch 2.13.0 for Python 3.11 that pip's configured --find-links hold is
# copied there (pip download --no-index); with none there either, the images download torch from
# the PyTorch CPU index as they build. Needs a running engine (scripts/container-engine.sh) and,
# for the base image's debootstrap, root.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=trainyard-base:bookworm
AIRFLOW_BASE=trainyard-airflow-base:3.3.2
PYTHON="${PYTHON:-$(command -v .venv/bin/python || command -v python3.11 || command -v python3)}"

scripts/base-image.sh
if ! compgen -G "containers/wheels/torch-*.whl" > /dev/null \
  && "$PYTHON" -m pip download --quiet --no-index --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 \
    --dest containers/wheels "torch==2.13.0+cpu" 2> /dev/null; then
  echo "==> $(basename containers/wheels/torch-*.whl) into containers/wheels/"
fi

LABEL=org.trainyard.inputs

copied() { # the context paths a Dockerfile's COPY instructions take (not those --from a stage)
  awk 'toupper($1) == "COPY" && !/--from=/ {
         n = 0; for (i = 2; i <= NF; i++) if ($i !~ /^--/) args[++n] = $i
         for (i = 1; i < n; i++) print args[i]
       }' "$1"
}

inputs() { # the hash of what an image is made of: its Dockerfile, build arguments, base image
  # and every file its COPY instructions take from the context (as .dockerignore leaves them)
  local file="$1" context="$2" base="$3"
  shift 3
  {
    printf '%s\n' "$file" "$@"
    docker image inspect --format '{{.Id}}' "$base" 2> /dev/null || echo "no $base"
    cat "$file"
    local src
    for src in $(copied "$file"); do
      find "$context/$src" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
        ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
    done
  } | sha256sum | cut -c1-16
}

build() { # tag, dockerfile, context, extra arguments
  local tag="$1" file="$2" context="$3"
  shift 3
  local base="${BASE_FOR:-$BASE}"
  local hash
  hash="$(inputs "$file" "$context" "$base" "$@")"
  # Nothing to do when the engine holds an image built from exactly these inputs.
  if [[ "$(docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$tag" \
    2> /dev/null)" == "$hash" ]]; then
    echo "==> $tag: inputs unchanged ($LABEL=$hash), kept"
    return 0
  fi
  local started=$SECONDS
  echo "==> $tag ($LABEL=$hash)"
  local log
  log="$(mktemp)"
  docker build --build-arg "BASE_IMAGE=$base" --label "$LABEL=$hash" -f "$file" -t "$tag" "$@" \
    "$context" > "$log" 2>&1 || { tail -40 "$log"; rm -f "$log"; return 1; }
  rm -f "$log"
  echo "    $(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'), $((SECONDS - started)) s"
}

build trainyard-offline-postgres:15 containers/offline/postgres.Dockerfile containers/offline
build trainyard-offline-redis:7 containers/offline/redis.Dockerfile containers/offline
build trainyard-offline-s3:5 containers/offline/s3.Dockerfile containers/offline
build trainyard-offline-prometheus:2 containers/offline/prometheus.Dockerfile containers/offline
build "$AIRFLOW_BASE" containers/airflow-base.Dockerfile containers/offline # copies nothing
build trainyard-step:0.1.0 containers/Dockerfile .
BASE_FOR="$AIRFLOW_BASE" build trainyard-airflow:0.1.0 containers/airflow.Dockerfile .
