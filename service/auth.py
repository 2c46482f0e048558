"""Who is calling and what they may read: keys → principals → a role per knowledge base.

Keys come from `KEYS_FILE` (JSON or YAML: `{"principals": [{"name", "key", "role"?, "kbs"?, "groups"?}]}`)
and from `API_KEYS` (each an all-access admin key, as before principals existed). With neither,
the service is open: every caller is an admin, as it always was without keys.

A role is `read` < `write` < `admin`; a principal's `role` applies to every base, its `kbs`
map to the bases it names (the higher of the two wins). Document groups narrow what a
`read`/`write` caller sees inside a base; an admin of a base reads all of it. A base the caller
may not read is answered exactly like a base that does not exist, so nothing hints at it.
"""

import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import yaml
from elasticsearch import Elasticsearch
from fastapi import Depends, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, SecretStr

from core.config import Settings
from core.kbs import KB_NAME_PATTERN, check_kb_name, list_kb_names
from core.store import IndexNotFoundError
from retrieval.lists import EVERYTHING, DocumentAccess

Role = Literal["read", "write", "admin"]
_RANK: dict[str, int] = {"read": 1, "write": 2, "admin": 3}


class Principal(BaseModel):
    """One entry of the key file."""

    name: str = Field(min_length=1)
    key: SecretStr
    role: Role | None = None  # on every knowledge base
    kbs: dict[str, Role] = Field(default_factory=dict)  # per base
    groups: list[str] = Field(default_factory=list)


class KeyFile(BaseModel):
    principals: list[Principal]


def load_principals(settings: Settings) -> list[Principal]:
    """The principals of `KEYS_FILE` and one all-access admin per `API_KEYS` key."""
    principals = [Principal(name=f"api-key-{n}", key=key, role="admin") for n, key in enumerate(settings.api_keys, 1)]
    if settings.keys_file:
        path = Path(settings.keys_file)
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text) if path.suffix in {".yaml", ".yml"} else json.loads(text)
        principals += KeyFile.model_validate(data).principals
    return principals


@dataclass(frozen=True)
class Caller:
    """The principal behind a request (`everyone`: the open service without keys)."""

    name: str
    role: Role | None = None
    kbs: dict[str, Role] = field(default_factory=dict)
    groups: frozenset[str] = frozenset()

    @classmethod
    def of(cls, principal: Principal) -> "Caller":
        return cls(principal.name, principal.role, dict(principal.kbs), frozenset(principal.groups))

    def role_for(self, kb: str) -> Role | None:
        roles: list[Role] = [role for role in (self.role, self.kbs.get(kb)) if role is not None]
        return max(roles, key=_RANK.__getitem__, default=None)

    def may(self, kb: str, role: Role) -> bool:
        held = self.role_for(kb)
        return held is not None and _RANK[held] >= _RANK[role]

    @property
    def has_any_role(self) -> bool:
        return self.role is not None or bool(self.kbs)

    @property
    def admin(self) -> bool:
        """An admin of the service (of every base): may create and delete bases."""
        return self.role == "admin"

    def document_access(self, kb: str) -> DocumentAccess:
        """The documents of `kb` this caller reads: all of them as the base's admin, else its groups'."""
        return EVERYTHING if self.may(kb, "admin") else DocumentAccess(groups=self.groups)

    def sees_job(self, kb: str, owner: str) -> bool:
        """A job is seen by its owner while they may read its base, and by the base's admins: its
        file names and errors may name documents of groups other readers do not hold."""
        return (owner == self.name and self.may(kb, "read")) or self.may(kb, "admin")

    @property
    def administered(self) -> list[str]:
        """The bases this caller administers by a per-base role (a service admin administers all)."""
        return sorted(kb for kb, role in self.kbs.items() if role == "admin")

    def readable(self, names: list[str]) -> list[str]:
        return [name for name in names if self.may(name, "read")]


EVERYONE = Caller("everyone", role="admin")


class Keys:
    """The accepted keys and their callers; a key is compared in constant time against each one."""

    def __init__(self, principals: list[Principal]) -> None:
        self._principals = principals

    @property
    def open(self) -> bool:
        return not self._principals

    def caller(self, presented: str) -> Caller | None:
        found = None
        for principal in self._principals:
            if hmac.compare_digest(presented.encode(), principal.key.get_secret_value().encode()):
                found = principal
        return EVERYONE if self.open else (Caller.of(found) if found else None)


class UnknownKnowledgeBase(LookupError):
    """A name that is not among the caller's readable bases (absent, or not the caller's: the same answer)."""

    def __init__(self, name: str, readable: list[str], *, no_access: bool = False) -> None:
        super().__init__(f"knowledge base {name!r} does not exist; available: {', '.join(readable) or 'none'}")
        self.name = name
        self.readable = readable
        self.no_access = no_access  # the caller holds no role on any base


class NotPermitted(PermissionError):
    """The caller may read the base but not do this to it."""

    def __init__(self, kb: str, role: Role) -> None:
        super().__init__(f"this needs the {role} role on knowledge base {kb!r}")


class KnowledgeBases:
    """Which bases exist (cached briefly: every request resolves its base) and which a caller may use."""

    def __init__(self, es: Elasticsearch, default: str, ttl_s: float = 5.0) -> None:
        self.es = es
        self.default = default
        self._ttl_s = ttl_s
        self._names: tuple[float, list[str]] | None = None

    def names(self) -> list[str]:
        now = time.monotonic()
        if self._names is None or now - self._names[0] > self._ttl_s:
            self._names = (now, list_kb_names(self.es))
        return self._names[1]

    def forget(self) -> None:
        """After a base is created or deleted."""
        self._names = None

    def readable(self, caller: Caller) -> list[str]:
        """The bases `caller` may read, the default base first."""
        return sorted(caller.readable(self.names()), key=lambda name: (name != self.default, name))

    def open(self, caller: Caller, name: str | None, role: Role = "read") -> str:
        """`name` (None: the default base) when it exists and `caller` holds `role` on it.

        Unreadable is the same `UnknownKnowledgeBase` as absent; readable without `role` is `NotPermitted`.
        """
        chosen = check_kb_name(name) if name is not None else self.default
        if not caller.may(chosen, "read") or chosen not in self.names():
            self.forget()  # a base created by the indexing job a moment ago is seen at once
            if caller.may(chosen, "read") and chosen == self.default and chosen not in self.names():
                raise IndexNotFoundError(chosen)  # the service's own base, not built yet: say how to build it
            if not caller.may(chosen, "read") or chosen not in self.names():
                raise UnknownKnowledgeBase(chosen, self.readable(caller), no_access=not caller.has_any_role)
        if not caller.may(chosen, role):
            raise NotPermitted(chosen, role)
        return chosen


# --- FastAPI dependencies -----------------------------------------------------------------


def presented_key(headers: dict[str, str]) -> str:
    """The key of a request's (lower-cased) headers: `X-API-Key`, or `Authorization: Bearer <key>`."""
    scheme, _, bearer = headers.get("authorization", "").partition(" ")
    return headers.get("x-api-key") or (bearer.strip() if scheme.lower() == "bearer" else "")


_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="a key of KEYS_FILE or API_KEYS")
_bearer = HTTPBearer(auto_error=False, description="a key of KEYS_FILE or API_KEYS")


def unauthorized() -> HTTPException:
    return HTTPException(
        status_code=401,
        detail="missing or invalid API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`",
        headers={"WWW-Authenticate": "Bearer"},
    )


async def get_caller(
    request: Request,
    api_key: Annotated[str | None, Depends(_api_key_header)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The caller of a request; a missing or wrong key is a 401 (when the service has keys)."""
    caller = request.app.state.keys.caller(api_key or (bearer.credentials if bearer else ""))
    if caller is None:
        raise unauthorized()
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_kbs(request: Request) -> KnowledgeBases:
    return request.app.state.kbs


KnowledgeBasesDep = Annotated[KnowledgeBases, Depends(get_kbs)]


@dataclass(frozen=True)
class KbAccess:
    """A route's knowledge base, checked: it exists and the caller holds the route's role on it."""

    kb: str
    caller: Caller

    @property
    def documents(self) -> DocumentAccess:
        return self.caller.document_access(self.kb)


KbName = Annotated[str, PathParam(pattern=KB_NAME_PATTERN, max_length=100, description="knowledge-base name")]


def kb_access(role: Role) -> Callable[..., KbAccess]:
    """A dependency for routes with a `{kb}` path parameter that need `role` on it."""

    def dependency(kb: KbName, caller: CallerDep, kbs: KnowledgeBasesDep) -> KbAccess:  # ES: on the threadpool
        return KbAccess(kbs.open(caller, kb, role), caller)

    return dependency
