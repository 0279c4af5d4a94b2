"""What every REST endpoint shares: the error shape, bounded JSON parsers, the page-size parser, the /api/ guard.

Settings wire them in once (``REST_FRAMEWORK`` and ``MIDDLEWARE``), so an
endpoint gets them without asking: ``errors.exception_handler`` answers every
refusal as ``{"error": <code>, "detail": <a sentence>}``, ``parsers`` refuse
text no database can hold and nesting past the bound, ``pagination`` refuses a
page size or offset that is no number of rows, and ``middleware`` refuses a NUL
in a query parameter or the path and answers JSON for whatever Django itself
answers under ``/api/`` (an unknown path, a crash).
"""
