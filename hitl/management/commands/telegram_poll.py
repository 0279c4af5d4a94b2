"""Read Telegram updates by long polling (the embedded default, when no webhook is reachable)."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from hitl.channels import ChannelError, telegram_enabled


class Command(BaseCommand):
    help = "Poll Telegram for button presses and replies (getUpdates) and answer cards with them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Read one batch and exit.")
        parser.add_argument("--timeout", type=int, default=25, help="Seconds one getUpdates call waits (default 25).")

    def handle(self, *args: Any, once: bool, timeout: int, **options: Any) -> None:
        if not telegram_enabled():
            raise CommandError("Telegram is off: set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID.")
        from hitl.channels.telegram import TelegramSession, poll_once

        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        session = TelegramSession.open()
        try:
            while not stopping:
                try:
                    outcomes = poll_once(session, timeout=timeout)
                except ChannelError as exc:
                    if exc.permanent or once:
                        raise CommandError(f"getUpdates failed: {exc}") from exc
                    self.stderr.write(f"getUpdates failed, trying again: {exc}")
                    continue
                for outcome in outcomes:
                    self.stdout.write(outcome)
                if once:
                    break
                # Between long polls: drop a connection the database may have closed meanwhile.
                close_old_connections()
        finally:
            session.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
