"""The package layout of the contributing guide holds: the import rule, module size, docstrings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINDS = (
    "tensor", "images", "text", "streaming", "chat", "image_text", "preference", "time_series",
    "audio", "detection",
)  # fmt: skip
#: Shared layers: what two data kinds need, below both, named for what they hold: remote reads
#: (streams and text), image decoding and transforms (image folders and image streams), and the
#: shard layer (every file format, the shard index, the writer: streams and text read files
#: only through it), tokenizing (a tokenizer's fixed-length ids and pad id), tokens (the token
#: store, its inputs, packing and blends: text and chat) and conversations (chat templates and
#: loss masks: chat and image-text). The stream engine (exactly once, resumable, elastic,
#: mixed) sits on the shard layer; the stream parts (splits, loaders, image records: what the
#: stream DataModules compose) on it. Each maps to the layers it may import, besides core and
#: collates.
LAYERS = {
    "remote": (),
    "imaging": (),
    "tokenizing": (),
    "shards": ("remote", "imaging"),
    "tokens": ("shards", "remote", "imaging", "tokenizing"),
    "conversations": ("shards", "remote", "imaging", "tokenizing", "tokens"),
    "stream_engine": ("remote", "imaging", "shards"),
    "stream_parts": ("remote", "imaging", "shards", "stream_engine"),
}
SHARED = tuple(LAYERS)
#: Modules of the shard layer that parse a file format: nothing outside it may parse one.
PARSERS = ("csv", "json", "orjson", "tarfile", "pyarrow.parquet", "pyarrow.json")
MAX_LINES = 500
MODULES = sorted(p for pkg in ("datamodules", "collates") for p in (ROOT / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def area(module: str) -> str:
    """``core``, a shared layer, a data kind, ``tools``, ``collates`` or ``root`` (the package
    itself)."""
    parts = module.split(".")
    if parts[0] == "collates":
        return "collates"
    return parts[1] if len(parts) > 1 and parts[1] not in ("__main__",) else "root"


def imported_modules(path: Path) -> set[str]:
    """Every ``datamodules`` / ``collates`` module this file imports, at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in ("datamodules", "collates")}


def allowed(source: str, target: str) -> bool:
    """The import rule: imports point down only."""
    if source == target or source == "root":
        return True
    if source == "collates":
        return False  # collates imports nothing from datamodules
    if source == "core":
        return target == "core"
    if source == "tools":
        return target in ("core", "collates")
    if source in SHARED:  # below the kinds: never a kind, a tool or a layer above it
        return target in ("core", "collates", *LAYERS[source])
    # a data kind: core, tools, collates and the shared layers, never another data kind
    return target in ("core", "tools", "collates", *SHARED)


def test_the_layout_has_every_area() -> None:
    areas = {area(module_name(p)) for p in MODULES}
    assert areas == {"root", "core", "tools", "collates", *KINDS, *SHARED}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    source = area(module_name(path))
    wrong = []
    for target_module in sorted(imported_modules(path)):
        if target_module in ("datamodules", "collates"):
            target = "root" if target_module == "datamodules" else "collates"
        else:
            target = area(target_module)
        if target == "root" and source != "root":
            wrong.append(target_module)  # the package root imports everything: never upward
        elif target != "root" and not allowed(source, target):
            wrong.append(target_module)
    assert not wrong, f"{module_name(path)} ({source}) must not import {wrong}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_small_and_says_what_it_is_for(path: Path) -> None:
    text = path.read_text()
    assert text.count("\n") <= MAX_LINES, f"{path.name}: {text.count(chr(10))} lines"
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring and len(docstring.split()) >= 5, f"{path.name} opens with no docstring"


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    # The checker itself: a core module importing a tool, and a kind importing another kind.
    assert not allowed("core", "tools") and not allowed("text", "streaming")
    assert not allowed("collates", "core") and allowed("images", "tools")
    # A shared layer sits below the kinds: they import it, it imports none of them.
    assert allowed("text", "remote") and allowed("streaming", "remote")
    assert allowed("images", "imaging") and allowed("streaming", "imaging")
    assert not allowed("remote", "streaming") and not allowed("remote", "tools")
    assert allowed("text", "shards") and allowed("streaming", "shards")
    assert allowed("shards", "remote") and allowed("shards", "imaging")
    assert not allowed("shards", "streaming") and not allowed("shards", "text")
    assert not allowed("remote", "shards") and not allowed("imaging", "shards")
    assert not allowed("shards", "tools") and not allowed("core", "shards")
    assert not allowed("imaging", "images") and not allowed("imaging", "remote")
    assert not allowed("core", "remote") and not allowed("collates", "remote")
    assert not allowed("core", "imaging") and not allowed("collates", "imaging")
    assert allowed("text", "conversations") and allowed("conversations", "shards")
    assert not allowed("conversations", "text") and not allowed("shards", "conversations")
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from datamodules.tools.tuner import choose\n")
    assert imported_modules(bad) == {"datamodules.tools.tuner", "datamodules.tools.tuner.choose"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_declares_all(path: Path) -> None:
    tree = ast.parse(path.read_text())
    declared = [
        node
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(target, ast.Name) and target.id == "__all__"
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    assert declared, f"{module_name(path)} declares no __all__"


def parsers_imported(path: Path) -> set[str]:
    """The file-format parsers (:data:`PARSERS`) a module imports, at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found.update(name for name in names if name in PARSERS)
    return found


#: Outside the shard layer, the modules that use JSON for the project's own small files and
#: fingerprints (the token store's metadata, a tokenizer's fingerprint, a split's listing, the
#: hash of a list of conversations), never for reading records.
OWN_JSON = {
    "datamodules.tokens.store",
    "datamodules.tokens.vocab",
    "datamodules.tokenizing.fingerprint",
    "datamodules.conversations.records",
    "datamodules.stream_parts.splits",
    "datamodules.stream_engine.position",
    "datamodules.time_series.store",
    "datamodules.time_series.digest",
    "datamodules.time_series.datamodule",
    "datamodules.audio.header_cache",
}


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in MODULES
        if area(module_name(p))
        in (
            "text",
            "streaming",
            "image_text",
            "stream_engine",
            "stream_parts",
            "tokenizing",
            "tokens",
            "chat",
            "time_series",
            "audio",
        )
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_data_kinds_read_files_only_through_the_shard_layer(path: Path) -> None:
    parsers = parsers_imported(path)
    if module_name(path) in OWN_JSON:
        parsers -= {"json"}
    assert not parsers, f"{module_name(path)} parses files itself with {sorted(parsers)}"


def module_graph(paths: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Which modules of the package each module imports, at any depth (inside functions and
    ``TYPE_CHECKING`` blocks too), relative imports resolved; a name imported from a package
    counts as its submodule when there is one."""
    names = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in paths
    }
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for a in node.names:
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in names else base
                    if target in names:
                        out.add(target)
        graph[name] = out - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one
    module (Tarjan), each sorted. The package roots, which import everything lazily, are left
    out."""
    graph = {m: {t for t in ts if "." in t} for m, ts in graph.items() if "." in m}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_the_package_has_no_import_circle() -> None:
    paths = [p for p in MODULES if p.relative_to(ROOT).parts[0] == "datamodules"]
    assert circles(module_graph(paths)) == []


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    # Two modules that import each other, one inside a function and one under TYPE_CHECKING,
    # and a third that only imports one of them: one circle of two.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    (pkg / "c.py").write_text("from pkg import a\n")
    graph = module_graph(sorted(pkg.glob("*.py")), tmp_path)
    assert graph["pkg.c"] == {"pkg.a"}
    assert circles(graph) == [["pkg.a", "pkg.b"]]
