"""The Baidu-ULTR session ingest: one Dask task per file (gzip cannot be split by byte range), each writing its
sessions partitions in row groups and its quarantine records; the inputs checked and the summaries combined."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa

from ...memory import large_blocks_kept
from ...progress import ingest_rates
from ...schema import BAIDU_N_RESULT_FIELDS, SchemaError
from ...storage import size  # inputs may be fsspec URLs
from ..quarantine import IngestSummary, QuarantineRecord, QuarantineWriter
from ..tables import SessionPartitionWriter, checked_paths, ingest_output, map_files, partition_name
from .blocks import CHUNK_BYTES, GZIP_SUFFIXES, unverified_record
from .sessions import QUERY_FIELD_COUNT, SESSIONS_SCHEMA, SessionLogParser

ROW_GROUP_ROWS = 1 << 16       # parsed rows gathered per Parquet write (row group): fewer dictionaries and pages
TEXT_SUFFIXES = (".txt", ".tsv", ".log")
LOG_SUFFIXES = GZIP_SUFFIXES + TEXT_SUFFIXES   # a session log's name ends in one of these, or has no suffix


def _sessions_parquet_options(schema: pa.Schema) -> dict:
    """ParquetWriter options of the sessions partitions: token-id lists DELTA_BINARY_PACKED rather than
    dictionary-encoded, without min/max statistics (nothing filters on token ids); other columns as default.

    Why (bench/ingest.py log, one 127 MB file): dictionary-encoding the lists was a third of the ingest's
    CPU; delta-packing takes about 0.35 CPU-s less per file, gives files of the same size (random ids in
    a bounded vocabulary pack to as few bits either way) and reads faster.
    """
    lists = [f.name for f in schema if pa.types.is_list(f.type)]
    others = [name for name in schema.names if name not in lists]
    return {"use_dictionary": others, "write_statistics": others,
            "column_encoding": {f"{name}.list.element": "DELTA_BINARY_PACKED" for name in lists}}


_SESSIONS_PARQUET = _sessions_parquet_options(SESSIONS_SCHEMA)



def _row_groups(chunks: Iterator[tuple[pa.Table, list[QuarantineRecord]]], quarantine: QuarantineWriter
                ) -> Iterator[list[pa.Table]]:
    """The parsed tables in runs of ROW_GROUP_ROWS rows or more (the last run shorter), each to be one
    row group; the quarantine records go to `quarantine` as they come.

    A block parses into about 12 000 rows; a row group of one block each was a tenth more CPU to
    write and a tenth larger (a dictionary per column per row group) than one of 65 536 rows.
    """
    run, rows = [], 0
    for table, records in chunks:
        quarantine.add(records)
        if table.num_rows:
            run.append(table)
            rows += table.num_rows
        if rows >= ROW_GROUP_ROWS:
            yield run
            run, rows = [], 0
    if run:
        yield run


def _ingest_file(path: str, file_index: int, sessions_dir: str, quarantine_dir: str, partition_rows: int,
                 chunk_bytes: int) -> IngestSummary:
    """One worker task: parse one log, write its partitions and quarantine file, return a small summary."""
    parser = SessionLogParser(path, file_index, chunk_bytes)
    partitions = SessionPartitionWriter(sessions_dir, file_index, partition_rows, _SESSIONS_PARQUET)
    quarantine_path = Path(quarantine_dir) / f"part-{file_index:05d}.parquet"
    quarantine = QuarantineWriter(quarantine_path)
    try:
        with large_blocks_kept():   # glibc reuses the freed multi-MB blocks (see memory.py)
            for tables in _row_groups(parser.chunks(), quarantine):
                partitions.write(pa.concat_tables(tables))
        partitions.close()
        _check_layout(parser)
    except BaseException:
        partitions.abort()
        quarantine.abort()
        raise
    if parser.reader.unverifiable:
        return _drop_unverified(parser, partitions, quarantine, size(path))
    quarantine.close()
    summary = IngestSummary(files=1, lines=parser.reader.lines, sessions=parser.sessions,
                            results=parser.results, bytes_read=size(path),
                            bytes_uncompressed=parser.reader.bytes_uncompressed,
                            partitions=partitions.partitions,
                            damaged_files=[path] if parser.reader.damage else [])
    summary.add_records(quarantine.counts)
    summary.add_mapped(parser.mapped)
    return summary


def _check_layout(parser: SessionLogParser) -> None:
    """SchemaError when a readable file holds lines but none with a query's or a result's field count."""
    reader = parser.reader
    if reader.damage is None and reader.lines and not parser.layout_lines:
        raise SchemaError(f"{parser.path}: not a Baidu-ULTR session log: none of its {reader.lines} lines has "
                          f"{QUERY_FIELD_COUNT} (query) or {BAIDU_N_RESULT_FIELDS} (result) tab-separated fields")


def _drop_unverified(parser: SessionLogParser, partitions: SessionPartitionWriter, quarantine: QuarantineWriter,
                     bytes_read: int) -> IngestSummary:
    """A file whose gzip check failed: its partitions (this ingest's own, still in its temporary directory) and
    line records are dropped; one corrupt_gzip record names the lines, the summary counts them and their rows."""
    for k in range(partitions.partitions):
        (partitions.directory / partition_name(parser.file_index, k)).unlink()
    quarantine.abort()
    replacement = QuarantineWriter(quarantine.path)
    replacement.add([unverified_record(parser.path, parser.reader, parser.results)])
    replacement.close()
    summary = IngestSummary(files=1, lines=parser.reader.lines, bytes_read=bytes_read,
                            bytes_uncompressed=parser.reader.bytes_uncompressed, damaged_files=[parser.path],
                            unverified_lines=parser.reader.lines, unverified_rows=parser.results)
    summary.add_records(replacement.counts)
    return summary


def check_log_names(files: Sequence[str]) -> None:
    """SchemaError naming the first file whose name is not a session log's: LOG_SUFFIXES, or no suffix."""
    for f in files:
        name = f.rstrip("/").rsplit("/", 1)[-1].lower()
        if "." in name.lstrip(".") and not name.endswith(LOG_SUFFIXES):
            raise SchemaError(f"{f}: not a Baidu-ULTR session log by its name; expected gzip "
                              f"({', '.join(GZIP_SUFFIXES)}) or text ({', '.join(TEXT_SUFFIXES)}, or no suffix); "
                              f"tables (.parquet, .csv) go with --format table")


def ingest_baidu(paths: Sequence[str | Path], out_dir: str | Path, client, partition_rows: int = 200_000,
                 chunk_bytes: int = CHUNK_BYTES, key: str = "--out") -> IngestSummary:
    """Ingest Baidu-ULTR session logs on the Dask `client`, one task per file (in this process when it is None).

    Workers write out_dir/sessions/part-<file#>-<k>.parquet and out_dir/quarantine/part-<file#>.parquet
    themselves (so out_dir must be on a file system every worker sees); only summaries travel back. Both
    directories are written under temporary names and swapped into place when every file is done
    (tables.ingest_output); `key` names out_dir in a refusal.
    """
    files, duplicates = checked_paths(paths)
    check_log_names(files)
    with ingest_output(out_dir, files, key, client) as output:
        summary = IngestSummary.combine(map_files(
            client, _ingest_file, files, ingest_rates, sessions_dir=str(output.sessions),
            quarantine_dir=str(output.quarantine), partition_rows=partition_rows, chunk_bytes=chunk_bytes))
    summary.duplicate_inputs = duplicates
    return summary
