"""Who is calling and what they may do: keys → principals → a role per knowledge base.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, SecretStr

from core.access import ALL_DOCUMENTS, DocumentAccess, Scope
from core.config import Settings

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
        return ALL_DOCUMENTS if self.may(kb, "admin") else DocumentAccess(groups=self.groups)

    def scope(self, kb: str) -> Scope:
        """What this caller's reads of `kb` see: the one place a scope is made from a caller."""
        return Scope(kb, self.document_access(kb))

    def sees_work_of(self, kb: str, owner: str) -> bool:
        """A job, an evaluation or a question set is seen by its owner while they may read its base,
        and by the base's admins: it may name or quote documents of groups other readers do not hold."""
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
