"""MkDocs hook: show the docstrings' Sphinx roles (:class:`X`, :meth:`~a.b.C.m`) as code.

The docstrings are Google style, and some of their text names other objects with Sphinx
roles, which mkdocstrings leaves as they are (":class:" before the code). This hook drops the
role and, for the ``~`` form, keeps only the last part of the dotted name, as Sphinx shows it.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    short, name = match.group(1), match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    """Rewrites the roles in a page's HTML (MkDocs calls this for every page)."""
    return ROLE.sub(_code, html)
