"""Small HTTP helpers for the integration tests: http.client requests, raw socket exchanges,
and /metrics parsing."""

import http.client
import json
import socket
import time


def request(server, method, path, body=None, headers=None, timeout=120):
    """Returns (status, headers with lower-case names, body bytes). `body`: bytes, str or a
    JSON-able object."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode("utf-8")
        all_headers = {"Content-Type": "application/json"} if body is not None else {}
        all_headers.update(headers or {})
        conn.request(method, path, body=body, headers=all_headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def json_request(server, method, path, body=None, headers=None, timeout=120):
    status, response_headers, data = request(server, method, path, body, headers, timeout)
    return status, response_headers, json.loads(data) if data else None


def connect(server, timeout=30):
    return socket.create_connection((server.host, server.port), timeout=timeout)


def read_response(sock, deadline_s=30):
    """Reads until the server closes or a whole non-chunked response with Content-Length has
    arrived. Returns the raw bytes."""
    sock.settimeout(deadline_s)
    data = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length" and len(body) >= int(value):
                    return data
    return data


def status_of(raw):
    """The status code of a raw response ("HTTP/1.1 400 Bad Request" -> 400), or None."""
    if not raw.startswith(b"HTTP/1."):
        return None
    return int(raw.split(b" ", 2)[1])


def body_of(raw):
    return raw.partition(b"\r\n\r\n")[2]


def metrics(server, headers=None):
    """Sample name with labels ('pier_x{model="m"}') -> float, from /metrics."""
    status, _, data = request(server, "GET", "/metrics", headers=headers)
    assert status == 200, data
    values = {}
    for line in data.decode("utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        values[name] = float(value)
    return values


def metric(values, name):
    """The value of the one sample of `name` (any labels)."""
    found = [v for k, v in values.items() if k == name or k.startswith(name + "{")]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]
