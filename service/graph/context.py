"""Numbered contexts shared by the evaluator and the generator: order, token budget, citations.

The sources the client sent with the question come first, in its order, so they keep the numbers
it gave them ([1] is its source 1); then local passages, interleaved across sub-questions by their
rank within their own retrieval (so a multi-hop question keeps the best passage of every hop),
then web results in search order. When the estimated size exceeds the budget, the lowest-ranked
local passages go first, then the last web results, then the client's last sources; the web is
the evidence asked for when it is present.
"""

import hashlib
import re
from dataclasses import dataclass

from retrieval.conflicts import Conflict, ConflictSource
from service.graph.schemas import Citation, GivenSource, JudgedConflict
from service.graph.state import Passage
from service.websearch import WebResult

_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
_CITE = re.compile(r"\[(\d+(?:\s*[,，、]\s*\d+)*)\]")


@dataclass(frozen=True)
class NumberedContext:
    number: int
    passage: Passage | None = None
    web: WebResult | None = None
    given: GivenSource | None = None

    @property
    def text(self) -> str:
        source = self.passage or self.web or self.given
        return source.text if source else ""

    @property
    def key(self) -> str:
        """What identifies the source: a chunk id, `web:<url>` or `given:<the client's id>`."""
        if self.passage:
            return self.passage.id
        return f"web:{self.web.url}" if self.web else f"given:{self.given.id}" if self.given else ""


def estimate_tokens(text: str) -> int:
    """Rough count without a tokenizer download: a CJK character ~1 token, other text ~4 chars/token."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def ranked_passages(passages: dict[str, Passage]) -> list[Passage]:
    return sorted(passages.values(), key=lambda p: (p.rank, -p.score, p.id))


def select_contexts(
    passages: dict[str, Passage], web: list[WebResult], budget: int, given: list[GivenSource] | None = None
) -> tuple[list[NumberedContext], int]:
    """The contexts that fit `budget` tokens, numbered from 1, and how many were trimmed."""
    local, remote, theirs = ranked_passages(passages), list(web), list(given or [])
    items: list[Passage | WebResult | GivenSource] = [*local, *remote, *theirs]
    sizes = {id(item): estimate_tokens(item.text) + 30 for item in items}
    total = sum(sizes.values())
    trimmed = 0
    while total > budget and len(local) + len(remote) + len(theirs) > 1:
        dropped: Passage | WebResult | GivenSource = local.pop() if local else remote.pop() if remote else theirs.pop()
        total -= sizes[id(dropped)]
        trimmed += 1
    numbered = [NumberedContext(i, given=g) for i, g in enumerate(theirs, start=1)]
    numbered += [NumberedContext(len(numbered) + i, passage=p) for i, p in enumerate(local, start=1)]
    numbered += [NumberedContext(len(numbered) + i, web=w) for i, w in enumerate(remote, start=1)]
    return numbered, trimmed


def contexts_hash(contexts: list[NumberedContext]) -> str:
    """Identity of what the evaluator saw: the same question over the same contexts gets the same verdict."""
    digest = hashlib.sha256()
    for context in contexts:
        digest.update(f"{context.key}\x1f{context.text}\x1e".encode())
    return digest.hexdigest()[:32]


def cited_numbers(answer: str) -> list[int]:
    numbers: set[int] = set()
    for match in _CITE.finditer(answer):
        numbers.update(int(n) for n in re.split(r"\s*[,，、]\s*", match.group(1)))
    return sorted(numbers)


def citations(answer: str, contexts: list[NumberedContext]) -> list[Citation]:
    """Structured sources for every `[n]` the answer cites (unknown numbers are ignored)."""
    by_number = {c.number: c for c in contexts}
    return [citation_of(by_number[number]) for number in cited_numbers(answer) if number in by_number]


def citation_of(context: NumberedContext) -> Citation:
    """How a numbered context is cited: a local passage, a web page or the client's source."""
    number = context.number
    if context.passage:
        p = context.passage
        return Citation(
            number=number,
            kind="local",
            title=p.title or p.chapter_title or p.source,
            chapter=p.chapter,
            source=p.source,
            snippet=p.text[:160],
            page=p.page,
            section=p.section,
            sheet=p.sheet,
            rows=p.rows,
            slide=p.slide,
            label=p.label,
            chunk_id=p.id,
            text=p.text,
        )
    if context.web:
        w = context.web
        return Citation(
            number=number,
            kind="web",
            title=w.title,
            source=w.site_name,
            url=w.url,
            snippet=w.text[:160],
            label=w.title or w.url,
            text=w.text,
        )
    if context.given is None:
        raise ValueError(f"context [{number}] holds no source")
    return given_citation(number, context.given)


def conflict_source(context: NumberedContext, says: str) -> ConflictSource:
    cited = citation_of(context)
    return ConflictSource(
        number=cited.number, kind=cited.kind, title=cited.label or cited.title, url=cited.url, says=says
    )


def resolve_conflicts(judged: list[JudgedConflict], contexts: list[NumberedContext]) -> list[Conflict]:
    """The judgement's conflicts on the contexts it was shown: a source number it did not see is
    dropped, and a conflict left with fewer than two sources is no conflict."""
    by_number = {c.number: c for c in contexts}
    resolved = []
    for conflict in judged:
        sides = {claim.source: claim.says for claim in conflict.sources if claim.source in by_number}
        if len(sides) > 1:
            sources = [conflict_source(by_number[number], says) for number, says in sides.items()]
            resolved.append(Conflict(claim=conflict.claim, sources=sources))
    return resolved


def given_citation(number: int, source: GivenSource) -> Citation:
    """A source the client sent, cited under its own name (a link when the name is a URL)."""
    return Citation(
        number=number,
        kind="given",
        title=source.name,
        source=source.name,
        url=source.url,
        snippet=source.text[:160],
        label=source.name,
    )
