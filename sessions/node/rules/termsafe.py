"""Node text made safe for a terminal: the one rule, for every place it meets one.

A node's strings (a frame's file name in a Flight Recorder dump, a py-spy function
name, a log line, a py-spy error) are written by whatever runs there. Written raw to a
terminal, an escape sequence in them is obeyed: OSC 52 sets the user's clipboard, a CSI
clears the screen or moves the cursor over what mntui printed, OSC 0 retitles the window.
So every escape sequence is removed whole (CSI, OSC, DCS, SOS, PM, APC, and the short
ESC ones; 7-bit and 8-bit introducers alike), then every C0 and C1 control and DEL
(newline and tab kept where lines are wanted), and the invisible format characters
(Unicode's Cf) and line and paragraph separators: a right-to-left override (U+202E)
and its kin reorder what the terminal shows after them, so a hostile "why" can make
the line read as something else (CVE-2021-42574), and a tag character or a zero-width
space hides text the user never sees. The joiners (U+200C, U+200D) are kept: scripts
and emoji need them, and they move nothing. The list is fixed, not asked of
`unicodedata` (whose table is the node's Python's, and slow to scan at import);
tests/unit check it against this Python's. Text without any of them comes back as it
is. Pure: the CLI's writer and the report's writer both call it, and so does the
coordinator on the main node (node text it puts in a verdict), so the rule lives in the
node package, which imports nothing of ours; `mntui.sessions.termsafe` re-exports it.
"""

from __future__ import annotations

import re

# A string sequence (OSC, DCS, SOS, PM, APC) runs to BEL or ST; one left unterminated is
# cut at the line's end (its introducer is gone, so what remains is inert text).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: parameters, intermediates, final byte
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"  # the short ones: ESC c (reset), ESC 7, ESC ( B ...
)
# Cf but the joiners, with the line and paragraph separators (Zl, Zp), as of Unicode 15.1
FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
# C0 but tab and newline, DEL, C1, and the format characters
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + FORMAT + "]")
_LINE_BREAK = re.compile(r"[\t\n]")


def clean(text: str) -> str:
    """`text` without escape sequences and controls; newlines and tabs kept."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub("", _SEQUENCE.sub("", text))


def one_line(text: str, limit: int | None = None) -> str:
    """`clean`, on one line (newlines and tabs become spaces), cut to `limit` characters
    (cut first: a huge string costs no more than its kept part)."""
    kept = text if limit is None else text[:limit]
    return _LINE_BREAK.sub(" ", clean(kept))
