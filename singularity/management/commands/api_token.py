"""``python manage.py api_token --user alice --name ci [--agent]``: issue an API token and print its key once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from singularity.models import ApiToken


class Command(BaseCommand):
    help = "Issue an API token for a user and print its key once (only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="username the token acts for")
        parser.add_argument("--name", required=True, help="a label for the token, e.g. ci")
        parser.add_argument("--agent", action="store_true", help="mark the token as an agent (never a person)")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["user"]})
        except User.DoesNotExist:
            raise CommandError(f"--user: no user named {options['user']!r}") from None
        if not options["name"].strip():
            raise CommandError("--name: must not be blank")
        token, key = ApiToken.issue(user, options["name"].strip(), is_agent=options["agent"])
        kind = "agent token" if token.is_agent else "token"
        self.stderr.write(f"Issued {kind} {token.name!r} for {options['user']}. The key is shown only now:")
        self.stdout.write(key)
