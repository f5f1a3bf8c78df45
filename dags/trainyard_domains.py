"""Every DAG of every domain this deployment runs, from the domains' settings files.

The default domain (``TRAINYARD_CONFIG``: the Makefile names the flights example's), the
shipped examples (``examples/*/settings.yaml``, ``orchestration.example_domains``) and each
settings file in ``orchestration.domains_dir``
(``TRAINYARD_ORCHESTRATION__DOMAINS_DIR``) get their four DAGs, ``<domain>_training``,
``_drift_monitor``, ``_tuning`` and ``_serving``, built by
:func:`pipeline_steps.orchestration.domains.build_dags`. A team adds a domain by adding its
settings file (and installing its package); there is no DAG file to copy. A settings file
refused here shows as this file's import error, naming the file and the setting.
"""

from airflow.sdk import DAG  # also what tells Airflow's parser this file holds DAGs

from pipeline_steps.orchestration.domains import all_dags

DOMAIN_DAGS: dict[str, DAG] = all_dags()
globals().update(DOMAIN_DAGS)
