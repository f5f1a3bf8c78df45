# trainyard — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed

# The embedded default profile: everything under .trainyard/, nothing to start.
export TRAINYARD_HOME ?= $(CURDIR)/.trainyard
export AIRFLOW_HOME ?= $(TRAINYARD_HOME)/airflow
# The default domain: the flights example's settings (pipeline_steps itself names no domain).
# Set TRAINYARD_CONFIG to make another domain's settings file the default.
export TRAINYARD_CONFIG ?= $(CURDIR)/examples/flight_delay/settings.yaml
# `make airflow DAGS=folder DOMAINS=folder`: another DAG folder; a folder of domains (settings
# files, or domain folders as `trainyard init-domain` writes them, each put on PYTHONPATH).
DAGS ?= $(CURDIR)/dags
export AIRFLOW__CORE__DAGS_FOLDER := $(abspath $(DAGS))
ifdef DOMAINS
export TRAINYARD_ORCHESTRATION__DOMAINS_DIR := $(abspath $(DOMAINS))
empty :=
space := $(empty) $(empty)
export PYTHONPATH := $(subst $(space),:,$(strip $(patsubst %/,%,$(dir $(wildcard $(abspath $(DOMAINS))/*/settings.yaml)))))$(if $(PYTHONPATH),:$(PYTHONPATH))
endif
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__EXECUTOR := LocalExecutor
# user:role (the password is generated; `make airflow` prints it)
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS ?= admin:admin
export PATH := $(BIN):$(PATH)

.PHONY: help venv airflow-db demo demo-hotel-rates tune test test-fast test-containers test-profile lint format airflow mlflow optuna notebook prod-up prod-down images clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml examples/flight_delay/pyproject.toml examples/hotel_rates/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# torch first and pinned: a CPU wheel of 2.13.0 is what the project is built and tested on.
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# Each example's domain is a package of its own, installed as a team installs theirs.
	$(BIN)/python -m pip install --quiet --no-deps -e examples/flight_delay -e examples/hotel_rates
	@# Hadoop's S3 connector for the Spark engine on a cluster (s3a://): jars no wheel carries.
	$(BIN)/python -m pipeline_steps.engines.s3a_jars > /dev/null
	@touch $(STAMP)

venv: $(STAMP) ## create .venv and install trainyard (skipped when up to date)

airflow-db: $(STAMP) ## prepare the Airflow home under .trainyard/ (SQLite metadata DB, GPU pool)
	@mkdir -p $(AIRFLOW_HOME)
	@$(BIN)/airflow db migrate > $(TRAINYARD_HOME)/airflow-db.log 2>&1 || \
		{ tail -20 $(TRAINYARD_HOME)/airflow-db.log; exit 1; }
	@$(BIN)/python -m pipeline_steps.services.gpu_pool >> $(TRAINYARD_HOME)/airflow-db.log 2>&1 || \
		{ tail -20 $(TRAINYARD_HOME)/airflow-db.log; exit 1; }

demo: airflow-db ## run the training DAG for 2013-06-02 and 2013-06-03 and print what happened
	@scripts/demo.sh

demo-hotel-rates: airflow-db ## run the second example (hotel rates, a regression) for 2017-05-01 and 02
	@scripts/demo_hotel_rates.sh

tune: airflow-db ## run the tuning DAG (8 trials) on the demo's window and print the study
	@scripts/tune.sh

# The tiers: `fast` has no service, DAG run, training or container; `containers` is the image
# tier alone; `test` is everything, as CI runs it. `make test-profile` prints where the time goes.
FAST := not slow and not services and not containers
# tests/scheduling.py hands out whole modules, longest first.
# One pytest-xdist worker per core, and one more for `make test`: the deployments' unit mostly
# waits on its processes (health checks, a scheduler's loop), and a third worker takes modules
# meanwhile (docs/development.md). `test-fast` runs in-process tests only: one per core.
WORKERS ?= $(shell expr $$(nproc) + 1)
FAST_WORKERS ?= auto
PARALLEL := -n $(WORKERS) --dist loadscope --no-loadscope-reorder
FAST_PARALLEL := -n $(FAST_WORKERS) --dist loadscope --no-loadscope-reorder
# more pytest options for the test targets, e.g. PYTEST_ARGS="-x" or "--profile-json FILE"
PYTEST_ARGS ?=
PYTEST_PROFILE := --profile-json tests/durations.json

# mypy (a minute of one core on a clean clone) type-checks beside the suite instead of before
# it; its report follows the suite's, and either failing fails the target.
test: $(STAMP) ## lint, type-check and run the whole test suite (what CI runs)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@types=$$(mktemp); $(BIN)/mypy pipeline_steps > $$types 2>&1 & mypy=$$!; \
	echo "$(BIN)/mypy pipeline_steps (beside the suite)"; \
	$(BIN)/pytest $(PARALLEL) --durations=30 --profile-tiers $(PYTEST_ARGS); suite=$$?; \
	wait $$mypy; checked=$$?; echo "--- $(BIN)/mypy pipeline_steps"; cat $$types; rm -f $$types; \
	test $$suite -eq 0 -a $$checked -eq 0

test-fast: $(STAMP) ## ruff + the tests with no service, DAG run, training or container (< 5 min)
	$(BIN)/ruff check .
	$(BIN)/pytest $(FAST_PARALLEL) -m "$(FAST)" --durations=10 $(PYTEST_ARGS)

test-containers: $(STAMP) ## the container tier alone: builds the images (when their inputs changed) and runs them
	$(BIN)/pytest -m containers --durations=10 --profile-tiers $(PYTEST_ARGS)

test-profile: $(STAMP) ## the whole suite, then wall seconds per test module and per tier (TIER="not slow" picks one)
	$(BIN)/pytest $(PARALLEL) $(if $(TIER),-m "$(TIER)") --profile-tiers $(PYTEST_PROFILE) -q

lint: $(STAMP) ## ruff + mypy only
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy pipeline_steps

format: $(STAMP) ## format the code with ruff
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# `make airflow PORT=8090`: the API server (the UI, the REST API and the tasks' Execution API)
PORT ?= 8080
airflow: airflow-db ## start Airflow (standalone) on the demo home: http://localhost:8080 (PORT=, DAGS=, DOMAINS=)
	@# the environment `trainyard airflow-env` prints, which any airflow command can be given
	@eval "$$($(BIN)/trainyard airflow-env --port $(PORT))" && \
		$(BIN)/python scripts/airflow_login.py && exec $(BIN)/airflow standalone

# One worker: one person's UI over a SQLite file, and no uvicorn supervisor to kill it while it
# starts on a busy machine (MLflow's default is 4 workers, each pinged within 5 s).
mlflow: $(STAMP) ## serve the MLflow UI over the local store: http://localhost:5000
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(TRAINYARD_HOME)/mlflow.db --port 5000 --workers 1

# `make notebook NOTEBOOK_PORT=8890`: JupyterLab (the `notebook` extra, installed on first use)
NOTEBOOK_PORT ?= 8888
notebook: $(STAMP) ## JupyterLab on examples/notebooks, this venv as its kernel: http://localhost:8888
	@$(BIN)/python -c "import jupyterlab" 2> /dev/null || $(BIN)/python -m pip install --quiet -e '.[notebook]'
	@# root (a container, a CI machine) needs --allow-root, which JupyterLab otherwise refuses
	$(BIN)/jupyter lab --notebook-dir examples/notebooks --port $(NOTEBOOK_PORT) --no-browser \
		$(if $(filter 0,$(shell id -u)),--allow-root)

optuna: $(STAMP) ## serve optuna-dashboard over the study storage: http://localhost:8081
	$(BIN)/optuna-dashboard --port 8081 $$($(BIN)/python -c "from pipeline_steps.core.settings import load_settings; print(load_settings().tuning.storage)")

prod-up: $(STAMP) ## start the production profile here: Airflow + Celery, MLflow with auth, S3 (SPARK=1: and a Spark cluster)
	@$(BIN)/trainyard services up $(if $(SPARK),--spark)

prod-down: ## stop the production profile (PURGE=1 also drops its databases and .trainyard-prod/)
	@$(BIN)/trainyard services down $(if $(PURGE),--purge)

images: ## build the step, Airflow and service images without a registry (needs a Docker engine)
	@scripts/offline-images.sh

clean: ## remove the demo state (.trainyard/); keeps .venv
	rm -rf $(TRAINYARD_HOME)
