"""The one content fingerprint of settings, inputs and configurations: sha256 of canonical JSON.

Standard library only: settings (read while DAGs parse) fingerprint themselves with it.
"""

from __future__ import annotations

import hashlib
import json


def json_sha256(value: object) -> str:
    """sha256 of ``value`` as JSON with sorted keys (tuples as lists, other objects as their
    string form): equal values give equal fingerprints, in every process and version."""
    blob = json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()
