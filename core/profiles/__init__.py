"""The indexing side of text profiles (`retrieval.profiles` holds the answering side): the naming
rules a kind of text needs while aliases are mined (`core.aliases.mine`), and the marks its chapter
headings are numbered with. The default path runs no naming rule and cuts at 第N章 only."""

from core.aliases import NamingRule


def naming_rules(profile: str | None) -> tuple[NamingRule, ...]:
    """The extra naming rules of the profile `profile` (none for the default path or a profile without
    any); the profile's module is imported only here, on demand."""
    if profile == "classical-novel":
        from core.profiles import classical_novel_aliases

        return classical_novel_aliases.RULES
    return ()


def chapter_marks(profile: str | None) -> str:
    """What the profile's chapter headings are numbered with: a classical novel's 第N回 as well as
    第N章 (`indexing.loaders.chapters_of`)."""
    return "章回" if profile == "classical-novel" else "章"
