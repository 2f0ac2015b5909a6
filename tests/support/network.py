"""A TCP forwarder a test can cut and restore, the pipe it forwards with, and a server that falls
silent."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


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


@contextmanager
def silent_server(first_reply: bytes | None = None) -> Iterator[str]:
    """The URL of a server on loopback that accepts connections and never answers (a paused
    process, a half-open link): only a timeout or a hang-up ends a request to it. With
    ``first_reply`` it sends that to the first request it reads, then falls silent (a leader
    paused between two requests on one kept-alive connection)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()
    answered = threading.Event()

    def serve(conn: socket.socket) -> None:
        conn.settimeout(0.1)
        while not stop.is_set():
            try:
                if not conn.recv(65536):
                    return
            except OSError:
                continue
            if first_reply is not None and not answered.is_set():
                answered.set()
                conn.sendall(first_reply)

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn = listener.accept()[0]
            except OSError:
                continue
            held.append(conn)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
