"""Outside channels a card or notice is pushed to, behind one small interface.

Each channel module is the only one importing its service's SDK and raises
``ChannelError`` (permanent or temporary) instead of the SDK's errors. The
dashboard is not a channel: it reads the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from django.conf import settings

if TYPE_CHECKING:
    from hitl.models import Card, Delivery, Notice


class ChannelError(Exception):
    """A send or edit failed. ``permanent`` stops retries; ``retry_after`` is the service's own wait, in seconds."""

    def __init__(self, message: str, *, permanent: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


@dataclass(frozen=True)
class Sent:
    """Where a message landed: what a later edit or a reply refers to."""

    chat_id: str
    message_id: int


class Session(Protocol):
    """An open connection to one channel, used for a batch of sends."""

    def send_card(self, card: Card) -> Sent: ...

    def send_notice(self, notice: Notice) -> Sent: ...

    def edit_card(self, delivery: Delivery, card: Card) -> None: ...

    def close(self) -> None: ...


def telegram_enabled() -> bool:
    """Return True when Telegram is configured: a bot token and a chat id."""
    return bool(settings.TELEGRAM_BOT_TOKEN and settings.TELEGRAM_CHAT_ID)


def enabled_channels() -> list[str]:
    """Return the names of the channels cards and notices are pushed to (none by default)."""
    return ["telegram"] if telegram_enabled() else []


class Channel(Protocol):
    """A channel: its session class, whose ``open()`` returns a ready session or raises ChannelError."""

    def open(self) -> Session: ...


#: The channels by name. Each channel module is registered in ``HitlConfig.ready``, so this package never
#: imports one: a channel module imports this package (and the actions it answers cards through).
_channels: dict[str, Channel] = {}


def register_channel(name: str, channel: Channel) -> None:
    """Make ``channel`` the one ``open_session(name)`` opens (replacing any before)."""
    _channels[name] = channel


def open_session(name: str) -> Session:
    """Return an open session of the channel ``name``; raises ChannelError when it cannot be opened."""
    channel = _channels.get(name)
    if channel is None:
        raise ValueError(f"no such channel: {name!r}")
    return channel.open()
