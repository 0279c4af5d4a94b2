"""``manage.py up`` hands its processes the address it prints as the public URL, unless one is configured."""

from __future__ import annotations

import pytest

from singularity.management.commands.up import public_url


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("127.0.0.1", 8790, "http://127.0.0.1:8790"),
        ("0.0.0.0", 8000, "http://127.0.0.1:8000"),
        ("dash.internal", 9000, "http://dash.internal:9000"),
    ],
)
def test_the_public_url_is_the_address_up_prints(host, port, url):
    assert public_url(host, port) == url
