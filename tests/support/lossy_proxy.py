"""A TCP proxy on loopback that can lose a reply: the request reaches the server, its answer never comes back.

`LossyProxy(port).start()` forwards `127.0.0.1:<proxy.port>` to `127.0.0.1:<port>`.
After `lose_reply(after=n)`, n answers pass and the next bytes the server sends
on any connection are dropped and that connection is closed both ways — what a client sees when
the network or the server fails between running a command and answering it.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class LossyProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._armed = threading.Event()
        self._passing = 0
        #: replies lost so far
        self.lost = 0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> LossyProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def lose_reply(self, *, after: int = 0) -> None:
        """Let `after` answers (each one read from the server) through, then lose the next."""
        self._passing = after
        self._armed.set()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if replies and self._armed.is_set():
                    if self._passing == 0:
                        self._armed.clear()
                        self.lost += 1
                        break
                    self._passing -= 1
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()
        with self._lock:
            for end in self._sockets:
                try:
                    end.close()
                except OSError:
                    pass

    def __enter__(self) -> LossyProxy:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
