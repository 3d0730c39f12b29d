"""Blocks of whole lines from one Baidu-ULTR file, gzip or plain, in bounded memory: the gzip stream read
member by member with its CRC checked, a truncated or corrupt stream salvaged up to the last whole line decoded,
an over-long line quarantined without being held whole (io/baidu's rules)."""
from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from ...storage import open_input  # inputs may be fsspec URLs
from ..baidu_kernels import count_newlines
from ..quarantine import QuarantineRecord, raw_text

CHUNK_BYTES = 8 << 20          # decompressed bytes parsed at a time
MAX_LINE_BYTES = 1 << 20       # a longer line is quarantined as line_too_long, never held whole
SNIFF_BYTES = 64 << 10         # decoded bytes inspected to tell binary content from text
GZIP_MAGIC = b"\x1f\x8b"
GZIP_SUFFIXES = (".gz", ".gzip")
_IN_BYTES = 64 << 10           # compressed bytes given to zlib at a time (what a damage can cost)
_GZIP_WBITS = 16 + zlib.MAX_WBITS   # gzip header and trailer, CRC checked



# ---------------------------------------------------------------------------------------------
# Blocks of whole lines from a (possibly gzip, possibly damaged) file
# ---------------------------------------------------------------------------------------------
@dataclass
class Block:
    data: bytes        # whole lines, each ending in b"\n" (one is added to a last line without it)
    first_line: int    # 1-based number of its first line


class BlockReader:
    """Yields blocks of whole lines (and line_too_long records) from one file in bounded memory.

    After iteration, `lines` (whole lines read), `bytes_uncompressed` and `damage` (a file-level
    reason or None) are set; `cut` holds the partial line a damaged stream ended in.
    """

    def __init__(self, path: str, block_bytes: int = CHUNK_BYTES):
        if block_bytes <= 0:
            raise ValueError(f"chunk_bytes: must be > 0, got {block_bytes}")
        self.path = path
        self.block_bytes = block_bytes
        self.lines = 0
        self.bytes_uncompressed = 0
        self.damage: str | None = None
        self.cut = b""
        self.unverified = 0   # bytes decoded from the gzip member being read, not yet checked by its CRC

    def _pieces(self, raw: BinaryIO) -> Iterator[bytes]:
        """Decompressed pieces (from zlib, as they come; of plain text, block_bytes read at a time).

        zlib directly rather than GzipFile, whose buffered reads drop the last decoded bytes when a
        stream turns out truncated; multi-member files are followed member by member. Compressed
        input goes in _IN_BYTES at a time; when zlib rejects a piece, the piece is fed again byte by
        byte from the state before it, so every byte decoded before the damage is kept.
        """
        head = raw.read(2)
        if head != GZIP_MAGIC:
            if head and self.path.lower().endswith(GZIP_SUFFIXES):
                self.damage = "not_gzip"
                return
            raw.seek(0)
            yield from iter(lambda: raw.read(self.block_bytes), b"")
            return
        raw.seek(0)
        yield from self._inflate(raw)

    def _inflate(self, raw: BinaryIO) -> Iterator[bytes]:
        """The decoded bytes of a gzip file, member after member, in pieces; sets `damage`."""
        inflater, data, fed = zlib.decompressobj(_GZIP_WBITS), b"", False
        while True:
            if not data:
                data = raw.read(_IN_BYTES)
                if not data:
                    if fed and not inflater.eof:
                        yield from filter(None, [inflater.flush()])  # bytes decoded before the cut
                        self.damage = "truncated_gzip"
                    return
            fed = True
            before = inflater.copy()
            try:
                piece = inflater.decompress(data, self.block_bytes)
            except zlib.error:
                for piece in self._salvage(before, data):
                    self.unverified += len(piece)
                    yield piece
                self.damage = "corrupt_gzip"
                return
            if piece:
                self.unverified += len(piece)
                yield piece
            if inflater.eof:  # the member's CRC and length checked; next member, if any
                self.unverified = 0
                inflater, data, fed = zlib.decompressobj(_GZIP_WBITS), inflater.unused_data, False
            else:
                data = inflater.unconsumed_tail

    @staticmethod
    def _salvage(inflater, data: bytes) -> Iterator[bytes]:
        """What `inflater` decodes from `data` fed byte by byte, up to the byte zlib rejects."""
        for i in range(len(data)):
            try:
                piece = inflater.decompress(data[i:i + 1])
            except zlib.error:
                return
            if piece:
                yield piece

    def _counted(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            self.bytes_uncompressed += len(piece)
            yield piece

    def _sniffed(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        """The pieces, unless the first SNIFF_BYTES are binary (then none, and damage = not_gzip)."""
        head, size = [], 0
        for piece in pieces:
            head.append(piece)
            size += len(piece)
            if size >= SNIFF_BYTES:
                break
        if _is_binary(b"".join(head)[:SNIFF_BYTES]):
            self.damage = "not_gzip"
            return
        yield from head
        yield from pieces

    def _too_long(self, head: bytes) -> QuarantineRecord:
        self.lines += 1
        return QuarantineRecord(self.path, self.lines, "line_too_long", raw_text(head))

    def _block(self, parts: list[bytes], at: int, cut: int) -> tuple[Block, list[bytes]]:
        """(the block of parts[:at] and parts[at][:cut], the parts after it): one copy of the bytes."""
        block = b"".join([*parts[:at], memoryview(parts[at])[:cut]])
        first_line = self.lines + 1
        self.lines += count_newlines(np.frombuffer(block, dtype=np.uint8))
        return Block(block, first_line), [parts[at][cut:], *parts[at + 1:]]

    def __iter__(self) -> Iterator[Block | QuarantineRecord]:
        # Decoded pieces are held as they come and joined once, into a block of whole lines, when
        # their whole lines reach block_bytes (or before a line_too_long record, or at the end).
        parts: list[bytes] = []   # bytes not in a block yet
        size = 0                  # their length
        whole = 0                 # their length up to the end of their last newline (0: none)
        at = cut = 0              # that newline's end: parts[at][:cut]
        skipping = False  # inside a too-long line already reported: drop bytes up to its newline
        with open_input(self.path) as raw:   # a local path or an fsspec URL (wpultr.storage)
            for piece in self._sniffed(self._counted(self._pieces(raw))):
                if skipping:
                    newline = piece.find(b"\n")
                    if newline < 0:
                        continue
                    piece, skipping = piece[newline + 1:], False
                parts.append(piece)
                size += len(piece)
                newline = piece.rfind(b"\n")
                if newline >= 0:
                    at, cut, whole = len(parts) - 1, newline + 1, size - len(piece) + newline + 1
                if whole >= self.block_bytes or (whole and size - whole > MAX_LINE_BYTES):
                    block, parts = self._block(parts, at, cut)
                    yield block
                    size, whole = size - whole, 0
                if size - whole > MAX_LINE_BYTES:    # the bytes after the last newline: a line too long
                    yield self._too_long(b"".join(parts))
                    parts, size, skipping = [], 0, True
        if whole:
            block, parts = self._block(parts, at, cut)
            yield block
        pending = b"".join(parts)
        if self.damage in ("truncated_gzip", "corrupt_gzip"):
            self.cut = pending   # a line the damage cut short: never parsed, kept in the file record
        elif pending:
            yield Block(pending + b"\n", self.lines + 1)
            self.lines += 1
        if self.damage is None and self.bytes_uncompressed == 0:
            self.damage = "empty_file"

    @property
    def unverifiable(self) -> bool:
        """The stream is corrupt and bytes were decoded from the member whose check failed: they may be garbage
        (flipped bytes decode without error until the CRC at the member's end)."""
        return self.damage == "corrupt_gzip" and self.unverified > 0

    def damage_record(self) -> QuarantineRecord | None:
        if self.damage is None:
            return None
        if self.damage in ("empty_file", "not_gzip"):   # the file as a whole: line 0
            return QuarantineRecord(self.path, 0, self.damage, "")
        return QuarantineRecord(self.path, self.lines + 1, self.damage, raw_text(self.cut))


def _is_binary(sample: bytes) -> bool:
    """Binary content: NUL bytes or invalid UTF-8 make up over a quarter of the sample."""
    if not sample:
        return False
    bad = sample.count(b"\x00") + sample.decode("utf-8", "replace").count("\ufffd")
    return 4 * bad > len(sample)


def unverified_record(path: str, reader: BlockReader, rows: int) -> QuarantineRecord:
    """The one record left of a file whose gzip check failed after bytes were decoded: every line is dropped."""
    return QuarantineRecord(path, 1, "corrupt_gzip",
                            f"lines 1-{reader.lines} dropped ({rows} rows): a gzip member failed its check after "
                            f"{reader.unverified} decoded bytes, so nothing of the file is known intact")
