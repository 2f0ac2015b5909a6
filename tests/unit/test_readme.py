"""The README points only at what a clone of this repository holds."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_links_resolve_inside_the_repository() -> None:
    text = (ROOT / "README.md").read_text()
    assert "../shared" not in text
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links, "the README links its docs"
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), link
