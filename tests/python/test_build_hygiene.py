"""Build hygiene: the top-level Makefile fails when a fragment is missing (instead of silently dropping a
suite), and the documents cite nothing outside the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _fragments() -> list[str]:
    """The fragments the top-level Makefile names, relative to the root."""
    text = (ROOT / "Makefile").read_text()
    return re.findall(r"^-?include\s+\$\(ROOT\)/(\S+)$", text, re.MULTILINE)


def test_every_fragment_is_included_without_a_dash() -> None:
    text = (ROOT / "Makefile").read_text()
    assert not re.search(r"^\s*-include\b|^\s*sinclude\b", text, re.MULTILINE), "a fragment may be skipped silently"
    named = set(_fragments())
    on_disk = {str(p.relative_to(ROOT)) for d in ("driver", "pyctl", "tui", "tests") for p in (ROOT / d).rglob("*.mk")
               if "build" not in p.relative_to(ROOT).parts}
    assert on_disk <= named, f"fragments the Makefile does not include: {sorted(on_disk - named)}"


@pytest.mark.parametrize("missing", ["driver/softgpu/softgpu.mk", "tests/vm/vm.mk"])
def test_a_missing_fragment_fails_the_build(tmp_path: Path, missing: str) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for frag in _fragments():  # empty stand-ins: only the include mechanism is under test
        if frag != missing:
            (tmp_path / frag).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / frag).write_text("")
    ok = subprocess.run(["make", "-C", str(tmp_path), "-n", "help"], capture_output=True, text=True, check=False)
    assert ok.returncode != 0 and missing in ok.stderr, ok.stderr
    (tmp_path / missing).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / missing).write_text("")
    ok = subprocess.run(["make", "-C", str(tmp_path), "-n", "help"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr


# Notes that were never part of the repository (planning notes of the authors), and paths of one machine.
_OUTSIDE = re.compile(r"shared/|research/|anchors-mission|anchors-style|dnn-traces\.md|uvm535-integration|"
                      r"(?<![\w/])/work/|research note", re.IGNORECASE)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_cite_nothing_outside_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    hits = [f"{doc.name}:{n}: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), 1)
            if _OUTSIDE.search(line)]
    assert not hits, "\n".join(hits)
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        assert (doc.parent / target).resolve().is_relative_to(ROOT), f"{doc.name}: link {target} leaves the repo"
        assert (doc.parent / target).exists(), f"{doc.name}: link {target} does not exist"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_anchors_exist(doc: Path) -> None:
    """Every link to a section (``page.md#section`` or ``#section``) names a heading that page has: pages move
    sections between them (the evaluation log left policy.md), and a stale anchor lands on the page's top."""
    text = doc.read_text(encoding="utf-8")
    bad = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        page = (doc.parent / target) if target else doc
        if page.suffix != ".md" or not page.exists():
            continue
        headings = {_slug(m) for m in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)}
        if anchor not in headings:
            bad.append(f"{target or doc.name}#{anchor}")
    assert not bad, f"{doc.name}: links to missing sections: {', '.join(bad)}"
