"""What the server says, made safe to print.

Printed as they come, class names from the server would reach the terminal with their control
characters, so a hostile server could write the clipboard (OSC 52) and clear the screen through
``petlab-client``. Every string a server sent (names, descriptions, error details, released
results) goes through :func:`shown` before the device or the analyst prints it: C0 and C1 controls,
DEL, Unicode format characters (bidi overrides and isolates, zero-width characters), line and
paragraph separators, surrogates and unassigned code points are written as visible escapes
(``\\x1b``, ``\\u202e``), and a text longer than ``limit`` characters is cut. Nothing else changes:
letters of every script pass as they are.
"""

from __future__ import annotations

import unicodedata

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Cn"})
TEXT_LIMIT = 4096  # characters of one server text printed


def shown(text: object, limit: int = TEXT_LIMIT) -> str:
    """``text`` (anything; ``str()`` of it) with every character that could steer a terminal
    written as an escape, cut to ``limit`` characters (the cut marked)."""
    text = str(text)
    cut = len(text) > limit
    escaped = "".join(_visible(character) for character in text[:limit])
    return escaped + (f"... [{len(text) - limit} more characters]" if cut else "")


def _visible(character: str) -> str:
    if unicodedata.category(character) not in HIDDEN_CATEGORIES:
        return character
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
