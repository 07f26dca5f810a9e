"""The docs against the code: the settings reference matches `conf.KEYS`, and every relative link resolves."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from django_mailqueue.conf import _TIMEOUT_KEYS, KEYS, Timeouts
from django_mailqueue.exceptions import CODES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SETTINGS_PAGE = DOCS / "settings.md"


def markdown_table(text: str, header: list[str]) -> list[list[str]]:
    """The body rows of the first Markdown table whose header cells are exactly `header`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _cells(line) == header:
            rows = []
            for row in lines[i + 2 :]:
                if not row.strip().startswith("|"):
                    break
                cells = _cells(row)
                assert len(cells) == len(header), f"a row of the {header} table has {len(cells)} cells: {row}"
                rows.append(cells)
            return rows
    raise AssertionError(f"no table with the header {header} in the page")


def _cells(line: str) -> list[str]:
    line = line.strip()
    if not line.startswith("|") or not line.endswith("|"):
        return []
    return [cell.strip() for cell in line[1:-1].split("|")]


def unquote_code(cell: str) -> str:
    """The text inside a cell's backticks (`x` -> x)."""
    match = re.fullmatch(r"`([^`]*)`", cell)
    assert match, f"expected one `code` span, got {cell!r}"
    return match.group(1)


def literal(cell: str) -> Any:
    return ast.literal_eval(unquote_code(cell))


def settings_rows() -> dict[str, tuple[Any, str]]:
    rows = markdown_table(SETTINGS_PAGE.read_text(), ["Key", "Default", "Check", "Meaning"])
    documented: dict[str, tuple[Any, str]] = {}
    for key, default, check, _meaning in rows:
        name = unquote_code(key)
        assert name not in documented, f"{name} is documented twice"
        documented[name] = (literal(default), unquote_code(check))
    return documented


def test_every_setting_is_documented_with_its_default_and_check_id() -> None:
    documented = settings_rows()
    assert sorted(documented) == sorted(k.name for k in KEYS)
    for key in KEYS:
        default, check_id = documented[key.name]
        assert default == key.default, f"{key.name}: the page says {default!r}, the code {key.default!r}"
        assert type(default) is type(key.default), f"{key.name}: {type(default)} is not {type(key.default)}"
        assert check_id == key.check_id, f"{key.name}: the page says {check_id}, the code {key.check_id}"


def test_every_timeout_is_documented_with_its_default() -> None:
    rows = markdown_table(SETTINGS_PAGE.read_text(), ["Timeout", "Default", "Meaning"])
    documented = {unquote_code(name): literal(default) for name, default, _ in rows}
    assert sorted(documented) == sorted(_TIMEOUT_KEYS)
    defaults = Timeouts()
    for name, attr in _TIMEOUT_KEYS.items():
        assert documented[name] == getattr(defaults, attr), name
    assert {f.name for f in dataclasses.fields(Timeouts)} == set(_TIMEOUT_KEYS.values())


def test_the_table_parser_sees_a_wrong_default() -> None:
    """The comparison above can fail: a page with one default changed does not match."""
    text = SETTINGS_PAGE.read_text().replace("| `LEASE` | `300` |", "| `LEASE` | `301` |")
    rows = markdown_table(text, ["Key", "Default", "Check", "Meaning"])
    lease = next(literal(d) for k, d, _, _ in rows if unquote_code(k) == "LEASE")
    assert lease == 301


def test_troubleshooting_explains_every_error_code_and_check_id() -> None:
    text = (DOCS / "troubleshooting.md").read_text()
    headings = set(re.findall(r"^### `([A-Z_]+)`$", text, re.MULTILINE))
    assert headings == set(CODES), f"codes without a section: {sorted(set(CODES) - headings)}"
    rows = markdown_table(text, ["id", "key", "what is wrong"])
    documented = {unquote_code(row[0]) for row in rows}
    expected = {k.check_id for k in KEYS} | {
        "mailqueue.E001",
        "mailqueue.E003",
        "mailqueue.E030",
        "mailqueue.W001",
        "mailqueue.W002",
        "mailqueue.W003",
        "mailqueue.W004",
        "mailqueue.I001",
        "mailqueue.I002",
        "mailqueue.I010",
    }
    # every id the package can report, found in its source
    package = Path(__file__).resolve().parents[1] / "django_mailqueue"
    in_source = {
        match for path in package.rglob("*.py") for match in re.findall(r"mailqueue\.[EWI]\d{3}", path.read_text())
    }
    assert in_source <= expected, f"check ids in the source but not expected here: {sorted(in_source - expected)}"
    assert documented == expected


# --- links ----------------------------------------------------------------------------

PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def relative_links(page: Path) -> list[str]:
    """The link targets of a Markdown page that are not URLs or bare anchors (code blocks skipped)."""
    text = _FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    links = []
    for target in _LINK.findall(text):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or target.startswith("#"):
            continue
        links.append(target)
    return links


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(page: Path) -> None:
    missing = []
    for target in relative_links(page):
        path = unquote(urlsplit(target).path)
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_link_finder_finds_links(tmp_path: Path) -> None:
    """The link check can fail: it sees relative links, and skips URLs, anchors and code."""
    page = tmp_path / "probe.md"
    page.write_text(
        "See [a](missing.md#part), ![b](images/x.png), [c](https://example.com/), [d](#here).\n"
        "`[e](in-code.md)`\n```\n[f](in-fence.md)\n```\n"
    )
    assert relative_links(page) == ["missing.md#part", "images/x.png"]


def test_the_docs_index_lists_every_page() -> None:
    index = DOCS / "README.md"
    linked = {Path(unquote(urlsplit(t).path)).name for t in relative_links(index)}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert not pages - linked, f"docs/README.md does not link to {sorted(pages - linked)}"


# --- the architecture page --------------------------------------------------------------

ARCHITECTURE_PAGE = DOCS / "architecture.md"
PACKAGE = ROOT / "django_mailqueue"
_PATH = re.compile(r"`([\w/]+\.py|[\w/]+/)`")


def module_map(text: str) -> list[str]:
    """The paths the module map names, relative to the package."""
    return [unquote_code(row[0]) for row in markdown_table(text, ["module", "its job"])]


def named_paths(text: str) -> list[str]:
    """Every `path.py` or `folder/` the page names in code spans, the map included."""
    return _PATH.findall(_FENCE.sub("", text))


def exists(path: str) -> bool:
    """A path in the package or the repository; a module may be named without `.py` (a module or a package)."""
    return any((top / name).exists() for top in (PACKAGE, ROOT) for name in (path, f"{path}.py"))


def test_every_module_the_architecture_page_names_exists() -> None:
    text = ARCHITECTURE_PAGE.read_text()
    assert len(module_map(text)) > 40
    missing = [p for p in [*module_map(text), *named_paths(text)] if not exists(p)]
    assert not missing, (
        f"docs/architecture.md names modules that do not exist (update the page): {sorted(set(missing))}"
    )


def test_the_architecture_check_sees_a_module_that_is_gone() -> None:
    """The check above can fail: a renamed module in the map, or in the text, is seen."""
    text = ARCHITECTURE_PAGE.read_text().replace("`delivery/smtp.py`", "`delivery/gone.py`")
    assert "delivery/gone.py" in module_map(text)
    assert "delivery/gone.py" in named_paths(text)
    assert not exists("delivery/gone.py") and not exists("delivery/gone")
    assert exists("testing/contract") and exists("delivery/smtp.py")
