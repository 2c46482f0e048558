"""The knowledge bases a caller may use through a protocol: the one rule every protocol applies.

A protocol never names a base the caller may not read: it is not listed (`/v1/models`, MCP's
`list_knowledge_bases`) and asking for it, or for a name no base could have, is "does not
exist" (OpenAI's 404, Dify's 2001), so a caller learns nothing of what it may not see. The
check itself is `KnowledgeBases.open`, as for every HTTP route.
"""

from core.kbs import InvalidKnowledgeBaseName
from service.kbs import BaseAccess, KnowledgeBases, UnknownKnowledgeBase
from service.principals import Caller


def open_base(kbs: KnowledgeBases, caller: Caller, name: str | None) -> BaseAccess:
    """`name` (None: the default base) with the caller's scope, if `caller` may read it, else `UnknownKnowledgeBase`."""
    try:
        return kbs.open(caller, name)
    except InvalidKnowledgeBaseName:
        raise UnknownKnowledgeBase(str(name), kbs.readable(caller, listing=False)) from None
