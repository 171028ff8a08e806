"""What every loader shares: the result type, file readers and typed field access.

Error policy (the same in every loader):

* The file itself is unreadable (missing, not UTF-8, invalid or truncated JSON, a
  line of the wrong shape): :class:`~pipelines.errors.DataError` naming the file, the
  record (line, item index or byte offset) and the field.
* A record's skeleton is unusable (the fields without which no Episode can be built,
  e.g. LoCoMo's ``conversation`` or LongMemEval's ``haystack_sessions``, missing or of
  the wrong type): DataError naming the file, the record and the field.
* A part of a record is bad (one turn, one question, one memory, one evidence id, one
  date): the part is dropped, the record is kept, and the loss is counted in
  :attr:`LoadResult.dropped` under a reason, with a few ``"file record: detail"``
  examples in :attr:`LoadResult.examples`.
* Something kept but worth reporting (RealMem ground truth naming the current or a
  later session, LongMemEval sessions put in date order) is counted in
  :attr:`LoadResult.flagged`.
* A known quirk of the published files is normalised where it is read, and counted like
  the rest: a turn whose text is blank is left out (:data:`BLANK_TURN`, see :func:`blank`).

Every drop reason is declared in :data:`DROP_KINDS` with the kind of record it leaves
out, so the loss policy (``pipelines.validate.load``) can tell a load that lost every
turn or every query, or too many turns, from one that left out a few bad parts.

Loaders parse parts with the same :func:`get` helper that raises DataError, and catch
DataError at the part boundary (:meth:`LoadResult.dropping`), so the message that
would have been raised becomes the example of the drop.
"""

from __future__ import annotations

import codecs
import json
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from pipelines.data.schema import Episode
from pipelines.errors import DataError, MissingInput

MAX_EXAMPLES = 5  # examples kept per drop reason

BLANK_TURN = "blank_turn"  # a turn whose text has no visible character (LongMemEval S: 12, RealMem: 6)

# Drop reason -> the kind of record it leaves out. Turns, queries, sessions, memories, episodes
# and triplets are what the loss policy weighs (every one of a kind lost, or too many turns); the
# other kinds are parts of a kept record (an evidence id, a date, a link, a persona sentence, a
# placeholder turn that carries no utterance).
DROP_KINDS: dict[str, str] = {
    **dict.fromkeys(("bad_turn", BLANK_TURN, "duplicate_turn_id", "missing_response",
                     "speaker_count_mismatch"), "turns"),
    **dict.fromkeys(("bad_qa", "bad_query", "duplicate_query_id", "query_without_answer"), "queries"),
    **dict.fromkeys(("bad_session", "duplicate_session_in_haystack"), "sessions"),
    **dict.fromkeys(("bad_memory", "bad_observation", "bad_summary", "duplicate_memory_id",
                     "duplicate_memory_number"), "memories"),
    **dict.fromkeys(("empty_dialogue", "empty_episode", "empty_record"), "episodes"),
    **dict.fromkeys(("bad_triplet", "unknown_relation"), "triplets"),
    **dict.fromkeys(("bad_evidence", "malformed_evidence", "unresolved_evidence", "unresolved_memory"),
                    "evidence ids"),
    **dict.fromkeys(("missing_date", "unparsed_date", "date_without_session",
                     "timestamp_lost_after_unparsed_gap"), "dates"),
    **dict.fromkeys(("bad_link", "unresolved_link", "unresolved_memory_tag"), "memory links and tags"),
    "bad_persona": "persona sentences",
    "line_number_gap": "lines",
    "silence_placeholder": "placeholder turns",
}


def blank(text: str) -> bool:
    """True when ``text`` has no visible character (such a turn is dropped as :data:`BLANK_TURN`)."""
    return not text.strip()


@dataclass
class LoadResult:
    """Episodes read from a source, and what was left out on the way."""

    episodes: list[Episode] = field(default_factory=list)         # canonical episodes, in file order
    dropped: Counter[str] = field(default_factory=Counter)        # reason -> number of parts left out
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> a few "file record: detail"
    flagged: Counter[str] = field(default_factory=Counter)        # reason -> parts kept but flagged
    records: dict[str, str] = field(default_factory=dict)         # episode id -> "file line N" (for reports)

    def _example(self, reason: str, example: str) -> None:
        kept = self.examples.setdefault(reason, [])
        if len(kept) < MAX_EXAMPLES:
            kept.append(example)

    def drop(self, reason: str, example: str, n: int = 1) -> None:
        """Count ``n`` parts left out for ``reason`` (a key of :data:`DROP_KINDS`)."""
        if reason not in DROP_KINDS:  # a programming error: the loss policy could not weigh it
            raise ValueError(f"drop reason {reason!r} is not declared in DROP_KINDS")
        self.dropped[reason] += n
        self._example(reason, example)

    def flag(self, reason: str, example: str, n: int = 1) -> None:
        """Count ``n`` parts kept but flagged for ``reason``."""
        self.flagged[reason] += n
        self._example(reason, example)

    @contextmanager
    def dropping(self, reason: str) -> Iterator[None]:
        """Run the body; a DataError inside drops that part under ``reason``."""
        try:
            yield
        except DataError as exc:
            self.drop(reason, str(exc))

    def lost(self) -> dict[str, int]:
        """Kind of record -> how many were left out (:data:`DROP_KINDS`), for every kind dropped."""
        out: Counter[str] = Counter()
        for reason, n in self.dropped.items():
            out[DROP_KINDS[reason]] += n
        return dict(sorted(out.items()))

    def counts(self, totals: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Totals of what was loaded (episodes, sessions, turns, memories, queries, triplets), and
        what was left out or flagged on the way: reason -> count, and reason -> first examples.

        ``totals``: the :func:`tally` of the episodes, when they were streamed rather than kept in
        :attr:`episodes` (default: the tally of :attr:`episodes`)."""
        totals = tally(self.episodes) if totals is None else totals
        return {**{k: int(totals.get(k, 0)) for k in TOTALS},
                "dropped": dict(sorted(self.dropped.items())),
                "flagged": dict(sorted(self.flagged.items())),
                "examples": dict(sorted(self.examples.items()))}


TOTALS = ("episodes", "sessions", "turns", "memories", "queries", "triplets")  # what LoadResult.counts totals


def tally(episodes: Iterable[Episode], totals: Counter[str] | None = None) -> Counter[str]:
    """Add the :data:`TOTALS` of ``episodes`` to ``totals`` (default: a new Counter); returns it."""
    totals = Counter() if totals is None else totals
    for ep in episodes:
        totals["episodes"] += 1
        totals["queries"] += len(ep.queries)
        totals["sessions"] += len(ep.sessions)
        for s in ep.sessions:
            totals["turns"] += len(s.turns)
            totals["memories"] += len(s.memories)
            for t in s.turns:
                totals["triplets"] += len(t.triplets)
    return totals


# --- where a record is --------------------------------------------------------------

@dataclass(frozen=True)
class Where:
    """A record's address, used in every error and drop example."""

    file: str    # path of the file being read
    record: str  # "line 12", "item 3 (conv-26)", "item 3 (conv-26) qa[17]"

    def error(self, message: str, field: str | None = None) -> DataError:
        return DataError(message, file=self.file, record=self.record, field=field)

    def at(self, suffix: str) -> "Where":
        """The address of a part of this record."""
        return Where(self.file, f"{self.record} {suffix}")

    def example(self, detail: str) -> str:
        return f"{self.file} {self.record}: {detail}"


_JSON_NAMES = {dict: "object", list: "array", str: "string", int: "integer", float: "number",
               bool: "boolean", type(None): "null"}


def type_name(value: object) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


_MISSING = object()


def get(obj: object, key: str, types: type | tuple[type, ...], where: Where, *,
        required: bool = True, default: Any = None, name: str | None = None) -> Any:
    """``obj[key]`` checked against ``types``; DataError naming the field otherwise.

    ``required=False`` returns ``default`` when the key is absent or null. A boolean
    never passes for an integer or a number unless ``bool`` is in ``types``.
    """
    name = name or key
    if not isinstance(obj, dict):
        raise where.error(f"expected a JSON object holding '{key}', got {type_name(obj)}", field=name)
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise where.error("missing required field", field=name)
        return default
    check(value, types, where, name)
    return value


def check(value: object, types: type | tuple[type, ...], where: Where, name: str) -> Any:
    """``value`` itself checked against ``types`` (same rules as :func:`get`)."""
    types = types if isinstance(types, tuple) else (types,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        wanted = " or ".join(_JSON_NAMES.get(t, t.__name__) for t in types)
        raise where.error(f"expected {wanted}, got {type_name(value)}", field=name)
    return value


def str_list(obj: object, key: str, where: Where, *, required: bool = True) -> list[str]:
    """A list of strings (every item checked)."""
    items = get(obj, key, list, where, required=required, default=[])
    for i, item in enumerate(items):
        check(item, str, where, f"{key}[{i}]")
    return items


M = TypeVar("M", bound=BaseModel)


def build(model: type[M], where: Where, **values: Any) -> M:
    """Construct a schema model; a pydantic rejection becomes a DataError naming the field."""
    try:
        return model(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or model.__name__
        raise where.error(f"{model.__name__}: {err['msg']}", field=loc) from None


# --- files --------------------------------------------------------------------------

def require_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise (MissingInput if not path.exists() else DataError)(
            "file does not exist" if not path.exists() else "not a regular file", file=str(path))
    return path


def files_in(path: str | Path, pattern: str) -> list[Path]:
    """``path`` itself if it is a file, else the files under it matching ``pattern``, sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise MissingInput("path does not exist", file=str(path))
    found = sorted(p for p in path.glob(pattern) if p.is_file())
    if not found:
        raise DataError(f"no file matching '{pattern}' in this folder", file=str(path))
    return found


def _utf8_error(data: bytes, exc: UnicodeDecodeError, path: Path) -> DataError:
    line = data.count(b"\n", 0, exc.start) + 1
    return DataError(f"not UTF-8 ({exc.reason})", file=str(path),
                     record=f"byte {exc.start} (line {line})")


def read_text(path: str | Path) -> str:
    """The whole file as text, a leading BOM dropped; DataError with byte offset and line of bad UTF-8."""
    path = require_file(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _utf8_error(data, exc, path) from None


def load_json(path: str | Path) -> Any:
    """Parse a whole JSON file; DataError with line, column and character on bad JSON."""
    path = Path(path)
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        what = "truncated JSON" if exc.pos >= len(text.rstrip()) else "invalid JSON"
        raise DataError(f"{what} ({exc.msg})", file=str(path),
                        record=f"line {exc.lineno} column {exc.colno} (char {exc.pos})") from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, object) for each non-blank line of a JSON-lines file."""
    path = require_file(path)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"not UTF-8 ({exc.reason} at byte {exc.start} of the line)",
                                file=str(path), record=f"line {lineno}") from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"invalid JSON ({exc.msg}, column {exc.colno})", file=str(path),
                                record=f"line {lineno}") from None


def iter_records(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Records of a file that is either one JSON array or JSON lines: ("line N"|"item N", obj)."""
    path = require_file(path)
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:].lstrip()
    if head.startswith(b"["):  # a JSON array (e.g. a Hugging Face export): streamed, item by item
        for i, obj in stream_json_array(path):
            yield f"item {i}", obj
    else:
        for lineno, obj in iter_jsonl(path):
            yield f"line {lineno}", obj


def _first_bad_utf8(path: Path) -> DataError | None:
    """Scan a (large) file in 1 MiB chunks for the first invalid UTF-8 byte."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    base = lines = 0  # bytes and newlines before the current chunk
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            pending = decoder.getstate()[0]
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                data = pending + chunk
                offset = base - len(pending) + exc.start
                line = lines + data.count(b"\n", len(pending), max(exc.start, len(pending))) + 1
                return DataError(f"not UTF-8 ({exc.reason})", file=str(path),
                                 record=f"byte {offset} (line {line})")
            base += len(chunk)
            lines += chunk.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            return DataError(f"not UTF-8 ({exc.reason}) at the end of the file", file=str(path),
                             record=f"byte {base}")
    return None


def stream_json_array(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(index, item) of a top-level JSON array, parsed incrementally with ijson.

    Only one item is held in memory at a time, so a 260 MB file never becomes one
    Python object tree. Truncation, invalid JSON and invalid UTF-8 raise DataError
    naming the item being read and the byte offset reached.
    """
    import ijson  # streaming parser (C backend yajl2_c); only this reader needs it

    path = require_file(path)
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
        if head.startswith(b"\xef\xbb\xbf"):
            head = head[3:].lstrip()
        if not head.startswith(b"["):
            raise DataError("expected a JSON array of records at the top level", file=str(path),
                            record="byte 0")
        f.seek(0)
        done = 0  # items yielded so far: the one failing is item `done`
        items = ijson.items(f, "item", use_float=True)
        try:
            while True:  # no local name keeps an item alive while the caller holds the next one
                try:
                    yield done, next(items)
                except StopIteration:
                    return
                done += 1
        except UnicodeDecodeError as exc:  # yajl passes some byte sequences Python rejects (surrogates)
            raise (_first_bad_utf8(path) or DataError(f"not UTF-8 ({exc.reason})", file=str(path),
                                                      record=f"item {done}")) from None
        except ijson.JSONError as exc:
            bad = _first_bad_utf8(path) if "UTF8" in repr(exc) else None
            if bad is not None:
                raise bad from None
            reason = exc.args[0] if exc.args else str(exc)
            reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
            first = reason.strip().splitlines()[0] if reason.strip() else "parse error"
            what = "truncated JSON" if "premature EOF" in first else "invalid JSON"
            raise DataError(f"{what} ({first})", file=str(path),
                            record=f"item {done} (near byte {f.tell()})") from None


# --- splits -------------------------------------------------------------------------

_SPLIT_WORDS = {"train": "train", "training": "train", "valid": "valid", "val": "valid",
                "validation": "valid", "dev": "valid", "test": "test"}


def split_from_name(path: str | Path, default: str) -> str:
    """train / valid / test from a file name (``val``, ``validation``, ``dev`` = valid)."""
    for word in re.split(r"[^a-z]+", Path(path).name.lower()):
        if word in _SPLIT_WORDS:
            return _SPLIT_WORDS[word]
    return default
