"""HEAD and OPTIONS through a real server: a HEAD answer has GET's head and not one byte of
body (on a kept-alive connection a stray byte would corrupt the next answer), and OPTIONS needs
no key."""

from __future__ import annotations

import socket

from tests.support import Server, create_key


def heads(sock: socket.socket, count: int) -> list[bytes]:
    """Read answers that have no body until the server closes: there must be `count` heads
    and nothing else."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    *answers, rest = data.split(b"\r\n\r\n", count)
    assert len(answers) == count and rest == b"", data  # no body, not even a last chunk
    return answers


def test_head_answers_like_get_without_a_body_and_options_without_a_key(database):
    key = create_key(database, "acme", "agent_a")
    server = Server(database, 4)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(  # kept alive, so a stray body byte would spoil the next answer
                b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
                b"OPTIONS /v1/events/tickets HTTP/1.1\r\nHost: t\r\n\r\n"
                b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
                # chunked, as the stream's GET is, so the server closes after it
                b"HEAD /v1/events/stream HTTP/1.1\r\nHost: t\r\n"
                b"Authorization: Bearer " + key.encode() + b"\r\n\r\n"
            )
            health, options, again, stream = heads(sock, 4)
    finally:
        server.stop()
    assert health.startswith(b"HTTP/1.1 200") and b"Content-Length: 26" in health
    assert options.startswith(b"HTTP/1.1 200") and b"Allow: OPTIONS, POST" in options
    assert again.startswith(b"HTTP/1.1 200")
    assert stream.startswith(b"HTTP/1.1 200") and b"Content-Type: text/event-stream" in stream
