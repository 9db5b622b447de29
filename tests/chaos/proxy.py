"""A small TCP proxy on 127.0.0.1 that can cut, black-hole and slow the way to a store.

Modes:
- ``pass``: bytes flow both ways (optionally each chunk delayed by ``delay`` seconds);
- ``cut``: every open connection is reset, and new ones are accepted and reset at once;
- ``blackhole``: connections stay open but no byte goes through (clients time out).

Threads only; every loop wakes at least every 50 ms and ends when the proxy closes.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time


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
        self.conns: list[tuple[socket.socket, socket.socket]] = []
        self.generation = 0  # bumped by cut(): pumps of older generations stop
        self.accepted = 0
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
        for a, b in conns:
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
            with self.lock:
                self.conns.append((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst, gen), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, gen: int) -> None:
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
                if delay > 0:
                    time.sleep(delay)
                dst.sendall(data)
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
