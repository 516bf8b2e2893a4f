"""No import circle anywhere in ``src/`` (issue 26): a module never imports, directly or through
others, one that imports it back. Imports under ``if TYPE_CHECKING:`` and inside functions count
(grimp reads every import statement). Two circles were cut on 2026-12-03: the controller's nine
modules closed by ``users.py`` (deleting a user is now ``controller.platform.user_deletion``, above the
services; ``Identity`` is ``controller.model.identity``) and ``runtime.adaptive`` <-> ``adaptive_torch``
(``AdaptiveDDP`` is the package's lazy name)."""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest

__all__: list[str] = []


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module in ``graph`` (Tarjan's algorithm,
    iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.find_modules_directly_imported_by(step)))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _graph(package: str) -> grimp.ImportGraph:
    return grimp.build_graph(package, include_external_packages=False, cache_dir=None)


def test_src_has_no_import_circle() -> None:
    graph = _graph("paddlecloud")
    assert len(graph.modules) > 200  # the whole package was read (255 modules on 2026-12-03)
    assert circles(graph) == []


def test_a_circle_is_found_also_through_type_checking_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "circled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circled import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circled import c\n"
    )
    (pkg / "c.py").write_text("def f():\n    from circled import a\n")
    (pkg / "d.py").write_text("from circled import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert circles(_graph("circled")) == [["circled.a", "circled.b", "circled.c"]]
    assert "circled" not in sys.modules  # read, never imported
