"""A crawl of the dashboard as a person clicks it: the navigation's links, then one level of links from each page.

Same origin, GET only; never the log-out, nor an admin page that deletes or
runs an action. Each page answers below 400 and its text, as a person reads
it, holds no raw JSON, no internal names and no ``None``/``null``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

#: What a person should never read on a page (outside tags, scripts, styles and code blocks).
RAW = re.compile(
    r"\b(?:merge_wait|Merge Wait|loop_set|loop_widen|loop_join|null|None(?! available)|demo-note-\d+)\b"
    r"|\{\"|\{'|\[\{"
)
#: Never followed: the log-out, an admin page that deletes, the static files, the API's JSON.
SKIP = re.compile(r"logout|/delete/|^/static/|^/api/(?!docs/)|^/favicon")


class Links(HTMLParser):
    """The ``href`` of every link on a page, and those inside ``<nav aria-label="main">``."""

    def __init__(self) -> None:
        super().__init__()
        self.every: list[str] = []
        self.nav: list[str] = []
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "nav" and found.get("aria-label") == "main":
            self._depth += 1
        if tag == "a" and found.get("href"):
            self.every.append(str(found["href"]))
            if self._depth:
                self.nav.append(str(found["href"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._depth:
            self._depth -= 1


def visible_text(page: str) -> str:
    """The page's text as a person reads it: tags, scripts, styles and code blocks dropped, entities decoded."""
    page = re.sub(r"<(script|style|pre|code|textarea)\b.*?</\1>", " ", page, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def followable(base: str, href: str) -> str | None:
    """The same-origin path ``href`` leads to from ``base`` (query kept, fragment dropped); None to skip it."""
    if href.startswith(("mailto:", "javascript:", "#", "tel:")):
        return None
    target = urlsplit(urljoin(base, href))
    if target.scheme not in ("", "http") or target.netloc not in ("", "testserver"):
        return None
    if SKIP.search(target.path) or "action=" in target.query:
        return None
    return target.path + (f"?{target.query}" if target.query else "")


@dataclass
class Page:
    url: str
    status: int
    problems: list[str]
    links: Links | None


def crawl(get: Callable[[str], tuple[int, str, str]], start: str, *, limit: int = 400) -> dict[str, Page]:
    """Open ``start``, every link of its main navigation, and every link on those pages; return each page.

    ``get(path)`` answers ``(status, content type, body)`` after redirects.
    """
    pages: dict[str, Page] = {}

    def visit(url: str) -> Page:
        if url not in pages:
            status, kind, body = get(url)
            problems = [f"HTTP {status}"] if status >= 400 else []
            links = None
            if "text/html" in kind:
                found = sorted(set(RAW.findall(visible_text(body))))
                if found:
                    problems.append(f"shows {found}")
                links = Links()
                links.feed(body)
            pages[url] = Page(url, status, problems, links)
        return pages[url]

    home = visit(start)
    assert home.links is not None and home.links.nav, f"{start}: no main navigation"
    first = [u for u in (followable(start, h) for h in home.links.nav) if u]
    for url in dict.fromkeys(first):
        page = visit(url)
        for href in page.links.every if page.links else []:
            target = followable(url, href)
            if target and len(pages) < limit:
                visit(target)
    return pages


@pytest.fixture
def demo(embedded, alice):
    """The first minutes of ``make run``: graded runs, an accepted proposal's PR, a rating card, the being."""
    from evolution.models import PullRequest
    from grading.booking import on_terminal
    from grading.grade import grade_now
    from grading.models import Entity, Execution
    from hitl.models import Card
    from singularity.being.demo import ensure_demo_being
    from tests.evolution.demo_helpers import drive_until_card, press, tickets

    card, failed = drive_until_card(tickets())
    assert card.kind == Card.Kind.DECIDE and failed
    press(card, alice, "accept")
    assert PullRequest.objects.exists()
    pulse = Entity.objects.get(slug="pulse")
    tick = Execution.objects.create(
        entity=pulse,
        run_kind=Execution.RunKind.HEARTBEAT,
        status=Execution.Status.SUCCEEDED,
        source=Execution.Source.SCHEDULE,
        output={"result": "ok 3 checks"},
        completed_at=timezone.now(),
    )
    grade_now(on_terminal(tick))
    ensure_demo_being()
    return embedded


def client_get(client: Client) -> Callable[[str], tuple[int, str, str]]:
    """``get(path)`` for ``crawl`` through a logged-in test client: (status, content type, body) after redirects."""

    def get(path: str) -> tuple[int, str, str]:
        response = client.get(path, follow=True)
        body = response.content.decode(errors="replace") if response.get("Content-Type", "").startswith("text/") else ""
        if "/accounts/login/" in (response.redirect_chain[-1][0] if response.redirect_chain else ""):
            return 401, "text/plain", ""  # a link that lost the session
        return response.status_code, response.get("Content-Type", ""), body

    return get
