#!/usr/bin/env python
"""Django's command-line utility. Configuration errors, and a database that cannot be reached, exit 2 naming the variable."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "singularity.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:
        from singularity.boot import EXIT_CODE, explain

        line = explain(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        sys.exit(EXIT_CODE)


if __name__ == "__main__":
    main()
