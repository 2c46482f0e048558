"""The knowledge bases a caller may use through a protocol: the one rule every protocol applies.

A protocol never names a base the caller may not read: it is not listed (`/v1/models`, MCP's
`list_knowledge_bases`) and asking for it, or for a name no base could have, is "does not
exist" (OpenAI's 404, Dify's 2001), so a caller learns nothing of what it may not see.
"""

from core.kbs import InvalidKnowledgeBaseName
from service.auth import Caller, KnowledgeBases, UnknownKnowledgeBase
from service.graph import WorkflowDeps, ensure_answerable


def resolve_kb(kbs: KnowledgeBases, caller: Caller, name: str | None) -> str:
    """`name` (None: the default base) if `caller` may read it, else `UnknownKnowledgeBase`."""
    try:
        return kbs.open(caller, name)
    except InvalidKnowledgeBaseName:
        raise UnknownKnowledgeBase(str(name), kbs.readable(caller)) from None


def workflow_for(workflow: WorkflowDeps, kb: str, caller: Caller) -> WorkflowDeps:
    """The workflow answering from `kb` with what `caller` may read there; `ANSWER_MODE=llm` without a
    model is a 503 before any answer starts."""
    ensure_answerable(workflow)
    return workflow.for_caller(kb, caller.document_access(kb))
