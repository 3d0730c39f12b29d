"""`python -m wpultr.simulate.bundled_sample --out data/sample`: the bundled sample in the Baidu-ULTR layout.

Simulates a few thousand sessions with a fixed seed, writes them as three gzip session logs plus the
annotation file and the truth, then damages a handful of lines of documented kinds at deterministic
places, so ingest's quarantine can be checked against a known answer. MANIFEST.json lists the files,
what was written, every injected corruption (file, 1-based line, kind, the reader's quarantine reason,
how many generated result lines it makes unreadable, how many lines it puts in quarantine) and the
totals a correct reader keeps. Re-running the command gives byte-identical files.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import WpultrError
from ..io.baidu_writer import write_gzip
from ..rundir.files import Replaces, atomic_path, file_sha256, holds_only, read_json
from ..schema import BAIDU_MAX_POSITION, BAIDU_N_RESULT_FIELDS, BAIDU_QUERY_FIELDS, BAIDU_RESULT_FIELDS
from ..settings.simulate import SimulateConfig
from .generate import simulate

SAMPLE_SEED = 20240513
SAMPLE_CONFIG = SimulateConfig(n_queries=300, docs_per_query=20, n_sessions=3000, n_annotated_queries=100)
SESSIONS_PER_FILE = 1000
COMMAND = "python -m wpultr.simulate.bundled_sample --out data/sample"
MANIFEST = "MANIFEST.json"
_FIELD = {name: i for i, name in enumerate(BAIDU_RESULT_FIELDS) if name is not None}
_TAB = b"\t"


@dataclass
class _Line:
    text: bytes
    tag: int | None = None       # index of the corruption this line carries


@dataclass(frozen=True)
class _Session:
    query: int                   # index of the query line in the file's line list
    results: tuple[int, ...]     # indices of its result lines


def _set_field(line: bytes, index: int, value: bytes) -> bytes:
    fields = line.split(_TAB)
    fields[index] = value
    return _TAB.join(fields)


@dataclass(frozen=True)
class CorruptionKind:
    """One kind of damage: where it goes, what it does, and what a correct reader makes of it."""

    name: str
    description: str
    reader_reason: str           # the quarantine reason (wpultr.io.quarantine.REASONS) of the damaged line
    target: str                  # "result" (a result line), "query" (a query line) or "insert" (a new line)
    damage: Callable[[bytes, np.random.Generator], bytes]


KINDS: tuple[CorruptionKind, ...] = (
    CorruptionKind("wrong_field_count", "a result line lost its last field (31 tab-separated fields)",
                   "wrong_field_count", "result", lambda line, rng: line.rsplit(_TAB, 1)[0]),
    CorruptionKind("non_numeric_click", "the click field of a result line is 'yes'", "bad_click", "result",
                   lambda line, rng: _set_field(line, _FIELD["click"], b"yes")),
    CorruptionKind("empty_query", "a query line has no query tokens; its results follow it", "empty_query", "query",
                   lambda line, rng: _set_field(line, 1, b"")),
    CorruptionKind("bad_token_id", "a title token of a result line is '7x1'", "bad_token_id", "result",
                   lambda line, rng: _set_field(line, _FIELD["title_tokens"],
                                                b"7x1" + b"\x01" + line.split(_TAB)[_FIELD["title_tokens"]])),
    CorruptionKind("position_out_of_range", f"a result line's position is {BAIDU_MAX_POSITION + 1}",
                   "bad_position", "result",
                   lambda line, rng: _set_field(line, _FIELD["position"], str(BAIDU_MAX_POSITION + 1).encode())),
    CorruptionKind("broken_query_line", "a query line's id is not a number ('q' prefixed); its results follow it",
                   "bad_query_id", "query", lambda line, rng: b"q" + line),
    CorruptionKind("garbage_bytes", "a line of 48 random non-UTF-8 bytes inserted between two sessions",
                   "wrong_field_count", "insert",
                   lambda line, rng: bytes(rng.integers(0x80, 0x100, size=48, dtype=np.uint8).tolist())),
    CorruptionKind("invalid_utf8", "the abstract field of a result line holds the bytes FF FE", "not_utf8",
                   "result", lambda line, rng: _set_field(line, _FIELD["abstract_tokens"], b"\xff\xfe")),
    CorruptionKind("non_numeric_height", "the serp_height field of a result line is 'tall'", "bad_number",
                   "result", lambda line, rng: _set_field(line, _FIELD["serp_height"], b"tall")),
    CorruptionKind("bad_media_type", "the media type field of a result line is 'video'", "bad_media_type",
                   "result", lambda line, rng: _set_field(line, _FIELD["media_type"], b"video")),
    CorruptionKind("orphan_result", "a copy of a result line inserted as the first line of a file, "
                                    "before any query line", "orphan_result", "insert", lambda line, rng: line),
    CorruptionKind("query_extra_field", "a query line with a 4th field; its results follow it and must not join "
                                        "the session before", "wrong_field_count", "query",
                   lambda line, rng: line + _TAB + b"-"),
    CorruptionKind("duplicate_position", "a copy of a session's first result line inserted right after it "
                                         "(its position twice)", "duplicate_position", "insert",
                   lambda line, rng: line),
)


def _sessions(lines: list[_Line]) -> list[_Session]:
    """The sessions as generated: a damaged query line still opens its session."""
    sessions: list[_Session] = []
    for i, line in enumerate(lines):
        n_fields = line.text.count(_TAB) + 1
        if n_fields == len(BAIDU_QUERY_FIELDS) or (line.tag is not None and KINDS[line.tag].target == "query"):
            sessions.append(_Session(query=i, results=()))
        elif n_fields == BAIDU_N_RESULT_FIELDS:
            sessions[-1] = _Session(sessions[-1].query, sessions[-1].results + (i,))
    return sessions


def _inject(files: list[list[_Line]], rng: np.random.Generator) -> list[dict]:
    """Damage the files in place, kind i in file i mod n_files, each in its own session; return the records."""
    used: set[tuple[int, int]] = set()
    records = []
    inserts: list[tuple[int, int, _Line]] = []       # (file, insert before this line index, line)
    for tag, kind in enumerate(KINDS):
        f = tag % len(files)
        sessions = _sessions(files[f])
        free = [s for s in range(1, len(sessions)) if (f, s) not in used]
        s = int(rng.choice(free))
        used.add((f, s))
        session = sessions[s]
        unreadable = quarantined = 0
        if kind.target == "result":
            target = session.results[int(rng.integers(len(session.results)))]
            files[f][target] = _Line(kind.damage(files[f][target].text, rng), tag)
            unreadable = quarantined = 1
        elif kind.target == "query":
            files[f][session.query] = _Line(kind.damage(files[f][session.query].text, rng), tag)
            unreadable = len(session.results)
            quarantined = 1 + len(session.results)
        else:
            source = files[f][session.results[0]].text
            where = {"orphan_result": 0, "duplicate_position": session.results[0] + 1}.get(kind.name, session.query)
            inserts.append((f, where, _Line(kind.damage(source, rng), tag)))
            quarantined = 1
        records.append({"kind": kind.name, "description": kind.description, "reader_reason": kind.reader_reason,
                        "unreadable_result_lines": unreadable, "quarantined_lines": quarantined,
                        "sessions_lost": int(kind.target == "query")})
    for f, where, line in sorted(inserts, key=lambda item: (item[0], -item[1])):
        files[f].insert(where, line)
    return records


def _is_sample(path: Path) -> bool:
    """`path` holds an earlier sample and nothing else: its MANIFEST.json (naming this command) and the files that
    lists, each with the sha256 it lists (rundir.ownership's rule: origin by content hash, never by name)."""
    try:
        manifest = read_json(path / MANIFEST)
        hashes = {entry["path"]: entry["sha256"] for entry in manifest["files"]}
        if manifest.get("command") != COMMAND or not holds_only(path, ({*hashes, MANIFEST}).__contains__):
            return False
        return all(file_sha256(path / rel) == digest for rel, digest in hashes.items())
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False


SAMPLE = Replaces(f"an earlier sample (a {MANIFEST} and the files it lists with their sha256, nothing else)",
                  _is_sample)


def write_sample(out: str | Path) -> dict:
    """Write the sample (logs, annotations, truth, damage, MANIFEST.json) to `out`, replacing only an earlier
    sample there; return the manifest."""
    out = Path(out)
    logs = simulate(SAMPLE_CONFIG, seed=SAMPLE_SEED)
    with atomic_path(out, SAMPLE, key="--out") as tmp:
        written = logs.write(tmp, fmt="baidu", sessions_per_file=SESSIONS_PER_FILE, command=None)
        train = sorted(p for p in written if p.parent.name == "train")
        files = [[_Line(text) for text in gzip.decompress(p.read_bytes()).split(b"\n")[:-1]] for p in train]
        per_file = [(len(_sessions(lines)), sum(len(s.results) for s in _sessions(lines))) for lines in files]
        records = _inject(files, np.random.default_rng(SAMPLE_SEED))
        for path, lines in zip(train, files, strict=True):
            write_gzip(b"".join(line.text + b"\n" for line in lines), path)
            for number, line in enumerate(lines, start=1):
                if line.tag is not None:
                    records[line.tag] = {"file": path.relative_to(tmp).as_posix(), "line": number, **records[line.tag]}
        listed = []
        for path in written:
            entry = {"path": path.relative_to(tmp).as_posix(), "bytes": path.stat().st_size,
                     "sha256": file_sha256(path)}
            if path in train:
                i = train.index(path)
                entry.update(sessions=per_file[i][0], result_lines=per_file[i][1], lines=len(files[i]))
            listed.append(entry)
        sessions = sum(n for n, _ in per_file)
        results = sum(n for _, n in per_file)
        manifest = {
            "command": COMMAND,
            "seed": SAMPLE_SEED,
            "simulate_config": dataclasses.asdict(SAMPLE_CONFIG),
            "files": listed,
            "sessions_written": sessions,
            "result_lines_written": results,
            "annotation_lines_written": logs.annotation_table.num_rows,
            "corruptions": sorted(records, key=lambda r: (r["file"], r["line"])),
            "sessions_readable": sessions - sum(r["sessions_lost"] for r in records),
            "result_lines_readable": results - sum(r["unreadable_result_lines"] for r in records),
            "quarantined_lines": sum(r["quarantined_lines"] for r in records),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m wpultr.simulate.bundled_sample",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path,
                        help="directory to write the sample to (an earlier sample there is replaced)")
    args = parser.parse_args(argv)
    try:
        manifest = write_sample(args.out)
    except WpultrError as error:   # a path it will not replace: one line, as the wpultr CLIs show it
        parser.exit(2, f"error: {error}\n")
    print(f"wrote {manifest['sessions_written']} sessions ({manifest['result_lines_written']} result lines) in "
          f"{sum(1 for f in manifest['files'] if f['path'].startswith('train/'))} files, "
          f"{len(manifest['corruptions'])} damaged lines, to {args.out}")


if __name__ == "__main__":
    main()
