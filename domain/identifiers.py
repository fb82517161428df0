"""What a name chosen by a client may be: the one source of the rules for identifiers.

Identifiers (resource types and ids, principals, subject, context and checkpoint ids,
organizations) are compared byte for byte, never normalised, so text that reads the same must
have one spelling: an identifier is refused, never rewritten, when it is empty, longer than
NAME_LENGTH or only whitespace, holds a control character (Cc, U+2028, U+2029), a lone surrogate
(Cs) or an invisible format character (Cf), or is not in NFC. Organizations also appear in each
CloudEvent's `source`, so they are URI-safe (RFC 3986 unreserved, starting with a letter or
digit). REST, MCP and `titen keys create` all check these rules. The published `PATTERN` says
what a portable pattern can (no NFC, no Cf beyond the BMP, which ECMA-262 patterns without the
`u` flag cannot match); `problem` checks all.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from titen.domain.limits import NAME_LENGTH

CONTROL = "must not contain control characters"
FORMAT = "must not contain invisible format characters (Unicode Cf)"
NOT_NFC = "must be in Unicode normalization form C (NFC)"
BLANK = "must not be only whitespace"
EMPTY = "must not be empty"
NOT_URI_SAFE = (
    "must be letters, digits, '.', '_', '~' or '-' (URI-safe), starting with a letter or digit"
)

LINE_SEPARATORS = "\u2028\u2029"
ORGANIZATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")


def _bmp_class(wanted: Callable[[str], bool]) -> str:
    """A regular-expression class body of the BMP characters `wanted` holds for (no surrogates,
    so that the pattern works in ECMA-262 with or without the `u` flag)."""
    codes = [c for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF and wanted(chr(c))]
    parts, start = [], None
    for index, code in enumerate(codes):
        if start is None:
            start = code
        if index + 1 == len(codes) or codes[index + 1] != code + 1:
            parts.append(_escape(start) if start == code else f"{_escape(start)}-{_escape(code)}")
            start = None
    return "".join(parts)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _forbidden(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cf") or char in LINE_SEPARATORS


_FORBIDDEN = _bmp_class(_forbidden)
_SPACE = _bmp_class(lambda char: char.isspace() and not _forbidden(char))
PATTERN = f"^[{_SPACE}]*[^{_FORBIDDEN}{_SPACE}][^{_FORBIDDEN}]*$"
"""Single-line text with a non-space character and no BMP control or format character.

Leading spaces, then the first other character, then the rest: each character can be matched
one way only, so the pattern takes linear time in every engine (no backtracking blow-up).
"""


def problem(value: str, max_length: int = NAME_LENGTH) -> str | None:
    """Why `value` is not an acceptable identifier (a predicate for "FIELD ..."), or None."""
    if not value:
        return EMPTY
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    categories = {unicodedata.category(char) for char in value}
    if categories & {"Cc", "Cs"} or any(char in LINE_SEPARATORS for char in value):
        return CONTROL
    if "Cf" in categories:
        return FORMAT
    if value.isspace():
        return BLANK
    if not unicodedata.is_normalized("NFC", value):
        return NOT_NFC
    return None


def organization_problem(value: str) -> str | None:
    """Why `value` is not an acceptable organization, or None."""
    return problem(value) or (None if ORGANIZATION.fullmatch(value) else NOT_URI_SAFE)
