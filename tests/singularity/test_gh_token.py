"""GH_TOKEN is read beside GITHUB_TOKEN (seed 003 names both; issue 32)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from singularity.forge_env import read_forge


def github(**extra: str) -> dict[str, str]:
    return {"LOOP_FORGE": "github", "GITHUB_REPOSITORY": "acme/brain", **extra}


def test_gh_token_is_the_credential_when_github_token_is_not_set():
    values = read_forge(github(GH_TOKEN="ghp_from_gh"))
    assert values["GITHUB_TOKEN"] == "ghp_from_gh" and values["GITHUB_TOKEN_VAR"] == "GH_TOKEN"


def test_gh_token_file_is_read_too(tmp_path):
    token = tmp_path / "gh"
    token.write_text("ghp_from_a_file\n")
    values = read_forge(github(GH_TOKEN_FILE=str(token)))
    assert values["GITHUB_TOKEN"] == "ghp_from_a_file" and values["GITHUB_TOKEN_VAR"] == "GH_TOKEN"


def test_github_token_comes_first():
    values = read_forge(github(GITHUB_TOKEN="ghp_a", GH_TOKEN="ghp_b"))
    assert values["GITHUB_TOKEN"] == "ghp_a" and values["GITHUB_TOKEN_VAR"] == "GITHUB_TOKEN"


def test_a_bad_gh_token_is_named_by_its_own_variable():
    with pytest.raises(ImproperlyConfigured, match="^GH_TOKEN: the token has whitespace"):
        read_forge(github(GH_TOKEN="ghp_a\nghp_b"))


def test_no_token_at_all_names_both_variables():
    with pytest.raises(ImproperlyConfigured, match="GITHUB_TOKEN or GH_TOKEN"):
        read_forge(github())
