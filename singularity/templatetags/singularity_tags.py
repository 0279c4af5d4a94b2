"""Template filters that show the being's numbers, instants and journal as people read them.

The site's formats (``singularity.display``): ``usd`` (money with its exact
amount on hover), ``signed_usd``, ``usd_text`` (plain, for titles), ``instant``
(an instant in the configured time zone) and ``ago`` (relative, where recency
matters). ``money`` and ``money_exact`` are the older six-decimal text, kept for
callers not yet moved.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from singularity import display
from singularity.glyphs import page_glyphs
from singularity.models import Event
from singularity.money import EXACT, MoneyError, money_str, parse_money

register = template.Library()

#: Pages show money to the millionth of a dollar; the exact amount is in the title.
SHOWN_QUANTUM = Decimal("0.000001")


def _amount(value: Any) -> Decimal | None:
    """The Decimal for ``value`` (a Decimal, int or decimal string), or None when it is not money."""
    if value is None or value == "":
        return None
    try:
        return parse_money(value)
    except MoneyError:
        return None


@register.filter
def money(value: Any) -> str:
    """Return an amount as "$9.9843": rounded to 6 decimals, trailing zeros trimmed to the cents.

    A non-zero amount too small to show reads "<$0.000001"; None reads as an
    empty string and text that is not money is returned unchanged.
    """
    amount = _amount(value)
    if amount is None:
        return "" if value is None else str(value)
    shown = amount.quantize(SHOWN_QUANTUM, rounding=ROUND_HALF_EVEN, context=EXACT)
    sign = "-" if amount < 0 else ""
    if not shown and amount:
        return f"{sign}<$0.000001"
    return f"{sign}${money_str(abs(shown))}"


@register.filter
def signed_money(value: Any) -> str:
    """Return an amount with an explicit sign ("+$1.20", "-$0.30"); zero has none."""
    text = money(value)
    amount = _amount(value)
    return f"+{text}" if amount is not None and amount > 0 else text


@register.filter
def money_exact(value: Any) -> str:
    """Return the exact ledger amount as "9.984300000001 USD" (for titles and tooltips)."""
    amount = _amount(value)
    return "" if amount is None else f"{money_str(amount)} USD"


@register.filter
def usd(value: Any) -> SafeString:
    """Return money as ``<span class="money" title="9.9843 USD">$9.98</span>``; "" for None (so ``default`` works)."""
    if value is None or value == "":
        return SafeString("")
    return format_html('<span class="money" title="{}">{}</span>', display.usd_exact(value), display.usd_text(value))


@register.filter
def signed_usd(value: Any) -> SafeString:
    """Return money like ``usd`` with an explicit sign ("+$1.20", "-$0.30") and its sign class (pos, neg, zero)."""
    if value is None or value == "":
        return SafeString("")
    text = display.usd_text(value)
    amount = display.amount_of(value)
    if amount is not None and amount > 0 and text != "$0.00":
        text = f"+{text}"
    return format_html('<span class="money {}" title="{}">{}</span>', sign_class(value), display.usd_exact(value), text)


@register.filter
def usd_text(value: Any) -> str:
    """Return money as plain text in the site's format ("$9.98", "$0.0052"), for titles and attributes."""
    return display.usd_text(value)


@register.filter
def number(value: Any) -> str:
    """Return a number as people read it: at most three significant decimals ("0.667", "2.33"); "—" for none."""
    return display.number_text(value)


@register.filter
def signed_number(value: Any) -> str:
    """Return a movement as people read it, signed ("+0.667", "-481"); "—" for none."""
    return display.signed_number_text(value)


@register.filter
def percent(value: Any) -> str:
    """Return a share (0..1) as a percentage ("67%"); "—" for none."""
    return display.percent_text(value)


@register.filter
def reading(value: Any, metric_id: str = "") -> str:
    """Return a metric's value as people read it: money for a ``*_usd`` metric ("$0.0052"), else ``number``."""
    if str(metric_id).endswith("_usd") and value not in (None, ""):
        return display.usd_text(value)
    return display.number_text(value)


@register.filter
def outcome_badge(passed: bool | None) -> SafeString:
    """A graded run's outcome as a badge in the one set of words (``display.outcome_word``: passed, bad)."""
    key = passed if isinstance(passed, bool) else None
    return format_html('<span class="badge {}">{}</span>', display.OUTCOME_CLASSES[key], display.outcome_word(key))


@register.filter
def instant(value: datetime | None) -> SafeString:
    """The site's one date format: ``<time datetime="…" title="3 min ago · …:07 UTC">2025-01-31 14:05 UTC</time>``.

    Absolute, in the configured time zone, with the relative and the seconds in its title (``display``).
    """
    if value is None:
        return SafeString("")
    return format_html('<time datetime="{}" title="{}">{}</time>', *display.instant_parts(value))


@register.filter
def ago(value: datetime | None) -> SafeString:
    """The same as ``instant`` (one date format on every page); kept so older templates read the same."""
    return instant(value)


@register.filter
def local(url: Any) -> str:
    """A link on the dashboard as a path: the SINGULARITY_PUBLIC_URL prefix a card or a notice carries is dropped.

    Links sent elsewhere (Telegram, PR bodies) need the public address; a page the person is already on keeps
    their own host, so the session cookie goes with the click. Other hosts' links are left as they are.
    """
    from django.conf import settings

    text = str(url or "")
    base = (getattr(settings, "SINGULARITY_PUBLIC_URL", "") or "").rstrip("/")
    if base and (text == base or text.startswith(base + "/")):
        return text[len(base) :] or "/"
    return text


@register.filter(needs_autoescape=True)
def local_links(text: Any, autoescape: bool = True) -> str:
    """A card's or a notice's text for the page: escaped, line breaks kept, and each dashboard address in it
    (on SINGULARITY_PUBLIC_URL, written for Telegram) a link by its path, so the click keeps the session;
    the emoji written for Telegram (🎯, 🛡) drawn as inline icons, since not every browser has an emoji font.
    """
    import re

    from django.conf import settings
    from django.utils.html import escape
    from django.utils.safestring import mark_safe

    body = escape(str(text or "")) if autoescape else str(text or "")
    base = (getattr(settings, "SINGULARITY_PUBLIC_URL", "") or "").rstrip("/")
    if base:
        pattern = re.compile(re.escape(escape(base)) + r"(/[^\s<>&\"']*)")
        body = pattern.sub(lambda m: f'<a href="{m.group(1)}">{m.group(1)}</a>', body)
    return mark_safe(page_glyphs(_with_diffs(body.split("\n"))))


#: A card's diff shows open up to this many lines; a longer one is folded behind its summary.
DIFF_OPEN_LINES = 40
_DIFF_LINE = ("+", "-", " ", "@@", "\\", "diff ")


def _with_diffs(lines: list[str]) -> str:
    """Escaped lines joined by <br>, each unified diff in them (``--- a/…`` then ``+++ …``) a ``pre.diff``."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            end = i + 2
            while end < len(lines) and lines[end] and lines[end].startswith(_DIFF_LINE):
                end += 1
            block = lines[i:end]
            spans = "".join(f'<span class="{_diff_class(row)}">{row}</span>\n' for row in block)
            shown = " open" if len(block) <= DIFF_OPEN_LINES else ""
            out.append(
                f'<details class="diff"{shown}><summary class="small">{block[0][4:].removeprefix("a/")} — {len(block)} lines of diff'
                f'</summary><pre class="diff">{spans}</pre></details>'
            )
            i = end
            continue
        out.append(line + ("<br>" if i + 1 < len(lines) else ""))
        i += 1
    return "".join(out)


def _diff_class(row: str) -> str:
    if row.startswith(("+++", "---")):
        return "diff-file"
    if row.startswith("@@"):
        return "diff-hunk"
    return {"+": "diff-add", "-": "diff-del"}.get(row[:1], "")


@register.filter
def sign_class(value: Any) -> str:
    """Return "pos", "neg" or "zero" for colouring an amount."""
    amount = _amount(value)
    if not amount:
        return "zero"
    return "pos" if amount > 0 else "neg"


@register.filter
def pairs(mapping: Any) -> list[tuple[str, Any]]:
    """Return a dict's (key, value) pairs sorted by key; a template's ``.items`` would read a key named "items"."""
    return sorted(mapping.items()) if isinstance(mapping, dict) else []


@register.filter
def status_badge(status: str) -> SafeString:
    """Return a coloured badge for a being's, a cycle's or a tool's status."""
    return format_html('<span class="badge {}">{}</span>', status, str(status).replace("_", " "))


@register.filter
def duration(started: datetime | None, finished: datetime | None) -> str:
    """Return the time between two instants as "850 ms", "12.3 s" or "4 min 05 s"; "" while unfinished."""
    if started is None or finished is None:
        return ""
    return _span(finished - started)


def _span(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _money_html(value: Any, css: str = "") -> SafeString:
    return format_html(
        '<span class="{}" title="{}">{}</span>',
        f"money {css}".strip(),
        display.usd_exact(value),
        display.usd_text(value),
    )


def _summary_tool(data: dict[str, Any]) -> SafeString:
    bits = format_html("<code>{}</code> {}", data.get("tool", "?"), status_badge(str(data.get("status", "?"))))
    if "duration_ms" in data:
        bits = format_html("{} <span class='muted'>{} ms</span>", bits, data["duration_ms"])
    if data.get("error"):
        bits = format_html("{} <span class='error'>{}</span>", bits, data["error"])
    return bits


def _summary_debit(data: dict[str, Any]) -> SafeString:
    return format_html(
        "spent {} <span class='muted'>(api {}, instance {})</span> · remaining {}",
        _money_html(data.get("amount"), "neg"),
        usd(data.get("api")),
        usd(data.get("instance")),
        _money_html(data.get("remaining")),
    )


def _summary_model(data: dict[str, Any]) -> SafeString:
    usage = data.get("usage") or {}
    return format_html(
        "round {} · <code>{}</code> · {} + {} tokens · {} tool call(s)",
        data.get("round", "?"),
        data.get("model", "?"),
        usage.get("prompt_tokens", "?"),
        usage.get("completion_tokens", "?"),
        data.get("tool_calls", 0),
    )


def _summary_revenue(data: dict[str, Any]) -> SafeString:
    return format_html(
        "earned {} from <code>{}</code> <span class='muted'>({})</span>",
        _money_html(data.get("amount"), "pos"),
        data.get("source", "?"),
        data.get("key", ""),
    )


def _summary_warning(data: dict[str, Any]) -> SafeString:
    extra = format_html_join(
        " ", "<span class='muted'>{}={}</span>", ((k, v) for k, v in data.items() if k != "message")
    )
    return format_html("<span class='warning-text'>⚠ {}</span> {}", data.get("message", ""), extra)


def _summary_cycle(data: dict[str, Any]) -> SafeString:
    return format_html("balance {} · model <code>{}</code>", _money_html(data.get("balance")), data.get("model", "?"))


def _summary_lifecycle(data: dict[str, Any]) -> SafeString:
    return format_html_join(" · ", "{}: {}", data.items())


_SUMMARIES = {
    Event.Kind.TOOL_FINISHED: _summary_tool,
    Event.Kind.COST_DEBITED: _summary_debit,
    Event.Kind.MODEL_COMPLETED: _summary_model,
    Event.Kind.REVENUE_CREDITED: _summary_revenue,
    Event.Kind.WARNING: _summary_warning,
    Event.Kind.CYCLE_STARTED: _summary_cycle,
}


@register.filter
def event_summary(event: Event) -> SafeString:
    """Return the event's data as one readable line of HTML: the tool and its status badge, amounts, warnings."""
    render = _SUMMARIES.get(event.kind, _summary_lifecycle)
    return render(event.data if isinstance(event.data, dict) else {"data": event.data})
