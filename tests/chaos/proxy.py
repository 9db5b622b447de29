"""A small TCP proxy on 127.0.0.1 that can cut, black-hole and slow the way to a store.

Modes:
- ``pass``: bytes flow both ways (optionally each chunk delayed by ``delay`` seconds);
- ``cut``: every open connection is reset, and new ones are accepted and reset at once;
- ``blackhole``: connections stay open but no byte goes through (clients time out).

Independently of the mode, ``refuse(marker)`` resets every connection whose client's first bytes
contain ``marker`` (an HTTP header naming the sender, say), open or new; the others pass.

Threads only; every loop wakes at least every 50 ms and ends when the proxy closes.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time


#: how much of a connection's first bytes refuse() looks at
HEAD_BYTES = 4096


class Proxy:
    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.mode = "pass"
        self.delay = 0.0
        self.closed = False
        self.lock = threading.Lock()
        self.conns: list[tuple[socket.socket, socket.socket, bytearray]] = []  # + the client's first bytes
        self.refused: bytes | None = None
        self.generation = 0  # bumped by cut(): pumps of older generations stop
        self.accepted = 0
        self.bytes_up = 0  # client to server, passed on (for benches that count bytes)
        self.bytes_down = 0  # server to client
        self.thread = threading.Thread(target=self._accept_loop, name="chaos-proxy", daemon=True)
        self.thread.start()

    # -- control -------------------------------------------------------------------------------
    def set_pass(self, delay: float = 0.0) -> None:
        with self.lock:
            self.mode = "pass"
            self.delay = delay

    def cut(self) -> None:
        with self.lock:
            self.mode = "cut"
            self.generation += 1
            conns, self.conns = self.conns, []
        for a, b, _ in conns:
            _reset(a)
            _reset(b)

    def refuse(self, marker: bytes | None) -> None:
        """Resets every connection whose client's first bytes contain `marker`, and each new one
        when its first bytes do; None lets them all through again."""
        with self.lock:
            self.refused = marker
            hit = [c for c in self.conns if marker and marker in c[2]]
            self.conns = [c for c in self.conns if c not in hit]
        for a, b, _ in hit:
            _reset(a)
            _reset(b)

    def blackhole(self) -> None:
        with self.lock:
            self.mode = "blackhole"

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.thread.join(timeout=5)
        self.listener.close()

    # -- machinery -----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            with self.lock:
                mode, gen = self.mode, self.generation
            if mode == "cut":
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:
                _reset(client)
                continue
            head = bytearray()
            with self.lock:
                self.conns.append((client, server, head))
            for src, dst, h in ((client, server, head), (server, client, None)):
                threading.Thread(target=self._pump, args=(src, dst, gen, h), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, gen: int, head: bytearray | None) -> None:
        """Copies src to dst; `head` (client to server only) collects the first bytes for refuse()."""
        held: list[bytes] = []  # bytes held back while black-holed
        try:
            while not self.closed:
                with self.lock:
                    mode, delay, cur = self.mode, self.delay, self.generation
                if cur != gen:
                    return
                if mode == "pass" and held:
                    # Black-holed bytes are lost, as on a real partition: drop the connection.
                    return
                r, _, _ = select.select([src], [], [], 0.05)
                if not r:
                    continue
                data = src.recv(65536)
                if not data:
                    return
                if mode == "blackhole":
                    held.append(data)
                    continue
                if head is not None and len(head) < HEAD_BYTES:
                    with self.lock:
                        head += data[: HEAD_BYTES - len(head)]
                        refused = self.refused is not None and self.refused in head
                    if refused:
                        return
                if delay > 0:
                    time.sleep(delay)
                dst.sendall(data)
                with self.lock:
                    if head is not None:
                        self.bytes_up += len(data)
                    else:
                        self.bytes_down += len(data)
        except (OSError, ValueError):  # ValueError: the socket was closed by cut()
            pass
        finally:
            _reset(src)
            _reset(dst)


def _reset(s: socket.socket) -> None:
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
