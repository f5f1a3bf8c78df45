#!/usr/bin/env bash
# Runs the hotel-rates example (a regression of a resort hotel's daily room rate, brought from
# outside the package: examples/hotel_rates) through its real DAG, hotel_rate_training, for two
# consecutive days on the embedded default, and prints what each run did.
# Called by `make demo-hotel-rates`.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=examples/hotel_rates/settings.yaml
FIRST=2017-05-01
SECOND=2017-05-02
LOGS="$TRAINYARD_HOME/logs"
mkdir -p "$LOGS"

if ! python -c "import hotel_rates.domain" 2> /dev/null; then
  echo "the hotel_rates package is not installed: pip install -e examples/hotel_rates" >&2
  exit 1
fi

echo "==> loading history: bookings arriving 2017-03-21..2017-04-30 ingested and validated (the first training window)"
trainyard seed --config "$CONFIG" --start 2017-03-21 --end 2017-04-30 > "$LOGS/hotel-seed.log" 2>&1 \
  || { tail -30 "$LOGS/hotel-seed.log"; exit 1; }

for day in "$FIRST" "$SECOND"; do
  echo "==> airflow dags test hotel_rate_training $day   (log: $LOGS/hotel-dag-$day.log)"
  if ! airflow dags test hotel_rate_training "$day" > "$LOGS/hotel-dag-$day.log" 2>&1 \
     || ! grep -q "DagRun Finished.*state=success" "$LOGS/hotel-dag-$day.log"; then
    echo "the run for $day failed; the task errors:" >&2
    grep -E "trainyard step .* failed|ERROR|exited with code" "$LOGS/hotel-dag-$day.log" | tail -20 >&2
    exit 1
  fi
  python scripts/demo_run_note.py hotel_rate_training "$day" >> "$LOGS/hotel-dag-$day.log" 2>&1
done

echo
trainyard report --config "$CONFIG" --logical-date "$FIRST"
trainyard report --config "$CONFIG" --logical-date "$SECOND"
cat <<MSG
What to open next:
  make airflow   Airflow UI on http://localhost:8080: trigger hotel_rate_training for 2017-05-03
                 and follow its task logs and XComs (these runs' logs: $LOGS/hotel-dag-<date>.log)
  make mlflow    MLflow UI on http://localhost:5000 (experiment hotel_rate_training, registered
                 model hotel_rate with its champion and challenger aliases)
  trainyard report --config $CONFIG --champion   every move of the champion alias, and why
What the example brings (nothing of it in pipeline_steps/): examples/hotel_rates/README.md
Evaluation reports: $TRAINYARD_HOME/lake/hotel_rate/reports/evaluation/date=<date>/run=<run>/index.html
MSG
