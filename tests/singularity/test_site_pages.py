"""What every page shares: the navigation, the favicon, and styled 404 and 500 pages."""

from __future__ import annotations

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings
from django.urls import include, path
from django.views.defaults import server_error

pytestmark = pytest.mark.django_db


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug in a view")


urlpatterns = [path("boom/", boom), path("", include("singularity.urls"))]


class NoUrls:
    """A URLconf where nothing resolves: a page that reverses a URL fails under it."""

    urlpatterns: list[object] = []


@pytest.fixture
def web(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def test_the_navigation_reaches_every_part_of_the_site(web: Client) -> None:
    html = web.get("/beings/").content.decode()
    nav = html.split('<nav aria-label="main">')[1].split("</nav>")[0]
    for href, label in [
        ("/beings/", "Beings"),
        ("/evolution/", "Evolution"),
        ("/evolution/entities/", "Entities"),
        ("/evolution/pulls/", "Pull requests"),
        ("/inbox/", "Inbox"),
        ("/evolution/needs-you/", "Needs you"),
        ("/evolution/settings/", "Settings"),
        ("/admin/", "Admin"),
        ("/api/docs/", "API"),
    ]:
        assert f'href="{href}"' in nav and label in nav, label


def test_the_navigation_marks_where_you_are(web: Client) -> None:
    html = web.get("/evolution/pulls/").content.decode()
    assert '<a href="/evolution/pulls/" class="active">Pull requests</a>' in html
    assert '<a href="/beings/" class="active">' not in html


def test_every_page_links_the_favicon(web: Client) -> None:
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in web.get("/beings/").content.decode()


def test_the_favicon_answers_at_the_old_path_and_as_a_static_file(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    icon = client.get("/static/favicon.svg")
    assert icon.status_code == 200
    assert icon["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(icon.streaming_content)


def test_a_missing_page_is_styled_with_the_navigation(web: Client) -> None:
    response = web.get("/no/such/page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert '<link rel="stylesheet" href="/static/css/app.css">' in html
    assert '<nav aria-label="main">' in html and "Pull requests" in html
    assert "<h1>Page not found</h1>" in html and "<code>/no/such/page/</code>" in html


def test_a_missing_page_for_a_stranger_still_renders(client: Client) -> None:
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    assert "<h1>Page not found</h1>" in response.content.decode()


@override_settings(ROOT_URLCONF=__name__)
def test_a_server_error_is_styled_with_the_navigation(web: Client) -> None:
    web.raise_request_exception = False
    response = web.get("/boom/")
    html = response.content.decode()
    assert response.status_code == 500
    assert '<link rel="stylesheet" href="/static/css/app.css">' in html
    assert '<nav aria-label="main">' in html and 'href="/beings/"' in html
    assert "<h1>Something went wrong</h1>" in html
    assert "a bug in a view" not in html  # nothing of the error leaks


def test_the_server_error_page_needs_no_request_context(django_assert_max_num_queries) -> None:
    # Rendered as Django does after a failure: no context processors, so no database and no URL reversing.
    request = RequestFactory().get("/anything/")
    with django_assert_max_num_queries(0), override_settings(ROOT_URLCONF=NoUrls):
        response = server_error(request)
    assert response.status_code == 500
    assert "<h1>Something went wrong</h1>" in response.content.decode()
