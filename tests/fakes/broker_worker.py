"""A Celery app on the embedded broker alone (no Django), for the broker's stress test.

``BROKER_DIR`` is the broker's folder; the ``record`` task appends the
number it carries to ``RECORD_FILE``, one line each, so a test can count
what every worker process received.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

from singularity import broker

broker.register()

BROKER_DIR = Path(os.environ.get("BROKER_DIR", "var/broker-stress"))


def transport_options(root: Path) -> dict[str, object]:
    for folder in ("queue", "processed", "control"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "processed_folder": str(root / "processed"),
        "control_folder": str(root / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }


# Never the current app: the test that imports this module for its transport options shares the process with
# every other test, whose shared tasks must keep resolving to singularity.celery.app.
app = Celery("broker-stress", broker=f"{broker.ALIAS}://", set_as_current=False)
app.conf.broker_transport_options = transport_options(BROKER_DIR)
app.conf.task_ignore_result = True
app.conf.worker_hijack_root_logger = False
app.conf.broker_connection_retry_on_startup = True


@app.task(name="record")
def record(number: int) -> None:
    with open(os.environ["RECORD_FILE"], "a", encoding="utf-8") as handle:
        handle.write(f"{number}\n")
