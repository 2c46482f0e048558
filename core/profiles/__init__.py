"""The indexing side of text profiles (`retrieval.profiles` holds the answering side): the naming
rules a kind of text needs while aliases are mined (`core.aliases.mine`). The default path runs none."""

from core.aliases import NamingRule


def naming_rules(profile: str | None) -> tuple[NamingRule, ...]:
    """The extra naming rules of the profile `profile` (none for the default path or a profile without
    any); the profile's module is imported only here, on demand."""
    if profile == "classical-novel":
        from core.profiles import classical_novel_aliases

        return classical_novel_aliases.RULES
    return ()
