"""Outbound notifications: destinations (a signed webhook, Slack), deliveries due in the database, alert rules.

The layers above call ``events.emit`` (or ``events.from_card`` / ``events.from_notice``) where a thing already
happens; a delivery row per subscribed destination is written in the caller's transaction and sent after commit by a
Celery task, the beat's sweep sending what a lost message left due (``deliver.sweep``).
"""
