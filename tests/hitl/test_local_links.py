"""Links on the dashboard are paths: a click keeps the session whatever host the person used (issue 15).

Cards and notices carry SINGULARITY_PUBLIC_URL links for the places they are
sent (Telegram, a PR body); shown on the dashboard the same links drop that
prefix, so a person on 127.0.0.1 is not sent to localhost and logged out.
"""

from __future__ import annotations

import pytest

from hitl.actions import post_notice
from singularity.templatetags.singularity_tags import local

pytestmark = pytest.mark.django_db


def test_local_drops_the_public_address_and_keeps_other_hosts(settings):
    settings.SINGULARITY_PUBLIC_URL = "http://localhost:8000"
    assert local("http://localhost:8000/evolution/go/cycle:3/") == "/evolution/go/cycle:3/"
    assert local("http://localhost:8000") == "/"
    assert local("http://localhost:80001/x") == "http://localhost:80001/x"
    assert local("https://github.com/o/r/pull/7") == "https://github.com/o/r/pull/7"
    assert local("/inbox/") == "/inbox/" and local(None) == ""


def test_the_inbox_links_a_notice_by_its_path(client, alice, settings):
    settings.SINGULARITY_PUBLIC_URL = "http://localhost:8000"
    post_notice(producer="loop", kind="settled", title="cycle 3 kept", url="http://localhost:8000/evolution/cycles/3/")
    client.force_login(alice)
    page = client.get("/inbox/").content.decode()
    assert 'href="/evolution/cycles/3/"' in page
    assert 'href="http://localhost:8000' not in page
