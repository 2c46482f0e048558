"""What a search returns: hits with their citation label, and the result of one mode."""

from typing import Any

from pydantic import BaseModel, computed_field

from core.documents import page_label, source_label
from core.schema import Mode
from retrieval.fusion import ListEvidence


class Hit(BaseModel):
    id: str
    score: float
    text: str
    title: str = ""
    source: str = ""
    chapter: int | None = None
    chapter_title: str | None = None
    doc_id: str = ""
    chunk_index: int = 0
    page_start: int | None = None
    page_end: int | None = None
    section: str | None = None  # heading path, e.g. "第三章 药物治疗 / 3.2 用药"
    # Hybrid only, why it was returned: per fused list, its 1-based rank and score there
    # (None: not returned by that list) and the list's contribution; they sum to `score`.
    explain: dict[str, ListEvidence] | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def page(self) -> int | str | None:
        """The page (3) or page range ("3-4") of a paged format such as PDF."""
        return page_label(self.page_start, self.page_end)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        """How this chunk is cited everywhere: 《指南》第 3 页 · 3.2 用药."""
        return source_label(
            title=self.title,
            source=self.source,
            chapter=self.chapter,
            chapter_title=self.chapter_title,
            page=self.page,
            section=self.section,
        )


class SearchResult(BaseModel):
    mode: Mode
    took_ms: float
    hits: list[Hit]


def hit_from_source(chunk_id: str, source: dict[str, Any], score: float) -> Hit:
    return Hit(
        id=chunk_id,
        score=float(score),
        text=source.get("text", ""),
        title=source.get("title") or "",
        source=source.get("source") or "",
        chapter=source.get("chapter"),
        chapter_title=source.get("chapter_title"),
        doc_id=source.get("doc_id") or "",
        chunk_index=source.get("chunk_index") or 0,
        page_start=source.get("page_start"),
        page_end=source.get("page_end"),
        section=source.get("section"),
    )
