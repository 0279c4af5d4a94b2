"""A worker process that dies (SIGKILL, no cleanup) right after the forge opened a pull request.

``python -m tests.fakes.dying_worker apply <round id>`` runs the apply as a
Celery worker runs it (``recovery.run_apply``); ``... revert`` runs the
loop's poll of due cycles, which opens a reverting cycle's revert PR. The
local forge's ``open_pull`` is wrapped so that the process kills itself the
moment the real one returns: the PR is open and the loop never heard of it,
as when a worker's machine loses power between the forge's answer and the
record. Django is configured from the environment (``DATABASE_URL``,
``BRAIN_REPO``, ``LOOP_WORK_DIR`` …) the test hands it.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "singularity.settings")


def main(step: str, ident: int) -> None:
    import django

    django.setup()
    from evolution.forges.local import LocalForge

    real_open = LocalForge.open_pull

    def open_then_die(self: LocalForge, **kwargs: Any) -> Any:
        pull = real_open(self, **kwargs)
        print(f"opened #{pull.number} on {pull.head}; dying", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return pull

    LocalForge.open_pull = open_then_die  # type: ignore[method-assign]
    from evolution.loop import machine, recovery

    if step == "apply":
        recovery.run_apply(ident)
    elif step == "revert":
        machine.poll_due()
    else:
        raise SystemExit(f"dying_worker: no step {step!r} (apply, revert)")
    print("the step ended without opening a pull request", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
