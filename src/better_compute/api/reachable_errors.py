"""Which domain errors a route can raise, read from the source: the refusals its OpenAPI entry lists.

Listing each operation's refusals by hand goes stale the first time a use case gains a check. The
errors are named where they are raised (`raise NotFound(...)`, `require_admin(...)`, which raises
`Forbidden`), so they are found by following names: from a route's function, its dependencies and its
route class's handler, through every function of `api/`, `service/` and `domain/` that a function
names (called, or handed on, as `store.transaction(_apply)` hands `_apply`), to the error classes they
name. A method of an object (`services.reports.accept`, called or handed on) is followed where exactly
one class of those packages defines a method of that name. Names caught (`except NotFound:`) do not count.

What this cannot see it over- or under-states in known ways, and `api/refusals.py` fills the gap with
rules that need no reading: a refusal raised by the storage layer (a stale generation, a name taken
under a race) is covered by "every write may answer 409"; one a route reaches only through a
callable stored at run time is not seen at all.
"""

from __future__ import annotations

import ast
import importlib
import threading
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path

from better_compute.domain.kernel.errors import DomainError

PACKAGE = "better_compute"
SCANNED = ("api", "service", "domain")
"""The packages whose functions are followed (storage's SQL raises through rules, not names)."""

_ROOT = Path(__file__).resolve().parent.parent


class _Module(ast.NodeVisitor):
    """One module's functions (`module.f`, `module.Class.method`) and the names each refers to."""

    def __init__(self, name: str, tree: ast.Module, is_package: bool) -> None:
        self.name = name
        self.is_package = is_package
        self.imports: dict[str, str] = {}
        self.local: set[str] = set()
        self.refs: dict[str, tuple[set[str], set[str]]] = {}
        """function -> (qualified names it refers to, attribute names called on objects)."""
        self.methods: dict[str, list[str]] = {}
        for node in tree.body:
            self._top(node)
        for inner in ast.walk(tree):  # imports inside functions (kept lazy for start-up time)
            if isinstance(inner, ast.ImportFrom):
                source = self._absolute(inner)
                for alias in inner.names:
                    self.imports.setdefault(alias.asname or alias.name, f"{source}.{alias.name}")

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.name.split(".")
        base = parts if self.is_package else parts[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def _top(self, node: ast.stmt) -> None:
        if isinstance(node, ast.ImportFrom):
            source = self._absolute(node)
            for alias in node.names:
                self.imports[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = alias.name
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.local.add(node.name)
            self.refs[f"{self.name}.{node.name}"] = _names(node)
        elif isinstance(node, ast.ClassDef):
            self.local.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    qualified = f"{self.name}.{node.name}.{item.name}"
                    self.refs[qualified] = _names(item, cls=node.name)
                    self.methods.setdefault(item.name, []).append(qualified)
        elif isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports
            for inner in node.body:
                self._top(inner)

    def resolve(self, dotted: str) -> str | None:
        """`pools.create` (a module imported as `pools`) → `better_compute.service.fleet.pools.create`."""
        head, _, rest = dotted.partition(".")
        if head in self.imports:
            target = self.imports[head]
        elif head in self.local:
            target = f"{self.name}.{head}"
        else:
            return None
        return f"{target}.{rest}" if rest else target


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _names(
    function: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None = None
) -> tuple[set[str], set[str]]:
    """The dotted names a function refers to (outside `except` clauses), with `self.x` as
    `Class.x`, and the attribute names it reads (calls or hands on) of anything."""
    caught = {id(h.type) for h in ast.walk(function) if isinstance(h, ast.ExceptHandler) and h.type}
    caught_parts = {
        id(n)
        for h in ast.walk(function)
        if isinstance(h, ast.ExceptHandler) and h.type
        for n in ast.walk(h.type)
    }
    names: set[str] = set()
    called: set[str] = set()
    for node in ast.walk(function):
        if id(node) in caught or id(node) in caught_parts:
            continue
        if isinstance(node, ast.Name | ast.Attribute):
            dotted = _dotted(node)
            if dotted is None:
                continue
            if cls is not None and dotted.split(".")[0] in ("self", "cls"):
                names.add(f"{cls}.{dotted.partition('.')[2]}")
            else:
                names.add(dotted)
        if isinstance(node, ast.Attribute):  # called, or handed on (`run_in_threadpool(x.accept, ...)`)
            called.add(node.attr)
    return names, called


def _modules() -> Iterator[_Module]:
    for package in SCANNED:
        for path in sorted((_ROOT / package).rglob("*.py")):
            relative = path.relative_to(_ROOT).with_suffix("")
            parts = [PACKAGE, *relative.parts]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            yield _Module(".".join(parts), ast.parse(path.read_text(encoding="utf-8")), is_package)


class SourceGraph:
    """The functions of `api/`, `service/` and `domain/` and the names each refers to."""

    def __init__(self) -> None:
        self.edges: dict[str, set[str]] = {}
        methods: dict[str, list[str]] = {}
        modules = list(_modules())
        for module in modules:
            for name, found in module.methods.items():
                methods.setdefault(name, []).extend(found)
        for module in modules:
            for function, (names, called) in module.refs.items():
                targets: set[str] = set()
                for dotted in names:
                    if (
                        dotted.split(".")[0] in module.local
                        and "." in dotted
                        and dotted.split(".")[0][0].isupper()
                    ):
                        targets.add(f"{module.name}.{dotted}")  # self.method → Class.method
                    resolved = module.resolve(dotted)
                    if resolved is not None:
                        targets.add(resolved)
                for attribute in called:
                    candidates = methods.get(attribute, [])
                    if len(candidates) == 1:
                        targets.add(candidates[0])
                self.edges[function] = targets

    def reachable(self, roots: Iterable[str]) -> set[str]:
        """Every name reachable from `roots` (qualified function names)."""
        seen: set[str] = set()
        todo = list(roots)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo.extend(self.edges.get(name, ()))
        return seen

    def errors(self, roots: Iterable[str]) -> frozenset[type[DomainError]]:
        """The domain error classes that the functions reachable from `roots` name."""
        return frozenset(found for name in self.reachable(roots) if (found := _error_class(name)) is not None)


@cache
def _error_class(name: str) -> type[DomainError] | None:
    module, _, attribute = name.rpartition(".")
    if not module.startswith(f"{PACKAGE}.domain") and not module.startswith(f"{PACKAGE}.api"):
        return None
    try:
        found = getattr(importlib.import_module(module), attribute, None)
    except ImportError:
        return None
    if isinstance(found, type) and issubclass(found, DomainError) and found is not DomainError:
        return found
    return None


def qualified(function: Callable[..., object]) -> str:
    """The name the graph knows `function` by (`module.function`, `module.Class.method`)."""
    return f"{function.__module__}.{function.__qualname__}"


_GRAPH_LOCK = threading.Lock()
"""One parse at a time: CPython 3.11's `ast.parse` in two threads at once can fail ("AST constructor
recursion depth mismatch")."""


@cache
def graph() -> SourceGraph:
    """The graph of this installation's source, read once per process. An installation without its
    `.py` files (compiled only, or zipped) cannot document its refusals, and says so rather than
    answering a document that lists none."""
    with _GRAPH_LOCK:
        found = SourceGraph()
    if not found.edges:
        raise RuntimeError(
            f"the OpenAPI document is derived from better_compute's source files, and none were found"
            f" under {_ROOT}: install the package with its .py files"
        )
    return found


__all__ = ["SourceGraph", "graph", "qualified"]
