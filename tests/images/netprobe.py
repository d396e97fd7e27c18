"""A TCP probe run inside the network namespaces of the network test (standalone script).

    netprobe.py serve PORT...                 listen on every address; answer each connection
                                              with the peer's address; print "ready" once bound
    netprobe.py connect HOST PORT [SOURCE]    print "ok <the address the server saw>",
                                              "refused" or "timeout"
"""

from __future__ import annotations

import selectors
import socket
import sys

TIMEOUT = 1.0
"""How long a connection may take before it counts as dropped: every peer is one veth hop away,
so an answer takes well under a millisecond."""


def serve(ports: list[int]) -> None:
    sel = selectors.DefaultSelector()
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen(16)
        sel.register(sock, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            listener = key.fileobj
            assert isinstance(listener, socket.socket)
            conn, (peer, _) = listener.accept()
            with conn:
                conn.sendall(f"{peer}\n".encode())


def connect(host: str, port: int, source: str | None) -> str:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    try:
        if source:
            sock.bind((source, 0))
        sock.connect((host, port))
        seen = sock.recv(64).decode().strip()
    except ConnectionRefusedError:
        return "refused"
    except (TimeoutError, socket.timeout):
        return "timeout"
    except OSError as err:
        return f"error {err.errno}"
    finally:
        sock.close()
    return f"ok {seen}"


def main(argv: list[str]) -> None:
    if argv[0] == "serve":
        serve([int(p) for p in argv[1:]])
    else:
        print(connect(argv[1], int(argv[2]), argv[3] if len(argv) > 3 else None))


if __name__ == "__main__":
    main(sys.argv[1:])
