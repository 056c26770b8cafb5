"""The package's structure, checked on every run: layers, cycles, package boundaries.

- no layer imports a higher one (the data's path, ``ARCHITECTURE.md``);
- no import cycles among the modules of ``harness/`` and ``infra/``, and no module
  imports its own package's ``__init__`` (it would see the package half loaded);
- another package's ``_private`` modules are its own;
- another package is reached only through its ``__init__``
  (``from harness.engine import X``), never through one of its modules.

A small AST check rather than a runtime one: it also sees imports inside
functions (the lazy ones that keep start-up fast), which a runtime check of
``sys.modules`` would only catch on the code path that runs them. Every rule
works on a tree given by its root, so each has a self-test on a small fake tree
that shows it can fail. Tests (``tests/``) and benchmark scripts
(``benchmarks/``) are outside the package and exempt.

Over 400 lines: the checker and the fake trees that prove each rule can fail
belong together, and a helper module under ``tests/`` would serve this file alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module may import its own layer and those before it.
LAYERS = (
    ("shared", ("harness.errors", "harness.fileio", "harness.retry", "harness.optional",
                "harness._version",
                "mpc_programs")),
    ("clients", ("harness.clients",)),
    ("privacy", ("harness.privacy",)),
    ("stream", ("harness.stream",)),
    ("engine", ("harness.engine",)),
    ("remote", ("harness.remote",)),
    ("infra", ("infra", "harness.infra")),
    ("experiments", ("harness.experiments",)),
    ("analyst", ("harness.analyst",)),
    ("cli", ("harness.cli", "harness.__main__")),
)


def layer_of(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass(frozen=True)
class Statement:
    """One import: ``import base`` (names None) or ``from base import names``."""

    line: int
    base: str
    names: tuple[tuple[str, str], ...] | None  # (name, the name it is bound to)


def statements(tree: ast.AST, module: str, is_package: bool) -> list[Statement]:
    """Every import in the tree, in functions too, relative ones resolved."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Statement(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            names = tuple((a.name, a.asname or a.name) for a in node.names)
            found.append(Statement(node.lineno, base, names))
    return sorted(found, key=lambda s: s.line)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) for every import in the tree, relative ones resolved."""
    found = []
    for st in statements(tree, module, is_package):
        found.append((st.line, st.base))
        # `from harness import errors` names a module, not a package
        found += [(st.line, f"{st.base}.{name}") for name, _ in st.names or ()]
    return found


def sources(root: Path = ROOT) -> list[Path]:
    paths = [*root.glob("harness/**/*.py"), *root.glob("infra/**/*.py")]
    return sorted(p for p in paths if p != root / "harness" / "__init__.py")


@dataclass(frozen=True)
class Module:
    name: str
    path: str  # relative to the root, for messages
    is_package: bool
    statements: tuple[Statement, ...]
    body: tuple[ast.stmt, ...] = field(compare=False)  # the top level, for __all__ and defs

    @property
    def top_lines(self) -> set[int]:
        """Lines of the imports at the top level (a package's re-exports).

        Those under a top-level ``if TYPE_CHECKING:`` count: a lazy package
        (``harness.optional.lazy_package``) exports exactly those.
        """
        top = [*self.body]
        top += [n for s in self.body if isinstance(s, ast.If) and isinstance(s.test, ast.Name)
                and s.test.id == "TYPE_CHECKING" for n in s.body]
        return {n.lineno for n in top if isinstance(n, (ast.Import, ast.ImportFrom))}

    @property
    def parent(self) -> str:
        """The package whose ``__init__`` Python runs before this module."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


class Tree:
    """The modules of ``harness/`` and ``infra/`` under a root, with their imports."""

    def __init__(self, root: Path) -> None:
        self.modules: dict[str, Module] = {}
        for path in sorted([*root.glob("harness/**/*.py"), *root.glob("infra/**/*.py")]):
            name = module_name(path, root)
            is_package = path.name == "__init__.py"
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            self.modules[name] = Module(name, path.relative_to(root).as_posix(), is_package,
                                        tuple(statements(tree, name, is_package)),
                                        tuple(tree.body))
        # The packages that own their modules: harness's subpackages and infra (wherever
        # it lives). Modules directly in harness/ (errors, fileio, _version, ...) are shared.
        self.packages = sorted(
            m.name for m in self.modules.values()
            if m.is_package and (m.name.count(".") == 1 and m.name.startswith("harness.")
                                 or m.name in ("infra", "harness.infra")))

    def package_of(self, module: str) -> str | None:
        owners = [p for p in self.packages if module == p or module.startswith(p + ".")]
        return max(owners, key=len) if owners else None

    def named(self, st: Statement) -> list[str]:
        """The modules a statement names: its base and any names that are modules.

        ``from harness.experiments import run`` names the function ``run`` when the
        package's ``__init__`` binds it, although a module of that name exists too.
        """
        return [st.base, *(f"{st.base}.{n}" for n, _ in st.names or ()
                           if f"{st.base}.{n}" in self.modules and not self.binds(st.base, n))]

    def binds(self, package: str, name: str) -> bool:
        """Whether the package's ``__init__`` binds ``name`` to something of its own."""
        mod = self.modules.get(package)
        if mod is None or not mod.is_package:
            return False
        if any(bound == name and st.base != package
               for st in mod.statements if st.line in mod.top_lines
               for _, bound in st.names or ()):
            return True
        return name in self.defined(package)

    def origin(self, module: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module that defines ``name`` as ``module`` exports it, re-exports followed."""
        mod = self.modules[module]
        if not mod.is_package or module in seen:
            return module
        seen = seen | {module}
        for st in mod.statements:
            for original, bound in st.names or ():
                if st.base not in self.modules or st.base == module:
                    continue
                if bound == name:
                    if f"{st.base}.{original}" in self.modules:
                        return f"{st.base}.{original}"
                    return self.origin(st.base, original, seen)
                if original == "*" and name in self.exported(st.base):
                    return self.origin(st.base, name, seen)
        return module  # defined in the __init__ itself

    def defined(self, module: str) -> set[str]:
        """Names the module's own top-level code defines (not those it imports)."""
        names: set[str] = set()
        for node in self.modules[module].body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
        return names

    def public(self, module: str) -> set[str] | None:
        """The module's ``__all__`` as far as the source says (None without one)."""
        mod = self.modules[module]
        for node in mod.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
                    and any(isinstance(t, ast.Name) and t.id == "__all__"
                            for t in node.targets)):
                names = set()
                for e in node.value.elts:
                    if isinstance(e, ast.Constant) and isinstance(e.value, str):
                        names.add(e.value)
                    elif (isinstance(e, ast.Starred) and isinstance(e.value, ast.Attribute)
                          and isinstance(e.value.value, ast.Name)):
                        # [*_aws.__all__, ...]: the __all__ of the module bound to _aws
                        alias = e.value.value.id
                        for st in mod.statements:
                            for n, bound in st.names or ():
                                if bound == alias and f"{st.base}.{n}" in self.modules:
                                    names |= self.public(f"{st.base}.{n}") or set()
                return names
        return None

    def exported(self, module: str) -> set[str]:
        """Names ``from module import *`` binds."""
        public = self.public(module)
        if public is not None:
            return public
        return {n for n in self.defined(module) if not n.startswith("_")}

    def edges(self, module: Module) -> dict[str, int]:
        """Modules this one really imports (re-exports followed), with the first line."""
        out: dict[str, int] = {}
        for st in module.statements:
            if st.names is None:
                targets = [st.base] if st.base in self.modules else []
            else:
                targets = []
                for name, _ in st.names:
                    if f"{st.base}.{name}" in self.modules:
                        targets.append(f"{st.base}.{name}")
                    elif st.base in self.modules and name != "*":
                        targets.append(self.origin(st.base, name))
                    elif st.base in self.modules:
                        targets.append(st.base)
            for target in targets:
                if target != module.name or not module.is_package:
                    out.setdefault(target, st.line)
        return out


@cache
def real_tree() -> Tree:
    return Tree(ROOT)


# --- the rules: each returns its violations, one line each ----------------------------


def cycles(tree: Tree) -> list[str]:
    """One cycle (file:line of each import on it) per strongly connected group of modules."""
    graph = {name: tree.edges(mod) for name, mod in tree.modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in sorted(groups):
        start, members = group[0], set(group)
        paths = {start: [start]}
        queue = [start]
        path = [start, start]  # a module importing itself
        while queue and len(group) > 1:  # the shortest way from start back to itself
            node = queue.pop(0)
            if node != start and start in graph[node]:
                path = [*paths[node], start]
                break
            for nxt in sorted(graph[node]):
                if nxt in members and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    queue.append(nxt)
        steps = [f"{a} ({tree.modules[a].path}:{graph[a][b]})"
                 for a, b in zip(path[:-1], path[1:], strict=True)]
        found.append(" -> ".join([*steps, start]))
    return found


def own_package_imports(tree: Tree) -> list[str]:
    """Modules that import their own package's ``__init__`` instead of their siblings."""
    found = []
    for mod in tree.modules.values():
        package = mod.parent
        if mod.is_package or package not in tree.modules:
            continue
        for st in mod.statements:
            if st.base != package:
                continue
            if st.names is None:
                what = f"import {package}"
            else:  # `from package import sibling` names the sibling itself: fine
                via = [n for n, _ in st.names if f"{package}.{n}" not in tree.modules]
                if not via:
                    continue
                what = f"from {package} import {', '.join(via)}"
            found.append(f"{mod.path}:{st.line}: `{what}` imports its own package's "
                             f"__init__; import the sibling module that defines it")
    return found


def _private(module: str, package: str) -> bool:
    inside = module[len(package) + 1:].split(".") if module != package else []
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
               for p in inside)


def private_imports(tree: Tree) -> list[str]:
    """Imports of another package's ``_private`` modules."""
    found = []
    for mod in tree.modules.values():
        own = tree.package_of(mod.name)
        for st in mod.statements:
            for target in tree.named(st):
                package = tree.package_of(target)
                if package is not None and package != own and _private(target, package):
                    found.append(f"{mod.path}:{st.line}: imports {target}, private to "
                                 f"{package}; have {package} export what is needed")
    return found


def deep_imports(tree: Tree) -> list[str]:
    """Imports that reach into another package's modules instead of its ``__init__``."""
    found = []
    for mod in tree.modules.values():
        own = tree.package_of(mod.name)
        for st in mod.statements:
            for target in tree.named(st):
                package = tree.package_of(target)
                if package is None or package == own or target == package:
                    continue
                # a module the package lists in its __all__ is public on purpose
                if st.base == package and target.rpartition(".")[2] in (
                        tree.public(package) or ()):
                    continue
                found.append(f"{mod.path}:{st.line}: imports the module {target}; "
                                 f"import its names from {package} (add them to its __all__)")
    return found


# --- the real tree ------------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    unplaced = [module_name(p) for p in sources() if layer_of(module_name(p)) is None]
    assert not unplaced, f"place these modules in a layer of LAYERS: {unplaced}"


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_higher_layer(path: Path) -> None:
    module = module_name(path)
    rank = layer_of(module)
    assert rank is not None, f"{module} has no layer"
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


def test_no_import_cycles() -> None:
    found = cycles(real_tree())
    assert not found, "import cycles (module (file:line of its import) -> ...):\n  " + \
        "\n  ".join(found)


def test_no_module_imports_its_own_package() -> None:
    found = own_package_imports(real_tree())
    assert not found, "\n  ".join(["inside a package, import siblings directly:", *found])


def test_no_private_module_of_another_package_is_imported() -> None:
    found = private_imports(real_tree())
    assert not found, "\n  ".join(["another package's _private modules imported:", *found])


def test_other_packages_are_imported_through_their_init() -> None:
    found = deep_imports(real_tree())
    assert not found, "\n  ".join(["cross-package imports past the package's __init__:",
                                   *found])


def test_subpackages_declare_their_public_api() -> None:
    for init in sorted(ROOT.glob("harness/*/__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{init} needs a docstring saying what it owns"
        names = [t.id for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)]
        assert "__all__" in names, f"{init} must name its public pieces in __all__"


# --- each rule can fail: fake trees ------------------------------------------------


def fake_tree(root: Path, files: dict[str, str]) -> Tree:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for directory in {(root / name).parent for name in files}:
        (directory / "__init__.py").touch()  # every directory a package, as in the real tree
    return Tree(root)


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    # The rule must be able to fail: an engine module importing the CLI is caught.
    tree = ast.parse("def f():\n    from harness.cli import main\n")
    targets = [t for _, t in imported(tree, "harness.engine.cluster", False)]
    assert any(layer_of(t) == layer_of("harness.cli") for t in targets)
    engine, cli = layer_of("harness.engine.cluster"), layer_of("harness.cli.run")
    assert engine is not None and cli is not None and engine < cli
    tree = ast.parse("from ..experiments import run\n")
    targets = [t for _, t in imported(tree, "harness.analyst.utility", False)]
    assert "harness.experiments.run" in targets


def test_the_check_catches_cycles(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path, {
        "harness/errors.py": "",
        "harness/engine/__init__.py": "from harness.engine.a import A\n"
                                      "from harness.engine.c import C\n",
        "harness/engine/a.py": "from harness.engine.b import B\nA = 1\n",
        # function level, as lazy imports are written
        "harness/engine/b.py": "B = 1\n\ndef f():\n    from harness.engine.a import A\n",
        # through the package's __init__: a real cycle only if a imported c
        "harness/engine/c.py": "from harness.engine import A\nC = 1\n",
        "harness/remote/__init__.py": "from harness.remote.r import R\n",
        "harness/remote/r.py": "from harness.engine import C\nR = 1\n",
        "harness/engine/d.py": "from .c import C\n\ndef g():\n    from harness.remote import R\n",
        "harness/errors_user.py": "from harness import errors\n",
    })
    assert cycles(tree) == [
        "harness.engine.a (harness/engine/a.py:1) -> harness.engine.b (harness/engine/b.py:4)"
        " -> harness.engine.a",
    ]
    assert own_package_imports(tree) == [
        "harness/engine/c.py:1: `from harness.engine import A` imports its own package's "
        "__init__; import the sibling module that defines it"]
    # a cycle across packages, through both __init__s, where the modules do import each other
    (tmp_path / "harness/engine/c.py").write_text(
        "C = 1\n\ndef h():\n    from harness.remote import R\n")
    assert cycles(Tree(tmp_path))[1:] == [
        "harness.engine.c (harness/engine/c.py:4) -> harness.remote.r (harness/remote/r.py:1)"
        " -> harness.engine.c"]


def test_the_check_catches_private_imports(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path, {
        "harness/_version.py": "v = 1\n",
        "harness/remote/_client.py": "C = 1\n",
        "harness/remote/ssh.py": "from harness.remote._client import C\n",  # its own: fine
        "harness/cli/hosts.py": "from harness._version import v\n"  # shared: fine
                                "from harness.remote._client import C\n",
        "harness/cli/aws.py": "def f():\n    from infra import _ssh\n",
        "harness/cli/run.py": "from ..remote import _client\n",
        "infra/_ssh.py": "",
        "infra/aws.py": "from infra._ssh import scan\n",  # its own: fine
    })
    assert sorted(private_imports(tree)) == [
        "harness/cli/aws.py:2: imports infra._ssh, private to infra; have infra export "
        "what is needed",
        "harness/cli/hosts.py:2: imports harness.remote._client, private to harness.remote; "
        "have harness.remote export what is needed",
        "harness/cli/run.py:1: imports harness.remote._client, private to harness.remote; "
        "have harness.remote export what is needed",
    ]


def test_the_check_catches_imports_past_a_package_init(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path, {
        "harness/errors.py": "E = 1\n",
        "harness/engine/cluster.py": "from harness.errors import E\nL = 1\n",
        "harness/engine/run.py": "from harness.engine.cluster import L\n",  # its own: fine
        "harness/remote/ssh.py": "from harness.engine import L\n"  # through __init__: fine
                                 "from harness.engine.cluster import L\n"
                                 "def f():\n    import harness.engine.cluster\n",
        "harness/cli/run.py": "from ..engine import cluster\n",
        "harness/infra/aws.py": "from harness.remote.ssh import f\n",
        # `run` is the function the __init__ re-exports; `results` a module it lists
        "harness/experiments/__init__.py": "from harness.experiments.run import run\n"
                                           "__all__ = ['run', 'results']\n",
        "harness/experiments/run.py": "def run(): pass\n",
        "harness/experiments/results.py": "",
        "harness/experiments/report.py": "",
        "harness/cli/main.py": "from harness.experiments import results, run\n"
                               "from harness.experiments import report\n",
    })
    assert deep_imports(tree) == [
        "harness/cli/main.py:2: imports the module harness.experiments.report; "
        "import its names from harness.experiments (add them to its __all__)",
        "harness/cli/run.py:1: imports the module harness.engine.cluster; "
        "import its names from harness.engine (add them to its __all__)",
        "harness/infra/aws.py:1: imports the module harness.remote.ssh; "
        "import its names from harness.remote (add them to its __all__)",
        "harness/remote/ssh.py:2: imports the module harness.engine.cluster; "
        "import its names from harness.engine (add them to its __all__)",
        "harness/remote/ssh.py:4: imports the module harness.engine.cluster; "
        "import its names from harness.engine (add them to its __all__)",
    ]
