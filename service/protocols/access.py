"""The knowledge bases a caller may read: the one list every protocol offers and accepts.

A protocol never names a base the caller may not read: it is not listed (`/v1/models`, MCP's
`list_knowledge_bases`) and asking for it is "does not exist" (OpenAI's 404, Dify's 2001), so a
caller learns nothing of what it may not see.
"""

from dataclasses import replace

from core.config import Settings
from service.graph import WorkflowDeps, ensure_answerable


class UnknownKnowledgeBase(LookupError):
    """A name that is not among the caller's readable bases (absent, or not the caller's)."""

    def __init__(self, name: str, readable: list[str]) -> None:
        super().__init__(f"knowledge base {name!r} does not exist; available: {', '.join(readable) or 'none'}")
        self.name = name


def readable_kbs(settings: Settings) -> list[str]:
    """The bases an accepted key may read, default first: the service's one base, ES_INDEX."""
    return [settings.es_index]


def resolve_kb(settings: Settings, name: str | None) -> str:
    """`name` (None: the default base) if the caller may read it, else `UnknownKnowledgeBase`."""
    readable = readable_kbs(settings)
    chosen = readable[0] if name is None and readable else name
    if chosen not in readable:
        raise UnknownKnowledgeBase(str(name), readable)
    return chosen


def workflow_for(workflow: WorkflowDeps, kb: str) -> WorkflowDeps:
    """The workflow answering from `kb`; `ANSWER_MODE=llm` without a model is a 503 before any answer starts."""
    ensure_answerable(workflow)
    return workflow if workflow.index == kb else replace(workflow, index=kb)
