"""trainyard: an Apache Airflow 3 pipeline that retrains, evaluates and promotes ML models."""

__version__ = "0.1.0"
