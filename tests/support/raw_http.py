"""HTTP by hand, for the test servers that answer on a raw socket."""

from __future__ import annotations

import socket


def read_http_request(sock: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP request off a raw socket: its head and its Content-Length body (for test
    servers that answer by hand); ConnectionError if the peer hangs up first."""

    def more() -> bytes:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the peer hung up mid-request")
        return chunk

    data = b""
    while b"\r\n\r\n" not in data:
        data += more()
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += more()
    return head, body
