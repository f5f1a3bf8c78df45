-- One database per component, all owned by the `trainyard` role (POSTGRES_USER, whose password
-- is TRAINYARD_DB_PASSWORD). POSTGRES_DB creates `airflow`. Runs once, on an empty volume.
CREATE DATABASE mlflow OWNER trainyard;
CREATE DATABASE mlflow_auth OWNER trainyard;
CREATE DATABASE optuna OWNER trainyard;
CREATE DATABASE feast OWNER trainyard;
