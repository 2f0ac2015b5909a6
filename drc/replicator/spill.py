"""Fragments of a large transaction wait for its commit in an unnamed temporary file.

The file is anonymous (unlinked on creation), so a crash leaves nothing to clean up; the
transaction is simply read from the binlog again after restart.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

from drc.core.codec import HEADER_SIZE, decode_transaction, encode_transaction, peek_length
from drc.core.events import Transaction


class FileSpill:
    def __init__(self, directory: Path | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=directory)

    def write(self, fragment: Transaction) -> None:
        self._file.write(encode_transaction(fragment))

    def read(self) -> Iterator[Transaction]:
        self._file.flush()
        self._file.seek(0)
        while header := self._file.read(HEADER_SIZE):
            record = header + self._file.read(peek_length(header) - HEADER_SIZE)
            yield decode_transaction(record)[0]

    def close(self) -> None:
        self._file.close()
