"""How deep a JSON text nests, judged before it is parsed.

The standard library's parser recurses once per level of arrays and objects, up to the
interpreter's recursion limit, and whatever the garbage collector runs down there (another
object's finalizer, a callback) fails for want of stack ("Exception ignored"). So every JSON
text a client sends is measured first, and one nested too deep is never parsed. A text that
opens too many levels before it breaks is refused as too deep, not as broken.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

STRING = re.compile(rb'"(?:[^"\\]|\\.?)*"?', re.DOTALL)
"""A JSON string: the brackets inside it open nothing. An unterminated one runs to the end of
the text (the parser stops there too), so a match never fails once begun: no backtracking,
one pass whatever the text."""
LEVELS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
"""Opening brackets to 1, closing ones to -1 (read as signed bytes)."""
NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[{]}")))


def nests_deeper(raw: bytes | str, limit: int) -> bool:
    """Whether arrays and objects open more than `limit` deep anywhere in a JSON text: the
    deepest running count of opening less closing brackets, strings taken out, in C (up to
    about 100 ms for a MiB, whatever its shape; two counts for a text with few brackets).
    Bytes are read as `json.loads` reads them (UTF-8, -16 or -32); bytes it cannot decode are
    not measured: it refuses them before it parses anything."""
    text = _utf8(raw)
    if text is None or text.count(b"[") + text.count(b"{") <= limit:
        return False
    brackets = STRING.sub(b"", text).translate(LEVELS, NOT_BRACKETS)
    return max(accumulate(memoryview(brackets).cast("b")), default=0) > limit


def _utf8(raw: bytes | str) -> bytes | None:
    """The text as UTF-8 (its strings' bytes can then hold no quote or bracket of the
    text's), decoded as `json.loads` decodes bytes; None if that fails."""
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogatepass")
    encoding = json.detect_encoding(raw)
    if encoding.startswith("utf-8"):
        return raw
    try:
        return raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    except UnicodeError:
        return None
