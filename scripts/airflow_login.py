"""Print the login of the local Airflow UI, creating the admin password once.

Airflow's simple auth manager keeps the passwords of the users named in
``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS`` (``user:role``) in a JSON file under
``AIRFLOW_HOME`` and generates the missing ones when the API server starts. Writing the admin's
password here first means `make airflow` can print the login that works before the server runs.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path


def main() -> None:
    home = Path(os.environ["AIRFLOW_HOME"])
    path = Path(
        os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
        or home / "simple_auth_manager_passwords.json.generated"
    )
    passwords = json.loads(path.read_text()) if path.exists() else {}
    if "admin" not in passwords:
        passwords["admin"] = secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(passwords) + "\n")
    print(
        f"Airflow UI: http://localhost:{os.environ.get('AIRFLOW__API__PORT', '8080')}  user "
        f"admin, password {passwords['admin']}\n"
        f"            (kept in {path})"
    )


if __name__ == "__main__":
    main()
