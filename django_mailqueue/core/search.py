"""What the queue list's search box matches (docs/admin.md, "Search"): its text as terms every store can read
from an index — a recipient's domain (`@example.com`), the start of a recipient's address (a whole address is
one), or a whole word of the subject, in any case — and the reference test of an item against them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: A word of a subject: letters, digits and underscores (Python's `\w`), compared lowercase.
WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Term:
    """One whitespace-separated part of a search, lowercase. `@<domain>` is a recipient domain (`domain`);
    any other text is the start of a recipient's address and, when it is one word, also a subject word."""

    text: str

    @property
    def domain(self) -> str | None:
        """The recipient domain a `@<domain>` term names, else None (`@` alone is an address start: none has it)."""
        return self.text[1:] if self.text.startswith("@") and len(self.text) > 1 else None

    @property
    def word(self) -> bool:
        """Whether the term may be a subject's word (it is one run of word characters)."""
        return self.domain is None and WORD.fullmatch(self.text) is not None


def terms(search: str) -> tuple[Term, ...]:
    """The search's terms: its whitespace-separated parts, lowercase, each once, in order."""
    return tuple(Term(part) for part in dict.fromkeys(search.lower().split()))


def subject_words(subject: str) -> set[str]:
    """The words of a subject, lowercase."""
    return set(WORD.findall(subject.lower()))


def term_matches(term: Term, subject: str, addresses: Iterable[str], domains: Iterable[str]) -> bool:
    """Whether an item (its subject, its recipients' addresses and domains) matches one term."""
    if term.domain is not None:
        return term.domain in domains
    if any(address.lower().startswith(term.text) for address in addresses):
        return True
    return term.word and term.text in subject_words(subject)
