"""Only the tasks' own modules compare task names: everything else asks the task
(:mod:`pipeline_steps.tasks`), so a task added there needs no change elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pipeline_steps
from pipeline_steps.tasks import BUILTIN_TASKS

PACKAGE = Path(pipeline_steps.__file__).parent
NAMES = "|".join(BUILTIN_TASKS)
COMPARISON = re.compile(
    rf"""(==|!=|\bin)\s*\(?\s*["'](?:{NAMES})["']"""  # task == "binary", in ("binary", ...)
    rf"""|["'](?:{NAMES})["']\s*(==|!=)"""  # "binary" == task
    rf"""|\bcase\s+["'](?:{NAMES})["']"""  # match task: case "binary"
)


def comparisons(root: Path) -> list[str]:
    """``path:line: text`` of each task-name comparison under ``root`` outside ``tasks/``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "tasks":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if COMPARISON.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_no_module_outside_the_tasks_compares_a_task_name() -> None:
    assert comparisons(PACKAGE) == []


def test_the_check_finds_each_way_of_comparing(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "own.py").write_text('if task == "binary":\n    pass\n')
    (tmp_path / "step.py").write_text(
        'a = task == "multiclass"\n'
        "b = task in ('binary', 'regression')\n"
        'c = "ordinal" != task\n'
        'match task:\n    case "regression":\n        pass\n'
        'd = {"binary": 1}\n'  # a key, not a comparison
    )
    assert [line.split(":")[1] for line in comparisons(tmp_path)] == ["1", "2", "3", "5"]
