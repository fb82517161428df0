"""The opaque cursor: a log position wrapped so clients cannot come to depend on what it holds.

One encoding for every place that hands a position out: list pages, the event log's `cursor`
and `next_cursor`, and the CloudEvents that webhooks deliver. Reading one back strictly is the
REST edge's job (api/rest/paging.py).
"""

from __future__ import annotations

import base64
import json

CURSOR_VERSION = 1


def encode_cursor(position: int) -> str:
    raw = json.dumps({"v": CURSOR_VERSION, "after": position}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
