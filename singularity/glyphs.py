"""Emoji that outgoing texts carry, drawn on the dashboard as small inline SVG icons.

Telegram shows 🎯 and 🛡 with its own font; a browser without an emoji font
(Debian's Chromium) draws a box. The texts keep the glyphs; the pages swap
them for icons named for screen readers.
"""

from __future__ import annotations

_SVG = (
    '<svg class="glyph" role="img" aria-label="{label}" viewBox="0 0 16 16" width="1em" height="1em" '
    'style="vertical-align:-0.125em"><title>{label}</title>{body}</svg>'
)
_TARGET = (
    '<circle cx="8" cy="8" r="7" fill="#d64545"/><circle cx="8" cy="8" r="4.7" fill="#fff"/>'
    '<circle cx="8" cy="8" r="2.4" fill="#d64545"/>'
)
_SHIELD = '<path d="M8 1 2.5 3v4.5c0 3.4 2.4 6.3 5.5 7.5 3.1-1.2 5.5-4.1 5.5-7.5V3z" fill="#4a6fa5"/>'

#: Each glyph (with the variation selector a sender may add) and the icon a page shows for it.
ICONS = {
    "\U0001f3af": _SVG.format(label="objective", body=_TARGET),
    "\U0001f6e1\ufe0f": _SVG.format(label="guard", body=_SHIELD),
    "\U0001f6e1": _SVG.format(label="guard", body=_SHIELD),
}


def page_glyphs(html: str) -> str:
    """Return ``html`` (already escaped) with each known glyph replaced by its inline SVG icon."""
    for glyph, icon in ICONS.items():
        html = html.replace(glyph, icon)
    return html
