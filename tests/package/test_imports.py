"""``import stochmix`` stays light: the heavy optional libraries load only when used.

Torch alone costs about a second and 180 MB per process, so neither it nor Matplotlib,
scikit-learn, pandas, Numba or cvxpy (the SDP solver of the certificates and of the weight
rules "fastest" and "fdla") may be imported by importing stochmix; and the ``Array`` type of
the annotations must still check tensors (dtype and shape) once torch is loaded. Each check
runs in a fresh interpreter, since this session has imported them all.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from jaxtyping import Float, Int

from stochmix._arrays import Array
from tests import CHILD_TIMEOUT

HEAVY = ("torch", "matplotlib", "sklearn", "pandas", "numba", "cvxpy")
ROOT = Path(__file__).resolve().parents[2]  # so that the children import tests._typecheck


def _run(code: str) -> str:
    args = [sys.executable, "-c", textwrap.dedent(code)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=CHILD_TIMEOUT, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    "statement",
    [
        "import stochmix",
        "import stochmix.problems, stochmix.mixing, stochmix.algorithms, stochmix.analysis, "
        "stochmix.participation",
        "import stochmix.config",
        "import stochmix.cli",
    ],
    ids=["stochmix", "subpackages", "config", "cli"],
)
def test_importing_stochmix_loads_no_optional_library(statement):
    loaded = _run(
        f"""
        import sys
        {statement}
        print(",".join(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    assert loaded == "", f"{statement!r} imported {loaded}"


def test_array_accepts_numpy_and_tensors_only():
    assert isinstance(np.zeros((2, 3)), Array)
    assert issubclass(np.ndarray, Array)
    assert not isinstance([[0.0, 1.0]], Array)
    assert not isinstance(1.0, Array)
    assert isinstance(np.zeros((2, 3)), Float[Array, "2 3"])
    assert not isinstance(np.zeros((3, 2)), Float[Array, "2 3"])
    assert not isinstance(np.zeros((2, 3), dtype=np.int64), Float[Array, "2 3"])
    with pytest.raises(TypeError, match="annotations"):
        Array()
    torch = pytest.importorskip("torch")
    assert isinstance(torch.zeros(2, 3, dtype=torch.float64), Float[Array, "2 3"])
    assert isinstance(torch.zeros(2, 3, dtype=torch.float32), Float[Array, "2 3"])
    assert isinstance(torch.zeros(2, dtype=torch.int64), Int[Array, " 2"])
    assert not isinstance(torch.zeros(3, 2, dtype=torch.float64), Float[Array, "2 3"])
    assert not isinstance(torch.zeros(2, 3, dtype=torch.int64), Float[Array, "2 3"])


def test_annotations_check_tensors_when_torch_is_imported_after_stochmix():
    """Under the tests' import hook, an annotated method accepts a float64 tensor of the
    right shape and rejects one of the wrong shape or dtype before its body runs, although
    torch was imported only after stochmix."""
    pytest.importorskip("torch")
    out = _run(
        """
        import sys
        from jaxtyping import TypeCheckError, install_import_hook
        import tests._typecheck
        install_import_hook("stochmix", "tests._typecheck.typecheck")
        import numpy as np
        from stochmix.problems import Quadratic
        assert "torch" not in sys.modules
        import torch
        p = Quadratic.random(4, 3, seed=0)
        clients = np.arange(2)  # annotated Int[np.ndarray, " m"]; points Float[Array, "m d"]
        g = p.gradients(clients, torch.ones((2, 3), dtype=torch.float64))
        assert isinstance(g, torch.Tensor) and g.shape == (2, 3), g
        for bad in (
            torch.ones((3, 3), dtype=torch.float64),  # m = 3 rows for 2 clients
            torch.ones(3, dtype=torch.float64),  # not a matrix
            torch.ones((2, 3), dtype=torch.int64),  # not floating
            [[1.0, 1.0, 1.0]] * 2,  # not an array
        ):
            try:
                p.gradients(clients, bad)
            except TypeCheckError:
                continue
            raise AssertionError(f"accepted {bad!r}")
        print("ok")
        """
    )
    assert out == "ok"


def _package_imports(package: Path) -> dict:
    """Module -> the modules of the same package it imports, anywhere in its code (function
    bodies included: a lazy import is still a dependency)."""
    import ast

    graph = {}
    for path in package.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(alias.name for alias in node.names)
        graph[path.stem] = found & {p.stem for p in package.glob("*.py")}
    return graph


def _assert_no_cycle(graph: dict) -> None:
    state = {}

    def visit(module, path):
        if state.get(module) == "open":
            raise AssertionError(f"import cycle: {' -> '.join([*path, module])}")
        if state.get(module) != "done":
            state[module] = "open"
            for other in sorted(graph[module]):
                visit(other, [*path, module])
            state[module] = "done"

    for module in sorted(graph):
        visit(module, [])


def test_the_problems_package_has_no_import_cycle():
    graph = _package_imports(ROOT / "stochmix" / "problems")
    assert "base" not in graph["stochastic"]  # the wrappers meet the contract, no base class
    _assert_no_cycle(graph)
    # and each of the modules at the bottom imports first, alone, in a fresh interpreter
    assert _run("import stochmix.problems.stochastic; print('ok')") == "ok"


def _import_graph():
    """Every import between modules of stochmix, function-level ones included: module ->
    the modules it imports (``from pkg import sub`` names the submodule, not the package)."""
    import ast

    import networkx as nx

    root = ROOT / "stochmix"

    def name(path):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name(p): p for p in root.rglob("*.py")}
    graph = nx.DiGraph()
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" for a in node.names]
                targets = [t if t in modules else base for t in names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph.add_edges_from((module, t) for t in targets if t in modules and t != module)
    return graph


def test_no_import_cycle_anywhere_in_stochmix():
    import networkx as nx

    graph = _import_graph()
    assert graph.number_of_nodes() > 50  # the walk found the package
    shown = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            cycle = [edge[0] for edge in nx.find_cycle(graph.subgraph(component))]
            shown.append(" -> ".join([*cycle, cycle[0]]))
    assert shown == [], "import cycles:\n" + "\n".join(shown)


def test_the_config_package_has_no_import_cycle():
    """stochmix.config is split by concept; its modules import only lower ones, and the
    lowest (parsing, writer) none of the package's."""
    graph = _package_imports(ROOT / "stochmix" / "config")
    _assert_no_cycle(graph)
    assert graph["parsing"] == set() and graph["writer"] == set()


#: The engine's stages, in order: a module of a stage imports only modules of its own
#: stage or of stages before it (the package facade, stochmix.engine, gathers them all).
STAGES = ("model", "plan", "codegen", "backends", "runner")


def _stage(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) > 2 and parts[:2] == ["stochmix", "engine"] and parts[2] in STAGES:
        return STAGES.index(parts[2])
    return None


def test_engine_stages_import_only_earlier_stages():
    graph = _import_graph()
    staged = [m for m in graph if _stage(m) is not None]
    assert {_stage(m) for m in staged} == set(range(len(STAGES)))  # every folder was found
    against = sorted(
        f"{a} -> {b}"
        for a, b in graph.edges
        if _stage(a) is not None and _stage(b) is not None and _stage(b) > _stage(a)
    )
    assert against == [], "imports against the stage order:\n" + "\n".join(against)


def test_stage_order_check_sees_a_backward_import():
    """The check above is not vacuous: an edge from the model stage to the run stage is
    what it looks for."""
    assert _stage("stochmix.engine.model.method") == 0
    assert _stage("stochmix.engine.runner.loop") == len(STAGES) - 1
    assert _stage("stochmix.engine") is None and _stage("stochmix.algorithms.fedavg") is None


def test_no_module_of_the_package_is_over_600_lines():
    """One concept per module: none of stochmix's modules grows past 600 lines."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "stochmix").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}, f"modules over 600 lines: {long}"
