"""The grading pages under ``/evolution/``, one module a topic.

- ``entities``: the entities list;
- ``entity``: one entity's page (terms, metrics, calibration, recent runs) and starting a run of it;
- ``entity_plots``: the entity page's metric plots;
- ``runs``: the runs list, "Compare the two", one run's page and grading a run now;
- ``rate``: Rate runs;
- ``rate_html``: Rate runs' rows and calibration tables as HTML (the page and the HTMX answer to a rating);
- ``values``: a metric's value as people read it (shared by the others; it imports none of them).

The names ``grading/urls.py``, the chat tags and the tests import from ``grading.views`` are re-exported
here. A tunable a test changes (``entity_plots.PLOT_RUNS``, ``entities.RUNS_COUNTED_UP_TO``,
``rate.FEW_ENTITIES``) is patched on its own module: a copy here would not be the one its module reads.
"""

from grading.views.entities import entity_list
from grading.views.entity import entity_detail, entity_run, recent_rows_html, recent_runs
from grading.views.rate import (
    RATE_RUNS,
    RateCell,
    rate_rows,
    rate_runs,
    rate_runs_for,
    rate_skip,
    rateable,
    rateable_entities,
    scale_choices,
    with_terms,
)
from grading.views.runs import run_compare, run_detail, run_grade, run_list
from grading.views.values import rated_on_scale, show_metric

__all__ = [
    "RATE_RUNS",
    "RateCell",
    "entity_detail",
    "entity_list",
    "entity_run",
    "rate_rows",
    "rate_runs",
    "rate_runs_for",
    "rate_skip",
    "rateable",
    "rateable_entities",
    "rated_on_scale",
    "recent_rows_html",
    "recent_runs",
    "run_compare",
    "run_detail",
    "run_grade",
    "run_list",
    "scale_choices",
    "show_metric",
    "with_terms",
]
