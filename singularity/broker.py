"""The embedded broker: kombu's file-system transport with every message delivered whole, or not at all.

kombu's own ``filesystem://`` writes a message straight into the queue folder
(``open`` then ``write``), and a worker lists that folder and reads what it
finds, so a worker can read a message the sender has not finished writing:
``Unrecoverable error: JSONDecodeError`` and the worker is gone. It also
takes a message by moving it to the system's temporary folder — a copy when
that is another file system, which two workers can both make.

Here both ends are single renames inside one file system:

- **send** writes the message under a name no reader picks up
  (``.incoming-…``, in the queue folder) and renames it into place, so a
  reader sees a whole message or none;
- **take** renames the message out of the queue folder into the processed
  folder under a name of its own: one ``rename`` wins, a worker that loses
  the race moves on to the next file;
- a message that still does not read (a file some other writer left) is set
  aside under ``.unreadable`` in the processed folder and logged, naming it,
  and the worker carries on with the next one.

Registered with kombu as ``singularity-fs`` (``singularity.celery``); the
settings turn a ``filesystem://`` broker URL into it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

ALIAS = "singularity-fs"
#: The prefix of a message being written (never a queue's name: a reader skips it).
INCOMING = ".incoming-"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        """Put ``payload`` onto ``queue``: written under a hidden name, then renamed into the queue folder."""
        name = f"{int(round(filesystem.monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        folder = self.data_folder_out
        final = os.path.join(folder, name)
        partial = os.path.join(folder, f"{INCOMING}{name}")
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory {folder!r}: {exc}") from exc

    def _taken_folder(self) -> str:
        folder = self.processed_folder
        os.makedirs(folder, exist_ok=True)
        return folder

    def _get(self, queue: str) -> Any:
        """Take the oldest whole message of ``queue`` (one rename: one worker wins it); Empty when there is none."""
        wanted = f"{queue}.msg"
        folder = self.data_folder_in
        taken_folder = self._taken_folder()
        for name in sorted(os.listdir(folder)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            taken = os.path.join(taken_folder, f"{name}.{uuid.uuid4().hex[:8]}.taken")
            try:
                os.rename(os.path.join(folder, name), taken)
            except OSError:
                continue  # another worker took it first
            try:
                payload = Path(taken).read_bytes()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {taken!r} taken from queue {queue!r}: {exc}") from exc
            try:
                message = loads(bytes_to_str(payload))
            except ValueError as exc:
                aside = taken[: -len(".taken")] + ".unreadable"
                os.replace(taken, aside)
                log.error("broker: message %s on queue %s does not read (%s); set aside as %s", name, queue, exc, aside)
                continue
            if self.store_processed:
                os.replace(taken, taken[: -len(".taken")])
            else:
                os.unlink(taken)
            return message
        raise Empty()

    def _size(self, queue: str) -> int:
        wanted = f"{queue}.msg"
        return sum(
            1
            for name in os.listdir(self.data_folder_in)
            if not name.startswith(".") and name.partition(".")[2] == wanted
        )


class Transport(filesystem.Transport):
    """kombu's file-system transport with atomic delivery (see the module)."""

    Channel = Channel
    global_state = filesystem.Transport.global_state
    driver_type = "filesystem"
    driver_name = ALIAS


def register() -> None:
    """Make ``singularity-fs://`` name this transport for kombu (idempotent)."""
    from kombu.transport import TRANSPORT_ALIASES

    TRANSPORT_ALIASES[ALIAS] = "singularity.broker:Transport"
