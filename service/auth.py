"""Stand-in for the lead's service/auth.py (issue 20), with the same names; replaced at the merge."""

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException, Request
from fastapi import Path as PathParam

from core.kbs import KB_NAME_PATTERN
from retrieval.lists import EVERYTHING, DocumentAccess

Role = Literal["read", "write", "admin"]


@dataclass(frozen=True)
class Caller:
    name: str

    def may(self, kb: str, role: Role) -> bool:
        return True

    def document_access(self, kb: str) -> DocumentAccess:
        return EVERYTHING


async def get_caller() -> Caller:
    return Caller("everyone")


CallerDep = Annotated[Caller, Depends(get_caller)]


@dataclass(frozen=True)
class KbAccess:
    kb: str
    caller: Caller

    @property
    def documents(self) -> DocumentAccess:
        return self.caller.document_access(self.kb)


KbName = Annotated[str, PathParam(pattern=KB_NAME_PATTERN, max_length=100, description="knowledge-base name")]


def kb_access(role: Role) -> Callable[..., Coroutine[Any, Any, KbAccess]]:
    async def dependency(kb: KbName, caller: CallerDep, request: Request) -> KbAccess:
        es = request.app.state.es
        if not (es.indices.exists_alias(name=kb) or es.indices.exists(index=kb)):
            raise HTTPException(404, f"knowledge base {kb!r} does not exist")
        return KbAccess(kb, caller)

    return dependency
