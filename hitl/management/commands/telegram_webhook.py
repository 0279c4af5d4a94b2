"""Point Telegram at this deployment's webhook (or take the webhook away)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from hitl.channels import ChannelError, telegram_enabled


class Command(BaseCommand):
    help = "setWebhook with TELEGRAM_WEBHOOK_SECRET, so Telegram posts updates to URL (…/telegram/webhook/)."

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--url", help="The public address of /telegram/webhook/.")
        group.add_argument("--delete", action="store_true", help="Remove the webhook (for telegram_poll).")

    def handle(self, *args: Any, url: str | None, delete: bool, **options: Any) -> None:
        if not telegram_enabled():
            raise CommandError("Telegram is off: set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID.")
        if url and not settings.TELEGRAM_WEBHOOK_SECRET:
            raise CommandError("TELEGRAM_WEBHOOK_SECRET is not set: the webhook refuses every update without it.")
        if url and not url.startswith("https://"):
            raise CommandError(f"--url: Telegram posts only to https addresses, got {url!r}")
        from hitl.channels.telegram import TelegramSession

        session = TelegramSession.open()
        try:
            if delete:
                session.delete_webhook()
                self.stdout.write("Webhook removed.")
            else:
                session.set_webhook(str(url))
                self.stdout.write(f"Webhook set to {url}.")
        except ChannelError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            session.close()
