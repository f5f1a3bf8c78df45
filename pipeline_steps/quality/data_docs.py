"""Data Docs as the lake keeps them: a failed day's site whole, a passing day's pages alone.

GX renders a full site per validated dataset: its pages (the index, the suite, the day's
validation) and 4.3 MB of ``static/`` assets (images, fonts) the pages barely use. A passing
day's site keeps its pages, with their indentation removed, and points them at one copy of the
assets per lake and GX version (``reports/data_docs_assets/gx-<version>/static``): about 100
to 190 KB per dataset instead of 4.3 MB. A failed day keeps its whole site, which opens without
the lake's shared assets (the day to read it is often the day it is copied elsewhere).
"""

from __future__ import annotations

import posixpath
import re
import shutil
from importlib import metadata
from pathlib import Path

from pipeline_steps.core.lake import Lake

ASSETS = "reports/data_docs_assets"
COMPLETE = "_complete"
_STATIC_LINK = re.compile(r'(?<=")(?:\./)?(?:\.\./)*static/')
_INDENT = re.compile(r"\n[ \t]+")


def shared_static() -> str:
    """The lake's one copy of GX's Data Docs assets (a folder relative to the lake's root)."""
    return f"{ASSETS}/gx-{metadata.version('great_expectations')}/static"


def slim_site(lake: Lake, site: Path, where: str) -> None:
    """Rewrite the site GX rendered in ``site``, to be stored at ``where`` (relative to the
    lake's root), for a passing day: its ``static/`` assets copied to the lake once and
    removed here, every page's links to them pointed at that copy, indentation removed."""
    static = site / "static"
    if not static.is_dir():
        return
    shared = shared_static()
    if not lake.exists(shared, COMPLETE):  # the first passing day, or one that did not finish
        lake.fs.put(f"{static}/", lake.path(shared), recursive=True)
        lake.write_bytes(b"", shared, COMPLETE)
    for page in site.rglob("*.html"):
        folder = posixpath.join(where, page.parent.relative_to(site).as_posix())
        link = posixpath.relpath(shared, folder) + "/"
        text = _STATIC_LINK.sub(link, page.read_text(encoding="utf-8"))
        page.write_text(_INDENT.sub("\n", text), encoding="utf-8")
    shutil.rmtree(static)
