"""The project carries everything it reads: a copy of its tracked files, alone in a folder with no
siblings, runs the demo's own indexing step (`./run demo --chapters 2 --index-only`), and nothing
tracked names a folder beside the repository."""

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from tests.conftest import REPO_ROOT, subprocess_env

# Spelled in parts so this file does not match itself.
OUTSIDE_REFERENCES = ("../" + "shared", "SHARED" + "_DATA", "shared" + "/data")


def tracked_files() -> list[str]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
    return [name for name in done.stdout.decode().split("\0") if name]


def copy_alone(folder: Path) -> Path:
    """The tracked files copied into `folder/project`, the only thing in `folder`; the session's
    `.venv` linked in (its install is the same pyproject, so `./run` does not re-install)."""
    project = folder / "project"
    for name in tracked_files():
        if (REPO_ROOT / name).is_file():  # a file deleted but not yet staged is skipped
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, project / name)
    (project / ".venv").symlink_to(Path(sys.prefix))
    return project


def test_the_demo_indexes_from_a_copy_with_nothing_beside_it(
    es: Elasticsearch, es_url: str, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    project = copy_alone(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["project"]
    alias = index_name("selfcontained")
    done = subprocess.run(
        ["./run", "demo", "--chapters", "2", "--index-only"],
        cwd=project,
        env=subprocess_env(ES_URL=es_url, ES_INDEX=alias, HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "[3/4] Indexing 《三国演义》" in done.stdout and "2 documents" in done.stdout, done.stdout
    es.indices.refresh(index=alias)
    assert es.count(index=alias)["count"] > 0


@pytest.mark.parametrize("reference", OUTSIDE_REFERENCES)
def test_nothing_tracked_names_a_folder_beside_the_repository(reference: str) -> None:
    named = []
    for name in tracked_files():
        path = REPO_ROOT / name
        if name.startswith("data/") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images
            continue
        named += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if reference in line]
    assert named == []


def test_the_demo_banner_says_where_and_what_to_ask_and_never_a_key() -> None:
    from core.config import Settings
    from service.demo_banner import banner

    book = (REPO_ROOT / "data" / "sanguo" / "sanguo_yanyi.txt").read_text(encoding="utf-8")
    first_chapter = book[: book.index("第2章")]
    assert "桃园" in first_chapter and "字翼德" in first_chapter  # the examples are answered in chapter 1
    examples = (REPO_ROOT / "data" / "sanguo" / "demo_questions.txt").read_text(encoding="utf-8").split()
    assert len(examples) == 2 and "结义" in examples[0] and "张飞字" in examples[1]
    assert "data/sanguo/demo_questions.txt" in (REPO_ROOT / "run").read_text(encoding="utf-8")
    open_text = banner(Settings(_env_file=None, port=8123), examples, seconds=12)
    assert "Ready after 12 s: http://127.0.0.1:8123/" in open_text and "Key:   none" in open_text
    assert all(question in open_text for question in examples)
    keyed = banner(Settings(_env_file=None, api_keys=["s3cret-demo-key"]), examples)
    assert "required" in keyed and "s3cret-demo-key" not in keyed
