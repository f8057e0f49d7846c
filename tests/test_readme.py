"""The README is the front door: short, its numbers backed by the docs, its links alive.

- README.md is at most ``MAX_CHARS`` characters, no line is longer than ``MAX_LINE``, and it shows
  more than one code block.
- Results: every bullet of the README's ``## Results`` section links a page under docs/, and every
  number in a line (or bullet) of that section that links docs/ pages appears verbatim in one of the
  pages it links.

  A number is a run of digits with optional thousands commas and decimals and an optional unit
  glued to it, ``x``, ``%``, ``k``, ``M`` or ``G`` (``0.1788``, ``2.25x``, ``98.2%``, ``4.96M``,
  ``1,146``); a date (``2026-12-04``) and a version (``1.2.1``) are one number each; a range is two
  (``0.94-1.10x``: ``0.94`` and ``1.10x``). Verbatim: the page holds the same characters, not
  preceded by a digit or a decimal point and not followed by a digit or by a decimal point and a
  digit (``2.25`` is not in ``12.25`` nor in ``2.251``; ``0.94`` is in ``0.94x``).

  Not checked: link targets; anything inside backticks (commands, flags); digits that belong to a
  name (``ML-100K``, ``synth-xl``, ``bf16``, ``Recall@20``; but the ``64`` of ``D=64`` is checked);
  and bare single digits (``1`` core, ``3`` seeds, ``0-2`` antagonists): counts, not results.
- Every docs/*.md page is listed in docs/README.md, and every relative link in README.md and
  docs/README.md points to a file that exists.

Plain text only: no import of the package, no network.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_CHARS = 12_000
MAX_LINE = 200

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`[^`]*`")
DATE = r"\d{4}-\d{2}-\d{2}"
VERSION = r"\d+(?:\.\d+){2,}"
NUMBER = re.compile(rf"(?<![\w@.])({DATE}|{VERSION}|\d+(?:,\d{{3}})*(?:\.\d+)?[x%kMG]?)")
NAME_BEFORE = re.compile(r"[A-Za-z][-_]$")      # ML-100K: digits after a letter and a hyphen name a thing


def section(text: str, title: str) -> list[str]:
    """The lines of the ``## title`` section, up to the next ``## `` heading."""
    lines = text.splitlines()
    start = lines.index(f"## {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def items(lines: list[str]) -> list[str]:
    """Bullets with their continuation lines joined; other non-empty lines as they are."""
    out: list[str] = []
    for line in lines:
        if line.startswith("  ") and out and out[-1].startswith("- "):
            out[-1] += " " + line.strip()
        elif line.strip():
            out.append(line)
    return out


def numbers(line: str) -> list[str]:
    """The number tokens of a README line, by the rule of the module docstring."""
    text = CODE.sub(" ", re.sub(r"\]\([^)]*\)", "]", line))      # link text stays, its target goes
    found = []
    for m in NUMBER.finditer(text):
        tok = m.group(1)
        if NAME_BEFORE.search(text[:m.start()]):
            continue
        if not re.fullmatch(r"\d", tok):
            found.append(tok)
    return found


def occurs(token: str, page: str) -> bool:
    return re.search(rf"(?<![\d.]){re.escape(token)}(?!\d|\.\d)", page) is not None


def doc_links(line: str, base: Path) -> list[Path]:
    """The docs pages a line links, anchors dropped."""
    out = []
    for target in LINK.findall(line):
        if "://" in target or target.startswith("#"):
            continue
        path = (base / target.split("#")[0]).resolve()
        if path.parent == DOCS and path.suffix == ".md":
            out.append(path)
    return out


def unbacked(lines: list[str]) -> list[str]:
    """Each 'number (pages)' of the results lines that none of the line's linked pages holds."""
    bad = []
    for line in items(lines):
        pages = doc_links(line, ROOT)
        if not pages:
            continue
        texts = [p.read_text(encoding="utf-8") for p in pages if p.exists()]
        for tok in numbers(line):
            if not any(occurs(tok, t) for t in texts):
                bad.append(f"{tok} ({', '.join(p.name for p in pages)}): {line.strip()[:80]}")
    return bad


def test_readme_is_short():
    text = README.read_text(encoding="utf-8")
    assert len(text) <= MAX_CHARS, f"README.md has {len(text):,} characters, at most {MAX_CHARS:,}"
    long = [i for i, line in enumerate(text.splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, f"README.md lines longer than {MAX_LINE} characters: {long}"
    assert text.count("```") >= 4, "README.md should show more than one code block"


def test_every_result_links_its_doc():
    lines = section(README.read_text(encoding="utf-8"), "Results")
    bullets = [b for b in items(lines) if b.startswith("- ")]
    assert bullets, "the Results section has no bullets"
    missing = [b[:80] for b in bullets if not doc_links(b, ROOT)]
    assert not missing, f"results without a link to a docs/ page: {missing}"


def test_every_result_number_is_in_its_doc():
    bad = unbacked(section(README.read_text(encoding="utf-8"), "Results"))
    assert not bad, "numbers in README's Results not found verbatim in the linked doc:\n" + "\n".join(bad)


def test_the_number_check_can_fail(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text("oracle 2.25x faster, 98.2% of the reference, 12.25 s, 0.94x on 2026-12-04\n")
    line = "- cache 2.25x, 98.2%, 0.94-1.10x, 2.2 s on 2026-12-04 with 1.2.1 (1 core) ([page](docs/page.md))"
    assert numbers(line) == ["2.25x", "98.2%", "0.94", "1.10x", "2.2", "2026-12-04", "1.2.1"]
    texts = [page.read_text(encoding="utf-8")]
    assert [t for t in numbers(line) if not any(occurs(t, x) for x in texts)] == ["1.10x", "2.2", "1.2.1"]
    assert numbers("ML-100K on bf16 rows, Recall@20 `--epochs 30` [a](docs/x-12.md) D=64") == ["64"]


def test_every_doc_is_indexed():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = {p.name for p in doc_links(index, DOCS)}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert not pages - linked, f"docs/README.md does not list: {sorted(pages - linked)}"


def test_relative_links_resolve():
    broken = []
    for page in (README, DOCS / "README.md"):
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith(("#", "mailto:")):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"links to missing files: {broken}"
