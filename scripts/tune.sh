#!/usr/bin/env bash
# Runs the real flight_delay_tuning DAG on the demo's window (the training window of 2013-06-01)
# on the embedded default and prints the study. Called by `make tune`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The flights example's settings, as the Makefile names them, when run on its own.
export TRAINYARD_CONFIG="${TRAINYARD_CONFIG:-$PWD/examples/flight_delay/settings.yaml}"

DAY=2013-06-01
LOGS="$TRAINYARD_HOME/logs"
mkdir -p "$LOGS"
CONF='{"logical_date": "2013-06-01", "trials": 8, "parallel_trials": 2, "epochs": 4,
       "sampler": "tpe", "pruner": "median"}'

echo "==> loading history: flights of 2013-05-03..2013-05-31 ingested and validated (skipped when done)"
trainyard seed --start 2013-05-03 --end 2013-05-31 > "$LOGS/seed.log" 2>&1 \
  || { tail -30 "$LOGS/seed.log"; exit 1; }

echo "==> airflow dags test flight_delay_tuning $DAY   (log: $LOGS/tune-$DAY.log)"
echo "    8 trials of at most 4 epochs, TPE, median pruning: a few minutes on two cores"
if ! airflow dags test flight_delay_tuning "$DAY" --conf "$CONF" > "$LOGS/tune-$DAY.log" 2>&1 \
   || ! grep -q "DagRun Finished.*state=success" "$LOGS/tune-$DAY.log"; then
  echo "the tuning run failed; the task errors:" >&2
  grep -E "trainyard step .* failed|ERROR|exited with code" "$LOGS/tune-$DAY.log" | tail -20 >&2
  exit 1
fi
grep -oE "trial [0-9]+: (COMPLETE|PRUNED), best validation loss [0-9.]+ after [0-9]+ epoch\(s\)" \
  "$LOGS/tune-$DAY.log" | sed 's/^/    /' || true

echo
trainyard tuning
cat <<MSG
What to open next:
  make optuna    Optuna dashboard on http://localhost:8081: the study's trials, their per-epoch
                 validation loss (pruned ones stop early), parameter importances
  make mlflow    MLflow UI on http://localhost:5000, experiment flight_delay_tuning: the study's
                 run with its trials as child runs, and its plots under Artifacts
Train with the best trial's parameters: TRAINYARD_TRAIN__PARAMS_FROM=tuning make demo
(or train.params_from: tuning in your settings file).
MSG
