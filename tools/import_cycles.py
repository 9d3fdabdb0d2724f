"""Fail when modules of a package import each other, directly or round a longer circle.

Usage: ``python tools/import_cycles.py [PACKAGE_DIR]`` (default ``gpubackend``).

Every import counts, at module level or inside a function: a function-level
import hides a circle from the import system but not from a reader. An import
of ``package.module`` is an edge to that module; ``from package import name``
is an edge to ``package.name`` where that is a module, else to ``package``.
Importing a submodule runs its package's ``__init__`` first, but that is not
counted as an edge: otherwise every package that re-exports its submodules
would be a circle.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module of the package by dotted name; a package by its ``__init__``."""
    root = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module ``name`` imports anywhere in its body."""
    is_package = path.name == "__init__.py"
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                imported.add(submodule if submodule in modules else base)
    return {module for module in imported if module in modules and module != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(module: str) -> None:
        index[module] = lowlink[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                lowlink[module] = min(lowlink[module], lowlink[imported])
            elif imported in on_stack:
                lowlink[module] = min(lowlink[module], index[imported])
        if lowlink[module] == index[module]:
            component = []
            while (member := stack.pop()) != module:
                on_stack.discard(member)
                component.append(member)
            on_stack.discard(module)
            component.append(module)
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return components


def main() -> int:
    package_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "gpubackend")
    modules = module_names(package_dir)
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    cycles = import_cycles(graph)
    for cycle in cycles:
        print("import cycle:", " <-> ".join(cycle))
    if not cycles:
        print(f"no import cycles among {len(modules)} modules of {package_dir}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
