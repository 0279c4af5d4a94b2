"""The cycle's words as people read them (issue 28): numbers formatted once, the watch's tally once, the PR body's lines
kept apart, the check's movements chart legible at its size."""

from __future__ import annotations

import re

import pytest

from evolution.loop.apply import markdown_lines
from evolution.models import PullRequest
from evolution.views.checkchart import movement_strip
from tests.evolution.demo_helpers import run
from tests.evolution.test_check_end_to_end import accept_first_card

pytestmark = [pytest.mark.django_db(transaction=True)]

RAW_FLOAT = re.compile(r"(?<![\w.#-])\d+\.\d{4,}(?![\w.-])")


def section(html: str, id_: str) -> str:
    return html.split(f'id="{id_}"', 1)[1].split("</section>", 1)[0]


def test_the_check_table_shows_numbers_as_people_read_them_and_the_watch_its_tally_once(embedded, alice, client):
    cycle, rnd = accept_first_card(alice)
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    client.post(f"/evolution/pulls/{rnd.pr_number}/merge/")
    failed_ticket = rnd.cycle.frozen["slots"][0]
    run({"text": failed_ticket.get("input", {}).get("text", "The app crashes on upload.")})
    html = client.get(f"/evolution/cycles/{cycle.pk}/").content.decode()
    check = section(html, "chapter-check")
    visible = re.sub(r"<svg.*?</svg>", "", check, flags=re.DOTALL)
    assert RAW_FLOAT.findall(re.sub(r"<[^>]+>", " ", visible)) == []
    assert "0.667" in visible and "0.333" in visible and "+0.667" in visible
    watch = section(html, "chapter-watch")
    tally = re.sub(r"<[^>]+>", "", watch.split('id="watch-tally">', 1)[1].split("</dd>", 1)[0]).strip()
    cycle.refresh_from_db()
    assert cycle.watch_tally and tally.count(cycle.watch_tally) == 1, tally


def test_the_pr_body_keeps_its_lines_apart_in_markdown(embedded, alice):
    _cycle, rnd = accept_first_card(alice)
    body = PullRequest.objects.get(number=rnd.pr_number).body
    assert "\n- Lessons cited: none\n- Author: pipeline:fixer\n- Diff gate: " in body
    for n, line in enumerate(lines := body.splitlines()):
        following = lines[n + 1] if n + 1 < len(lines) else ""
        if line.strip() and following.strip():  # two lines in a row: a list, a heading's neighbour, or a hard break
            assert following.startswith(("- ", "#")) or line.startswith("#") or line.endswith("\\"), (line, following)


def test_markdown_lines_keeps_single_line_breaks_and_leaves_lists_and_code_alone() -> None:
    text = "First line\nsecond line\n\n- a\n- b\n```\ncode\nmore\n```\nlast"
    assert markdown_lines(text) == "First line\\\nsecond line\n\n- a\n- b\n```\ncode\nmore\n```\nlast"


def test_the_movements_strip_is_drawn_at_a_legible_size_with_readable_numbers() -> None:
    svg = movement_strip(
        {"metric": "accuracy", "movements": ["1", "1", "0"], "movement": "0.666666666667", "band": "0.5"}
    )
    width = int(re.search(r'<svg[^>]* width="(\d+)"', svg).group(1))
    height = int(re.search(r'<svg[^>]* height="(\d+)"', svg).group(1))
    assert width >= 240 and height >= 48, (width, height)
    sizes = [float(s) for s in re.findall(r'font-size="([\d.]+)"', svg)]
    assert sizes and min(sizes) >= 11
    assert "0.666666" not in svg and "+0.667" in svg and "±0.5" in svg


def test_the_loops_words_name_an_instant_in_the_sites_one_format() -> None:
    from datetime import UTC, datetime

    from evolution.core import cycles
    from singularity.display import instant_text

    moment = datetime(2026, 12, 20, 12, 59, 30, tzinfo=UTC)
    assert cycles.when(moment) == instant_text(moment) == "2026-12-20 12:59 UTC"
