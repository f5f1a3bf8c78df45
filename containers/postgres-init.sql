-- One database per service (the Airflow database is created by POSTGRES_DB).
CREATE DATABASE mlflow;
CREATE DATABASE optuna;
CREATE DATABASE feast_registry;
