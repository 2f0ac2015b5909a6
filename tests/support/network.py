"""A TCP forwarder a test can cut and restore, and the pipe it forwards with."""

from __future__ import annotations

import socket
import threading


class Proxy:
    """A TCP forwarder to a server, which a test can cut (connections reset, new ones refused)
    and restore: a target going down and coming back, seen from the apply channel."""

    def __init__(self, host: str, port: int, listen: str = "127.0.0.1") -> None:
        self.upstream = (host, port)
        self.listen = listen
        self.port = _free_port()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.listen, self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, []
        if listener is not None:
            try:  # wakes the accept() blocked on it; close() alone would keep it listening
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()


def pipe(source: socket.socket, sink: socket.socket, lost: threading.Event | None = None) -> None:
    """Forward ``source`` to ``sink`` until either ends; while ``lost`` is set what arrives is
    read and dropped (a half-open link: the connection stays up, nothing gets through)."""
    try:
        while data := source.recv(65536):
            if lost is None or not lost.is_set():
                sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
