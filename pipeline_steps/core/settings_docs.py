"""The settings tables of docs/configuration.md, generated from the settings' declarations.

Each ``## `<section>``` heading of the page is followed by one table of that section's settings
(key, default, meaning), rendered here from the fields' declarations
(:mod:`pipeline_steps.core.setting_spec`): the doc, the bounds or choices, whether it is a
runtime setting and its trigger-form label. The train table also lists the built-in models'
hyperparameters, from their own declarations. The prose around the tables is the page's own
and stays as written. A section the page lacks is added at its end.

    python -m pipeline_steps.core.settings_docs           # rewrite docs/configuration.md
    python -m pipeline_steps.core.settings_docs --check   # exit 1 when it is stale

A test fails when the committed page differs from what this renders.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing
from pathlib import Path
from typing import Any

from pipeline_steps.core.models import BUILTIN_MODELS, Hyperparameter
from pipeline_steps.core.models import resolve as resolve_model
from pipeline_steps.core.setting_spec import Declared, declared
from pipeline_steps.core.settings import PROJECT_ROOT, Settings, TeamQuota

PAGE = PROJECT_ROOT / "docs" / "configuration.md"
_HEADING = re.compile(r"^## `(\w+)`$")
_ROLE = re.compile(r":\w+:`([^`]+)`")


def markdown(doc: str) -> str:
    """A declaration's doc as one Markdown table cell: reST literals and roles as code, pipes
    escaped."""
    text = _ROLE.sub(r"`\1`", doc).replace("``", "`")
    return text.replace("|", "\\|")


def shown(value: Any) -> str:
    """A default as the table shows it: YAML-like, a path inside the project relative to it."""
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple | list):
        return f"`[{', '.join(str(v) for v in value)}]`"
    if isinstance(value, dict):
        items = ", ".join(f"{k}: {v}" for k, v in value.items())
        return f"`{{{items}}}`"
    text = str(value)
    root = str(PROJECT_ROOT)
    if text.startswith(root + "/"):
        text = text[len(root) + 1 :]
    return f"`{text}`".replace("|", "\\|")


def meaning(d: Declared) -> str:
    """The meaning cell: the doc, then what the value may be, then the tags."""
    parts = [markdown(d.spec.doc)]
    if d.spec.choices and len(d.spec.choices) > 1:
        listed = ", ".join(f"`{c}`" if c != "" else "empty" for c in d.spec.choices)
        parts.append(f"One of {listed}.")
    bounds = d.spec.bounds_text()
    if bounds == "at least 0":
        parts.append("Not negative.")
    elif bounds:
        parts.append(f"{bounds[0].upper()}{bounds[1:]}.")
    if d.spec.max_length is not None:
        parts.append(f"At most {d.spec.max_length} characters.")
    if d.spec.path:
        parts.append("Relative in a settings file: read from the file's folder.")
    if d.spec.runtime:
        parts.append("*Runtime*: changes how a run goes, not what it computes.")
    labels = [f"*{e.label}*" for e in d.spec.forms]
    if labels:
        parts.append(f"Trigger form: {', '.join(dict.fromkeys(labels))}.")
    return " ".join(parts)


def hyperparameter_rows() -> list[str]:
    """Rows of the built-in models' hyperparameters, one per name (shared ones named once)."""
    owners: dict[str, list[str]] = {}
    first: dict[str, Hyperparameter] = {}
    for model in BUILTIN_MODELS:
        for h in resolve_model(model).hyperparameters:
            owners.setdefault(h.name, []).append(f"`{model}`")
            first.setdefault(h.name, h)
    rows = []
    for name, h in first.items():
        bounds = []
        if h.low is not None:
            bounds.append(f"at least {h.low:g}")
        if h.high is not None:
            bounds.append(f"{'below' if h.open_high else 'at most'} {h.high:g}")
        limits = f" {' and '.join(bounds).capitalize()}." if bounds else ""
        rows.append(
            f"| `{name}` | {shown(h.default)} | hyperparameter of {', '.join(owners[name])}: "
            f"{markdown(h.doc)}{limits} |"
        )
    return rows


def table(section: str, cls: type) -> list[str]:
    """The Markdown table of one settings section."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{d.name}` | {shown(d.default)} | {meaning(d)} |" for d in declared(cls)]
    if section == "train":
        lines += hyperparameter_rows()
    if section == "orchestration":  # each team's quota, one row per limit
        lines += [
            f"| `quotas.<team>.{d.name}` | {shown(d.default)} | {meaning(d)} |"
            for d in declared(TeamQuota)
        ]
    return lines


def render(page: str) -> str:
    """``page`` with every section's table replaced by the generated one; sections it lacks
    are appended."""
    sections = typing.get_type_hints(Settings)
    names = [f.name for f in dataclasses.fields(Settings)]
    lines = page.splitlines()
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        heading = _HEADING.match(line)
        if not heading or heading.group(1) not in sections:
            continue
        name = heading.group(1)
        seen.add(name)
        while i < len(lines) and not lines[i].startswith("|") and not lines[i].startswith("## "):
            out.append(lines[i])
            i += 1
        while i < len(lines) and lines[i].startswith("|"):
            i += 1  # the old table
        out += table(name, sections[name])
    for name in names:
        if name not in seen:
            out += ["", f"## `{name}`", *table(name, sections[name])]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("page", nargs="?", default=str(PAGE), help="the page to rewrite")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args(argv)
    path = Path(args.page)
    current = path.read_text()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print(
                f"{path} is stale: run python -m pipeline_steps.core.settings_docs",
                file=sys.stderr,
            )
            return 1
        return 0
    path.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
