"""The test session keeps out of the service's own indices (issue 35): a child process gets the
session's `JOBS_INDEX`, `JUDGEMENTS_INDEX` and `QUESTIONS_INDEX`, and the end-of-session check
names any `rag-*` index a child created, which is how a new user's first `./run test` failed."""

import subprocess
import sys
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from tests.conftest import REPO_ROOT, TEST_INDICES, service_indices, service_indices_changed, subprocess_env

# What a child service does first with its jobs index: `JobStore._ensure` creates it.
CREATE_JOBS_INDEX = """
from elasticsearch import Elasticsearch
from core.config import Settings
from service.jobs.store import JobStore
settings = Settings(_env_file=None)
JobStore(Elasticsearch(settings.es_url), settings.jobs_index)._ensure()
print(settings.jobs_index)
"""


def run_child(env: dict[str, str], workdir: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CREATE_JOBS_INDEX], cwd=workdir, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_child_gets_the_sessions_indices_unless_a_test_sets_its_own(es_url: str, tmp_path: Path) -> None:
    env = subprocess_env(ES_URL=es_url, PYTHONPATH=str(REPO_ROOT))
    assert {name: env[name] for name in TEST_INDICES} == TEST_INDICES
    assert subprocess_env(JOBS_INDEX="test-jobs-own")["JOBS_INDEX"] == "test-jobs-own"
    assert run_child(env, tmp_path) == TEST_INDICES["JOBS_INDEX"]


def test_the_session_check_names_a_service_index_a_child_created(
    es: Elasticsearch, es_url: str, tmp_path: Path
) -> None:
    before = service_indices(es)
    if "rag-jobs" in before:
        pytest.skip("this node already holds rag-jobs (ES_URL names a node of someone else's): nothing to prove here")
    bare = {"PATH": subprocess_env()["PATH"], "LANG": "C.UTF-8", "ES_URL": es_url, "PYTHONPATH": str(REPO_ROOT)}
    try:
        assert run_child(bare, tmp_path) == "rag-jobs"  # the child of issue 35: no JOBS_INDEX given
        change = service_indices_changed(before, service_indices(es))
        assert "created ['rag-jobs']" in change, change
    finally:
        es.options(ignore_status=404).indices.delete(index="rag-jobs")
    assert service_indices_changed(before, service_indices(es)) == ""


def test_the_check_sees_names_and_counts() -> None:
    assert service_indices_changed({"rag-jobs": 2}, {"rag-jobs": 2}) == ""
    assert "deleted ['rag-jobs']" in service_indices_changed({"rag-jobs": 0}, {})
    assert "counts {'rag-jobs': (0, 1)}" in service_indices_changed({"rag-jobs": 0}, {"rag-jobs": 1})
