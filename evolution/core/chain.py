"""The loop's logs as hash chains (issue 34): every row of the action log and of the supervision log carries the
hash of the row before it and its own, so an edited, dropped or reordered row is found by ``manage.py loop verify``.

A row's hash is SHA-256 over the canonical JSON (``singularity.being.chain.canonical``: sorted keys, no spaces,
UTF-8) of its fields as ``entry`` reads them — every column but its id and its own hash, ``prev_hash`` included.
Rows are chained in id order. Appends are serialised on the chain's head row (``ChainHead``, locked for update
in the writer's transaction), so writers in parallel never fork the chain: the head moves with the row, or
neither does. Rows written before chaining began have no hash; they are accepted only before the first chained
row and counted, as the being's journal does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db import models

from evolution.models import chain_entry as entry
from singularity.being.chain import line_hash

#: Each chained log by the name a person reads, in the order ``loop verify`` reports them.
LOGS = {"action log": "evolution.ActionLog", "supervision log": "evolution.Supervision"}
#: Rows read per query while verifying (a log of a million rows is read in pages, never whole).
PAGE = 2000


def _key(model: type[models.Model]) -> str:
    return model._meta.label


def head(model: type[models.Model]) -> str:
    """The hash of the newest chained row of ``model``'s log ("" when none)."""
    from evolution.models import ChainHead

    return ChainHead.objects.filter(log=_key(model)).values_list("hash", flat=True).first() or ""


def reset_head(model: type[models.Model]) -> None:
    """Point the head at the newest row's own hash (a test's way to stand where a migration left old rows)."""
    from evolution.models import ChainHead

    newest = model.objects.order_by("-id").values_list("hash", flat=True).first() or ""
    ChainHead.objects.update_or_create(log=_key(model), defaults={"hash": newest})


@dataclass(frozen=True)
class Verdict:
    """What ``verify`` found in one log: rows checked, older unchained rows, and the first break if any."""

    log: str
    checked: int
    unchained: int = 0
    broken_id: int | None = None
    position: int | None = None
    reason: str = ""

    @property
    def whole(self) -> bool:
        return self.broken_id is None

    def words(self, total: int | None = None) -> str:
        """ "action log: 6 entries, chain whole" or "… the chain breaks at entry 14 (3 of 6): why"."""
        if self.whole:
            n = self.checked
            older = ""
            if self.unchained:
                s = "y" if self.unchained == 1 else "ies"
                older = f" ({self.unchained} older entr{s} written before chaining began)"
            return f"{self.log}: {n} entr{'y' if n == 1 else 'ies'}, chain whole{older}"
        of = f" of {total}" if total is not None else ""
        return f"{self.log}: the chain breaks at entry {self.broken_id} ({self.position}{of}): {self.reason}"


def _rows(model: type[models.Model]) -> Iterator[models.Model]:
    last = 0
    while True:
        page = list(model.objects.filter(pk__gt=last).order_by("pk")[:PAGE])
        yield from page
        if len(page) < PAGE:
            return
        last = page[-1].pk


def verify(log: str) -> tuple[Verdict, int]:
    """Check every row of ``log`` (a key of ``LOGS``) in id order; the first break, or whole; and the row count."""
    from django.apps import apps

    model = apps.get_model(LOGS[log])
    total = model.objects.count()
    previous, chained, unchained, position = "", False, 0, 0
    for position, row in enumerate(_rows(model), start=1):
        if not row.hash and not chained:
            unchained += 1
            continue
        chained = True
        if row.prev_hash != previous:
            why = "the entry before it is not the one it was chained to (one was removed, added or reordered)"
            return Verdict(log, position, unchained, row.pk, position, why), total
        if row.hash != line_hash(entry(row)):
            return Verdict(log, position, unchained, row.pk, position, "its content does not match its hash"), total
        previous = row.hash
    if chained and previous != head(model):
        why = "the newest entry is not the head the log recorded (entries were removed from its end)"
        return Verdict(log, position, unchained, model.objects.order_by("-pk").first().pk, position, why), total
    return Verdict(log, position, unchained), total
