"""`.jsonl`: one `{"id", "text", "title"?, "metadata"?, "access"?}` object per line; `id` becomes the doc_id.

A malformed line is reported with its number and the other lines are kept.
"""

from pathlib import Path
from typing import Any

from core.contract import parse_json
from core.documents import Document
from core.schema import check_metadata
from indexing.loaders.base import LoadError
from indexing.loaders.text import decode_bytes


def parse_jsonl(data: bytes, path: Path, source: str, errors: list[LoadError]) -> list[Document]:
    """One document per line; a malformed line is reported (path, line) and the rest kept."""
    documents: list[Document] = []
    for number, line in enumerate(decode_bytes(data).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            documents.append(_jsonl_document(parse_json(line), source))
        except ValueError as err:
            errors.append(LoadError(path=str(path), line=number, message=str(err), reason="bad_line"))
    return documents


def _jsonl_document(obj: Any, source: str) -> Document:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    doc_id, text = obj.get("id"), obj.get("text")
    if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or str(doc_id) == "":
        raise ValueError('missing or invalid "id" (a non-empty string or an integer)')
    if not isinstance(text, str) or not text.strip():
        raise ValueError('missing or empty "text"')
    title, metadata = obj.get("title", ""), obj.get("metadata", {})
    if not isinstance(title, str):
        raise ValueError('"title" must be a string')
    if not isinstance(metadata, dict):
        raise ValueError('"metadata" must be an object')
    check_metadata(metadata)
    access = obj.get("access", [])
    if not isinstance(access, list) or not all(isinstance(group, str) and group.strip() for group in access):
        raise ValueError('"access" must be a list of group names')
    return Document(
        doc_id=str(doc_id), text=text, source=source, title=title, metadata=metadata, access=sorted(set(access))
    )
