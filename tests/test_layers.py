"""The package's layers follow the data's path, and no layer imports a higher one.

A small AST check rather than a runtime one: it also sees imports inside
functions (the lazy ones that keep start-up fast), which a runtime check of
``sys.modules`` would only catch on the code path that runs them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module may import its own layer and those before it.
LAYERS = (
    ("shared", ("harness.errors", "harness.fileio", "harness._version", "mpc_programs")),
    ("clients", ("harness.clients",)),
    ("engine", ("harness.engine",)),
    ("remote", ("harness.remote",)),
    ("infra", ("infra",)),
    ("experiments", ("harness.experiments",)),
    ("analyst", ("harness.analyst",)),
    ("cli", ("harness.cli", "harness.__main__")),
)


def layer_of(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) for every import in the tree, relative ones resolved."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            # `from harness import errors` names a module, not a package
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def sources() -> list[Path]:
    paths = [*ROOT.glob("harness/**/*.py"), *ROOT.glob("infra/**/*.py")]
    return sorted(p for p in paths if p != ROOT / "harness" / "__init__.py")


def test_every_module_has_a_layer() -> None:
    unplaced = [module_name(p) for p in sources() if layer_of(module_name(p)) is None]
    assert not unplaced, f"place these modules in a layer of LAYERS: {unplaced}"


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_higher_layer(path: Path) -> None:
    module = module_name(path)
    rank = layer_of(module)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    upward = []
    for line, target in imported(tree, module, path.name == "__init__.py"):
        if target == "harness":
            continue  # the package itself; the names it is asked for are checked apart
        target_rank = layer_of(target)
        if target_rank is not None and target_rank > rank:
            upward.append(f"line {line}: {target} ({LAYERS[target_rank][0]})")
    assert not upward, (f"{module} ({LAYERS[rank][0]}) imports a higher layer:\n  "
                        + "\n  ".join(upward))


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    # The rule must be able to fail: an engine module importing the CLI is caught.
    tree = ast.parse("def f():\n    from harness.cli import main\n")
    targets = [t for _, t in imported(tree, "harness.engine.cluster", False)]
    assert any(layer_of(t) == layer_of("harness.cli") for t in targets)
    assert layer_of("harness.engine.cluster") < layer_of("harness.cli.run")
    tree = ast.parse("from ..experiments import run\n")
    targets = [t for _, t in imported(tree, "harness.analyst.utility", False)]
    assert "harness.experiments.run" in targets


def test_subpackages_declare_their_public_api() -> None:
    for init in sorted(ROOT.glob("harness/*/__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{init} needs a docstring saying what it owns"
        names = [t.id for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)]
        assert "__all__" in names, f"{init} must name its public pieces in __all__"
