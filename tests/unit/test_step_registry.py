"""A step is declared once: its registry entry reaches the CLI, its function, the manifest loader
and the DAG factory, and no other module names a step by a literal of its own."""

from __future__ import annotations

import ast
import importlib.util
from itertools import pairwise
from pathlib import Path

import pytest

from pipeline_steps.commands.cli import build_parser
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import IngestManifest, ManifestError, load_manifest
from pipeline_steps.core.step_registry import REGISTRY, STEPS, TRAIN, Step, step, steps_of

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline_steps"
DECLARATION = PACKAGE / "core" / "step_registry.py"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_step_is_a_choice_of_trainyard_step_with_its_help(name: str) -> None:
    parser = build_parser()
    args = parser.parse_args(["step", name, "--run-id", "r1", "--logical-date", "2013-06-03"])
    assert args.command == "step" and args.name == name
    step_parser = parser._subparsers._group_actions[0].choices["step"]
    assert REGISTRY[name].help in step_parser.format_help()


def test_an_unknown_step_is_refused_naming_the_steps(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["step", "deploy", "--run-id", "r", "--logical-date", "x"])
    assert "invalid choice: 'deploy'" in capsys.readouterr().err
    with pytest.raises(StepError, match=r"unknown step 'deploy'; steps: ingest, validate"):
        step("deploy")


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_step_function_is_defined_where_its_entry_points(name: str) -> None:
    """Found without importing the step (each loads torch, GX or Feast): the module exists and
    defines or imports the attribute at its top level."""
    module, _, attribute = REGISTRY[name].function.partition(":")
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"{name}: no module {module}"
    tree = ast.parse(Path(spec.origin).read_text())
    defined = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    } | {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert attribute in defined, f"{name}: {module} has no top-level {attribute}"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_the_loader_reads_each_step_s_manifest_and_no_other(name: str) -> None:
    entry = REGISTRY[name]
    assert name == entry.manifest.STEP
    for other in REGISTRY.values():
        if other is entry:
            continue
        with pytest.raises(ManifestError, match=f"expected the '{name}' step's manifest"):
            load_manifest(entry.manifest, {"step": other.name}, f"runs/r/{other.name}.json")


def test_an_entry_that_contradicts_itself_is_refused() -> None:
    contradiction = r"'train': its manifest IngestManifest records step 'ingest'"
    with pytest.raises(StepError, match=contradiction):
        Step(
            name="train",
            function="pipeline_steps.steps.train:train",
            manifest=IngestManifest,
            help="",
            dags=(),
        )
    with pytest.raises(StepError, match=r"unknown DAG kind\(s\) nightly"):
        Step(
            name="ingest",
            function="pipeline_steps.steps.ingest:ingest",
            manifest=IngestManifest,
            help="",
            dags=("nightly",),
        )
    with pytest.raises(StepError, match=r"'pipeline_steps.steps.ingest' is not 'module:attr"):
        Step(
            name="ingest",
            function="pipeline_steps.steps.ingest",
            manifest=IngestManifest,
            help="",
            dags=(),
        )


def test_every_step_is_a_task_of_the_dags_its_entry_names() -> None:
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.orchestration.domains import build_dags, dag_id

    settings = load_settings()
    dags = build_dags()
    for entry in REGISTRY.values():
        assert entry.dags, f"{entry.name} is in no DAG"
        for kind in entry.dags:
            dag = dags[dag_id(settings, kind)]
            assert entry.task_id in dag.task_ids, f"{entry.name} is no task of {dag.dag_id}"
    # the training DAG chains the pipeline's steps in their declared order
    training = dags[dag_id(settings, "training")]
    chain = [training.get_task(name) for name in STEPS]
    for before, after in pairwise(chain):
        assert before.downstream_task_ids == {after.task_id}
    assert [s.name for s in steps_of("training")] == list(STEPS)
    # the one distributed step is the one the tuning DAG trains as mapped trials
    assert [s for s in REGISTRY.values() if s.distributed] == [TRAIN]


# Calls and keywords that take a step (or a step's task id) as an argument.
_STEP_TAKERS = {
    "step_task",
    "step_argv",
    "pod_arguments",
    "kubernetes_step",
    "step_function",
    "champion_event_task",
}
_STEP_KEYWORDS = {"step", "task_id", "task_ids", "group_id"}


def _literal_steps(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a step's name is written as a literal in a place that means the step: an argument
    of a call that takes a step, a ``step=``/``task_id=`` keyword, a comparison with a name
    holding a step, a ``*_TASK`` constant, or a hand-written sequence of two or more steps."""

    def name_of(node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        return ""

    def is_step(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) and node.value in REGISTRY

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if name_of(node.func) in _STEP_TAKERS:
                found += [(a.lineno, a.value) for a in node.args if is_step(a)]
            found += [
                (k.value.lineno, k.value.value)
                for k in node.keywords
                if k.arg in _STEP_KEYWORDS and is_step(k.value)
            ]
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any("step" in name_of(o) or name_of(o) == "name" for o in operands):
                found += [(o.lineno, o.value) for o in operands if is_step(o)]
        elif isinstance(node, ast.Assign) and is_step(node.value):
            if any(name_of(t).endswith("_TASK") for t in node.targets):
                found.append((node.lineno, node.value.value))
        elif isinstance(node, ast.Tuple | ast.List):
            steps = [e for e in node.elts if is_step(e)]
            if len(steps) >= 2 and len(steps) == len(node.elts):
                found += [(node.lineno, ", ".join(e.value for e in steps))]
    return found


def test_no_module_but_the_declaration_names_a_step_by_a_literal() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != DECLARATION
        for line, text in _literal_steps(ast.parse(path.read_text()))
    ]
    assert not offenders, "use pipeline_steps.core.step_registry:\n" + "\n".join(offenders)


def test_the_literal_check_finds_what_it_looks_for() -> None:
    source = (
        "step_task('train', settings)\n"
        "if step == 'train': pass\n"
        "for s in ('ingest', 'validate'): pass\n"
        "Operator(task_id='promote')\n"
        "MONITOR_TASK = 'monitor'\n"
        "x = settings.to_dict()['train']\n"  # a settings section, not the step
    )
    assert sorted(_literal_steps(ast.parse(source))) == [
        (1, "train"),
        (2, "train"),
        (3, "ingest, validate"),
        (4, "promote"),
        (5, "monitor"),
    ]
