from pipeline_steps.report import summarise


def test_summary_says_what_each_step_decided() -> None:
    run = {
        "ingest": {"run_id": "r1", "logical_date": "2013-06-02", "rows": 911},
        "validate": {
            "verdict": "passed",
            "datasets": {"flights": {"evaluated": 53}},
            "drift": {
                "drift_detected": True,
                "crossed": ["weather.temp"],
                "reference": "champion training window",
                "report": "d.html",
            },
        },
        "features": {
            "sets": {"train": {"rows": 100}, "holdout": {"rows": 10}},
            "train_days": ["2013-06-01"],
            "holdout_day": "2013-06-02",
        },
        "train": {
            "epochs": 2,
            "metrics": {"val_auc": 0.7, "val_loss": 0.4},
            "mlflow_run_id": "abc",
        },
        "evaluate": {
            "challenger": {"metrics": {"auc": 0.7, "log_loss": 0.4, "accuracy": 0.8}},
            "champion": {
                "version": "1",
                "metrics": {"auc": 0.72, "log_loss": 0.4, "accuracy": 0.8},
            },
        },
        "promote": {
            "decision": "rejected",
            "reasons": ["challenger AUC 0.7000 < floor"],
            "registered_model": "flight_delay",
            "version": "2",
            "champion_after": "1",
        },
    }
    text = "\n".join(summarise(run))
    assert "rows ingested        911 flights" in text
    assert "drift                detected on weather.temp (champion training window" in text
    assert "champion             v1: auc 0.7200" in text
    assert "REJECTED: challenger AUC 0.7000 < floor" in text
    assert "flight_delay version 2; champion is now version 1" in text
