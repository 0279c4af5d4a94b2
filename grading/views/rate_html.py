"""Rate runs' rows and calibration tables as HTML, built here rather than by a template (issue 18).

A page's 30 rows were two includes each and some 35,000 variable lookups a request: more than reading the
rows. Each builder returns what its template's loop or include rendered, byte for byte (the tests compare
them with the templates as they stood), every value escaped as a template variable is (``_v``). The page
(``rate.html``) and the HTMX answer to a rating (one row and its entity's calibration) use the same builders;
``static/js/rate_keys.js`` reads this markup.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from django.contrib.humanize.templatetags.humanize import naturaltime
from django.utils.formats import localize
from django.utils.safestring import SafeString, mark_safe

if TYPE_CHECKING:  # (a row and a cell are ``grading.views.rate``'s ``RateRow`` and ``RateCell``: not imported, as
    # that module imports this one)
    from grading.calibration import MetricCalibration


def esc(value: Any) -> str:
    """``value`` escaped as ``conditional_escape`` (and so ``format_html``) escapes it: safe text as it is,
    anything else as its text through ``html.escape``, without Django's per-call wrappers."""
    return value.__html__() if hasattr(value, "__html__") else html.escape(str(value))


def _v(value: Any) -> str:
    """``value`` as a template variable renders it: text escaped (``esc``), anything else localized first (a
    number as ``localize`` writes it, None as "None")."""
    if type(value) is str:
        return html.escape(value)
    return esc(value if hasattr(value, "__html__") else localize(value))


def nav_html(nav: list[tuple[str, str, bool]]) -> SafeString:
    """The entity filter's choices, one an (key, label, whether it is the page's) of ``nav``: the options of its
    select (a list of links grew to a screen of them with a fleet; a select stays one line however many)."""
    return mark_safe(  # noqa: S308 - ``esc``
        "".join(
            f'<option value="{esc(key)}"{" selected" if on else ""}>{esc(label)}</option>' for key, label, on in nav
        )
    )


def metric_nav_html(metric_ids: list[str], chosen: str) -> SafeString:
    """The metric filter's choices: one option a metric people rate, the chosen one selected."""
    return mark_safe(  # noqa: S308 - ``esc``
        "".join(f'<option value="{esc(m)}"{" selected" if m == chosen else ""}>{esc(m)}</option>' for m in metric_ids)
    )


def waiting_html(waiting: Any, *, oob: bool = False) -> SafeString:
    """How many runs wait for the viewer ("12 of 40 runs wait for you"), swapped in place after a rating or a skip
    (``oob``). ``waiting`` is ``grading.views.rate.Waiting``."""
    noun = "run waits" if waiting.of == 1 else "runs wait"
    newest = f" (counted among the newest {waiting.of:,})" if waiting.capped else ""
    swap = ' hx-swap-oob="true"' if oob else ""
    return mark_safe(  # noqa: S308 - numbers only
        f'<p id="rate-waiting" class="rate-waiting"{swap}><strong>{waiting.waiting:,} of {waiting.of:,} {noun} for '
        f'you</strong>{newest} <span class="muted small">— not rated by you yet, not skipped</span></p>'
    )


def _csrf_html(token: Any) -> str:
    """What ``{% csrf_token %}`` renders with ``token`` in the context."""
    if not token or token == "NOTPROVIDED":
        return ""
    return f'<input type="hidden" name="csrfmiddlewaretoken" value="{_v(str(token))}">'


def rate_rows_html(rows: list[Any], *, csrf_token: Any, entity_filter: str, metric_filter: str = "") -> SafeString:
    """The page's rows (``rate_rows``), as its loop including ``rate_row_html`` for each rendered them."""
    csrf = _csrf_html(csrf_token)
    # Each include renders the row and the partial's last newline (no out-of-band part on the page).
    return mark_safe(  # noqa: S308 - ``_v``
        "".join(f"\n  {_row(row, csrf, entity_filter, metric_filter)}\n\n" for row in rows)
    )


def rate_row_html(
    row: Any, *, csrf_token: Any, entity_filter: str, metric_filter: str = "", oob: dict[str, Any] | None = None
) -> SafeString:
    """One run's row, with its entity's calibration swapped in out of band (``oob``: entity and calibration)
    when given: what HTMX gets back after a rating."""
    swapped = calibration_html(oob["entity"].pk, oob["calibration"], oob=True) if oob else ""
    return mark_safe(_row(row, _csrf_html(csrf_token), entity_filter, metric_filter) + swapped + "\n")  # noqa: S308


def _row(row: Any, csrf: str, entity_filter: str, metric_filter: str = "") -> str:
    """The row's article, led and followed by a newline (the partial's text up to its out-of-band part)."""
    run, head = row.run, row.head
    run_id, rate_url, status = _v(run.id), _v(head["rate_url"]), _v(run.status)
    graded = "graded" if row.graded else f"not graded: {_v(run.get_sampling_display() or 'no booking')}"
    answer = ""
    if row.answer:
        a = row.answer
        said = "Saved." if a["ok"] else f"Not saved ({_v(a['code'])}): {_v(a['detail'])}"
        answer = f'<p class="answer {"ok" if a["ok"] else "error"}" role="status">{said}</p>'
    filtered = f'<input type="hidden" name="entity_filter" value="{_v(entity_filter)}">' if entity_filter else ""
    if metric_filter:
        filtered += f'<input type="hidden" name="metric_filter" value="{_v(metric_filter)}">'
    skip_url = _v(head.get("skip_url", ""))
    skip = (
        f'\n    <form method="post" action="{skip_url}" hx-post="{skip_url}" hx-target="#run-{run_id}" '
        f'hx-swap="outerHTML" class="rate-skip">{csrf}<input type="hidden" name="run_id" value="{run_id}">{filtered}'
        '<button type="submit" class="secondary" title="Leave it out of your queue without a rating">'
        "Skip this run</button></form>"
        if skip_url
        else ""
    )
    form_head = (
        f'\n          <form method="post" action="{rate_url}" hx-post="{rate_url}" hx-target="#run-{run_id}" '
        f'hx-swap="outerHTML" class="rate-form">'
        f"\n            {csrf}"
        f'\n            <input type="hidden" name="run_kind" value="{_v(run.run_kind)}">'
        f'\n            <input type="hidden" name="run_id" value="{run_id}">'
    )
    cells = "".join(_cell(c, row.graded, form_head, filtered) for c in row.cells)
    return (
        f'\n<article class="card rate-run" id="run-{run_id}">'
        '\n  <header class="titlebar">'
        "\n    <div>"
        f'\n      <strong><a href="{_v(head["entity_url"])}">{_v(head["entity_label"])}</a></strong>'
        f'\n      · <a href="{_v(head["run_url"])}">run <code>{_v(head["short_id"])}</code></a>'
        f'\n      · <span class="badge {status}">{status}</span>'
        f'\n      · <span class="muted small">ended <time datetime="{_v(head["ended_iso"])}" '
        f'title="{_v(head["ended_title"])}">{_v(naturaltime(run.completed_at))}</time></span>'
        "\n    </div>"
        f'\n    <span class="muted small">{graded}</span>{skip}'
        "\n  </header>"
        f"\n  {answer}"
        f"\n  {row.view_html}"
        '\n  <table class="rate">'
        '\n    <thead><tr><th>Metric</th><th class="num">Judge</th><th class="num">People</th><th>Yours</th>'
        "</tr></thead>"
        "\n    <tbody>"
        f"\n    {cells}"
        "\n    </tbody>"
        "\n  </table>"
        "\n</article>\n"
    )


def _cell(c: Any, graded: bool, form_head: str, filtered: str) -> str:
    """One metric's table row of a run's row, followed by the loop's indentation."""
    metric_id = _v(c.metric_id)
    criterion = c.spec.get("criterion")
    about = f'<div class="muted small">{_v(criterion)}</div>' if criterion else ""
    if c.spec.get("kind") != "judged":
        judge = '<span class="muted" title="only people rate it">no judge</span>'
    elif graded:
        judge = _v(c.judge)
    else:
        judge = '<span class="muted">—</span>'
    count = f' <span class="muted small">(n={_v(c.people_count)})</span>' if c.people_count else ""
    given = "".join(
        f'<div class="given small">{_v(who)}: {_v(value)}{f" — {_v(note)}" if note else ""}</div>'
        for who, value, note in getattr(c, "given_by", ())
    )
    mine_value = _v(c.mine_value)
    if c.choices:
        answer = (
            f'\n              <span class="choices" role="group" aria-label="{metric_id} rating">'
            f"\n              {_v(c.buttons_html)}"
            "\n              </span>"
            "\n            "
        )
    else:
        low, high = _v(c.scale["min"]), _v(c.scale["max"])
        answer = (
            f'\n              <input type="number" name="value" min="{low}" max="{high}" '
            f'step="{_v(c.scale.get("step") or "any")}" value="{mine_value}" aria-label="{metric_id} on '
            f'{low}..{high}" required>'
            '\n              <button type="submit">Save</button>'
            "\n            "
        )
    yours = f'<div class="muted small">yours: {mine_value}</div>' if c.mine else ""
    note = _v((c.mine.note if c.mine else "") or "")
    return (
        f'\n      <tr data-metric="{metric_id}">'
        f'\n        <td><code>{metric_id}</code> <span class="muted small">{_v(c.range)}</span>{about}</td>'
        f'\n        <td class="num judge">{judge}</td>'
        f'\n        <td class="num people">{_v(c.people)}{count}{given}</td>'
        '\n        <td class="mine">'
        f"{form_head}"
        f'\n            <input type="hidden" name="metric_id" value="{metric_id}">'
        f'\n            <input type="hidden" name="idempotency_key" value="{_v(c.key)}">'
        f"\n            {filtered}"
        f'\n            <input type="text" name="note" placeholder="note (optional)" value="{note}" '
        f'aria-label="note on {metric_id}" maxlength="4000">'
        f"\n            {answer}"
        "\n          </form>"
        f"\n          {yours}"
        "\n        </td>"
        "\n      </tr>"
        "\n    "
    )


def calibrations_html(items: list[dict[str, Any]]) -> SafeString:
    """The page's calibrations (each an entity's ``url``, ``label``, ``entity`` and ``calibration``), as its loop
    over them rendered them: a heading linking the entity, then its table (``calibration_html``)."""
    return mark_safe(  # noqa: S308 - ``_v``
        "".join(
            f'\n  <h3 class="small"><a href="{_v(item["url"])}">{_v(item["label"])}</a></h3>'
            f"\n  {calibration_html(item['entity'].pk, item['calibration'])}\n"
            for item in items
        )
    )


def calibration_html(entity_pk: Any, calibration: list[MetricCalibration], *, oob: bool = False) -> SafeString:
    """One entity's calibration table, as ``grading/partials/calibration.html`` renders it (``oob``: swapped in
    place after a rating). The entity page includes that template; a test holds the two equal."""
    if calibration:
        rows = "".join(
            f'\n      <tr data-metric="{_v(c.metric_id)}">'
            f"\n        <td><code>{_v(c.metric_id)}</code></td>"
            f'\n        <td><span class="badge {_v(c.status)}">{_v(c.status)}</span></td>'
            f'\n        <td class="num">{_v(c.pairs)}</td>'
            f'\n        <td class="num">{_agreement(c.agreement)}</td>'
            f'\n        <td class="small">{_v(c.chance.words())}</td>'
            f'\n        <td class="muted small">{_v(c.reason)}{_warning(c.warning)}</td>'
            "\n      </tr>"
            "\n    "
            for c in calibration
        )
        body = (
            "\n  <table>"
            '\n    <thead><tr><th>Metric</th><th>Status</th><th class="num">Pairs</th><th class="num">Agreement</th>'
            "<th>Chance-corrected</th><th>Why</th></tr></thead>"
            "\n    <tbody>"
            f"\n    {rows}"
            "\n    </tbody>"
            "\n  </table>"
            "\n  "
        )
    else:
        body = '\n  <p class="muted">Nothing to calibrate: no judged metric with <code>human: true</code>.</p>\n  '
    swap = ' hx-swap-oob="true"' if oob else ""
    return mark_safe(  # noqa: S308 - ``_v``
        f'\n<section id="calibration-{_v(entity_pk)}" class="calibration"{swap}>\n  {body}\n</section>\n'
    )


def _agreement(share: float | None) -> str:
    """``{% widthratio share 1 100 %}%``, or "—" with no share."""
    return "—" if share is None else f"{round(float(share) / 1 * 100)}%"


def _warning(words: str) -> str:
    """The row's warning as the template shows it ("" with none)."""
    return f'<div class="warning">⚠ {_v(words)}</div>' if words else ""
