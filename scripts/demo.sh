#!/usr/bin/env bash
# Runs the real flight_delay_training DAG for two consecutive days on the embedded default
# (SQLite, local files, local runner) and prints what each run did. Called by `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The flights example's settings, as the Makefile names them, when run on its own.
export TRAINYARD_CONFIG="${TRAINYARD_CONFIG:-$PWD/examples/flight_delay/settings.yaml}"

FIRST=2013-06-02
SECOND=2013-06-03
LOGS="$TRAINYARD_HOME/logs"
mkdir -p "$LOGS"

echo "==> loading history: flights of 2013-05-04..2013-06-01 ingested and validated (the first training window)"
trainyard seed --start 2013-05-04 --end 2013-06-01 > "$LOGS/seed.log" 2>&1 \
  || { tail -30 "$LOGS/seed.log"; exit 1; }

for day in "$FIRST" "$SECOND"; do
  echo "==> airflow dags test flight_delay_training $day   (log: $LOGS/dag-$day.log)"
  if ! airflow dags test flight_delay_training "$day" > "$LOGS/dag-$day.log" 2>&1 \
     || ! grep -q "DagRun Finished.*state=success" "$LOGS/dag-$day.log"; then
    echo "the run for $day failed; the task errors:" >&2
    grep -E "trainyard step .* failed|ERROR|exited with code" "$LOGS/dag-$day.log" | tail -20 >&2
    exit 1
  fi
  python scripts/demo_run_note.py flight_delay_training "$day" >> "$LOGS/dag-$day.log" 2>&1
done

echo
trainyard report --logical-date "$FIRST"
trainyard report --logical-date "$SECOND"
cat <<MSG
What to open next:
  make airflow   Airflow UI on http://localhost:8080: trigger flight_delay_training for 2013-06-04,
                 then 06-05, and follow their task logs and XComs (these runs' logs:
                 $LOGS/dag-<date>.log); a challenger that passes the gate is staged (06-05's
                 is): trigger flight_delay_drift_monitor for 2013-06-06..08 and its release step
                 decides on those shadow days
                 (docs/champion.md, the release path)
  make mlflow    MLflow UI on http://localhost:5000 (experiment flight_delay_training,
                 registered model flight_delay with its champion and challenger aliases; each
                 version's description says why it was or was not promoted)
  trainyard report --champion      every move of the champion alias, and why
  trainyard predict --logical-date 2013-06-03   the champion's probabilities from the online store
Evaluation reports: $TRAINYARD_HOME/lake/flight_delay/reports/evaluation/date=<date>/run=<run>/index.html
Artifacts: $TRAINYARD_HOME/lake/flight_delay (the domain's folder of the lake: partitions, reports, training sets, runs/<run>/lineage.json)
MSG
