"""The crash-safe results file: records stream to a JSON-lines file as runs finish (each
flushed to disk), and a rerun skips every run already in the file, so an interrupted sweep
loses nothing.

The file is locked for the whole sweep (a second writer is refused), repaired without ever
rewriting a complete record in place (a torn tail is truncated; lines that are not records
go to a ``.rejected`` sidecar and the cleaned file replaces the old one by an atomic
rename). :func:`read_records` reads one and never modifies it. See ``docs/reliability.md``.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mabp_gym.core.validate import is_real
from mabp_gym.harness.runs import LATER_METRIC_KEYS, METRIC_KEYS

RECORD_FIELDS = {
    "key": str,
    "policy": str,
    "workload": str,
    "load": (int, float),
    "seed": int,
    "horizon": int,
}
"""Fields (and types) without which a line of a results file is not a record."""


class ResultsFileError(ValueError):
    """The results file cannot be used: held by another writer, or not creatable."""


class ResultsFileBusyError(ResultsFileError):
    """Another process holds the results file (two writers would duplicate runs)."""


class ResultsWriteError(OSError):
    """A finished run's record could not be written (a full disk, a quota, an I/O error).
    The file holds every record written before it, whole: rerunning resumes from there."""


RecordCheck = Callable[[Any], "str | None"]
"""Why a parsed line is not a record of a kind of results file (``None``: it is one)."""


def _record_problem(value: Any) -> str | None:
    """Why a parsed line is not a record (``None`` when it is one)."""
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object"
    for name, kind in RECORD_FIELDS.items():
        if name not in value:
            return f"no {name!r} field"
        if isinstance(value[name], bool) or not isinstance(value[name], kind):  # type: ignore[arg-type]
            return f"field {name!r} is {value[name]!r}"
    missing = [k for k in METRIC_KEYS if k not in value and k not in LATER_METRIC_KEYS]
    if missing:
        return f"no {missing[0]!r} field"
    # A value of the wrong kind crashed every later summary of the file.
    if not isinstance(value["stable"], bool):
        return f"field 'stable' is {value['stable']!r}"
    for name in METRIC_KEYS:
        number = value.get(name)
        if name != "stable" and number is not None and not is_real(number):
            return f"field {name!r} is {number!r}"
    trace = value.get("backlog_trace")
    if trace is not None and not (isinstance(trace, list) and all(map(is_real, trace))):
        return "field 'backlog_trace' is not a list of numbers"
    return None


def _scan(
    data: bytes, problem_of: RecordCheck = _record_problem
) -> tuple[list[tuple[bytes, dict[str, Any]]], list[tuple[bytes, str]]]:
    """Split the complete lines of a results file into records (first of each key kept)
    and rejected lines with the reason (``problem_of``: the kind's check); a torn last
    line is left out of both."""
    records: list[tuple[bytes, dict[str, Any]]] = []
    rejected: list[tuple[bytes, str]] = []
    seen: set[str] = set()
    complete = data[: data.rfind(b"\n") + 1]
    for raw in complete.splitlines(keepends=True):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            rejected.append((raw, "not JSON"))
            continue
        problem = problem_of(value)
        if problem is None and value["key"] in seen:
            problem = f"a second record of run {value['key']}"
        if problem is not None:
            rejected.append((raw, problem))
            continue
        seen.add(value["key"])
        records.append((raw, value))
    return records, rejected


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a JSON-lines results file (read only; never modifies it).

    A torn last line (a write cut by a kill) is left out with a warning (the next run
    that writes the file cuts it; a table read from the file lacks that run); a last
    record whose final newline alone is missing is read; a complete line that is not a
    record (``42``, ``null``, a record missing fields, bad JSON) or
    repeats a run already read is skipped with a warning. A missing file has no records.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    data = path.read_bytes()
    tail = data[data.rfind(b"\n") + 1 :]
    if _whole_record(tail, _record_problem):
        data += b"\n"  # a record whose newline alone is missing (an edited file) is whole
    elif tail.strip():
        warnings.warn(
            f"{path}: left out its torn last line ({len(tail)} bytes without a final newline: "
            "a write cut short); rerun the command that writes the file to complete it",
            stacklevel=2,
        )
    records, rejected = _scan(data)
    if rejected:
        warnings.warn(
            f"{path}: skipped {len(rejected)} line(s) that are not records "
            f"(first: {rejected[0][1]})",
            stacklevel=2,
        )
    return [value for _, value in records]


def results_kind(path: str | os.PathLike) -> str | None:
    """Whose results ``path`` holds, by its first JSON object line: ``"fleet"`` (a router
    over a trace: ``mabp-gym fleet``), ``"eval"`` (a policy on a workload: ``evaluate``,
    ``mabp-gym eval``, ``table``, ``sweep``, ``bench``); ``"other"`` for a file with
    content none of which is either (not a results file: notes, a CSV, a workload written
    without a final newline); None for a missing or empty file, or one holding only a torn
    first record (an unterminated line that starts as a record, ``{``, and does not parse)."""
    path = Path(path)
    if not path.is_file():
        return None
    lines = False
    with path.open("rb") as handle:
        for raw in handle:
            try:
                value = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                torn = not raw.endswith(b"\n") and raw.lstrip().startswith(b"{")
                lines = lines or (bool(raw.strip()) and not torn)
                continue
            lines = lines or bool(raw.strip())
            if isinstance(value, dict) and {"router", "trace"} <= value.keys():
                return "fleet"
            if isinstance(value, dict) and {"policy", "workload"} <= value.keys():
                return "eval"
    return "other" if lines else None


def check_results_kind(path: str | os.PathLike, kind: str, what: str = "output") -> None:
    """Refuse a results file ``path`` that holds another command's records (``kind``:
    ``"eval"`` or ``"fleet"``), or no records at all (a file that is not a results file):
    read as this kind's, its lines would be set aside as not records, or this kind's records
    appended among them."""
    found = results_kind(path)
    if found == "other":
        raise ValueError(
            f"{what} {str(path)!r} exists and no line of it is a run's record: it is not a "
            "results file, and writing to it would move its lines aside; give a new path or "
            "an existing results file"
        )
    if found is not None and found != kind:
        names = {"eval": "policy evaluations", "fleet": "fleet replays (mabp-gym fleet)"}
        raise ValueError(
            f"{what} {str(path)!r} holds {names[found]}, not {names[kind]}: give it a results "
            "file of its own"
        )


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _fsync_directory(path: Path) -> None:
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _set_aside(path: Path, rejected: list[tuple[bytes, str]]) -> None:
    """Append rejected lines to the ``.rejected`` sidecar, each after a reason line."""
    with _sidecar(path, ".rejected").open("ab") as sidecar:
        for raw, reason in rejected:
            note = json.dumps({"rejected_from": path.name, "reason": reason})
            sidecar.write(note.encode() + b"\n" + raw.rstrip(b"\n") + b"\n")
        sidecar.flush()
        os.fsync(sidecar.fileno())


def _whole_record(tail: bytes, problem_of: RecordCheck) -> bool:
    """Whether an unterminated last line is a whole record that lacks only its newline
    (a file edited by hand). A write cut short cannot look like one: a record is written
    with its newline in one call, and no proper prefix of a JSON object parses."""
    if not tail.strip():
        return False
    try:
        value = json.loads(tail)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return problem_of(value) is None


def _repair(
    path: Path, kind: str = "eval", problem_of: RecordCheck = _record_problem
) -> dict[str, dict[str, Any]]:
    """Make ``path`` a file of whole, distinct records of ``kind`` (``problem_of``: why a
    line is not one) and return them by key.

    Never loses a complete record, whenever it is killed: a torn last line is cut off by
    truncating the file in place (one system call; the complete lines before it are never
    rewritten), a last record missing only its newline gets one, and lines that are not
    records are copied to the ``.rejected`` sidecar before a cleaned copy is written to a
    temporary file and renamed over the original (atomic: a kill leaves either the old
    file or the new one). The caller holds the lock.
    """
    if not path.exists():
        return {}
    check_results_kind(path, kind, "results file")  # before anything is set aside
    try:
        return _repaired(path, problem_of)
    except OSError as error:  # a full disk while setting lines aside: nothing was lost
        raise ResultsWriteError(
            f"{path} could not be repaired ({error.strerror or error}); the file is as it "
            "was: free space (or fix the file system) and rerun the same command"
        ) from error


def _repaired(path: Path, problem_of: RecordCheck) -> dict[str, dict[str, Any]]:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        if _whole_record(data[keep:], problem_of):
            with path.open("ab") as handle:
                handle.write(b"\n")
                handle.flush()
                os.fsync(handle.fileno())
            data += b"\n"
        else:
            _set_aside(path, [(data[keep:], "torn last line (an interrupted write)")])
            with path.open("r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())
            data = data[:keep]
    records, rejected = _scan(data, problem_of)
    if rejected:
        warnings.warn(
            f"{path}: set aside {len(rejected)} line(s) that are not records in "
            f"{_sidecar(path, '.rejected').name} (first: {rejected[0][1]}); their "
            "runs are recomputed",
            stacklevel=4,
        )
        _set_aside(path, rejected)
        cleaned = _sidecar(path, ".repair")
        with cleaned.open("wb") as handle:
            handle.writelines(raw for raw, _ in records)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(cleaned, path)
        _fsync_directory(path)
    return {value["key"]: value for _, value in records}


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """Raise ``ValueError`` unless ``path`` can be written as a regular file: not a
    directory or a device, in an existing directory, writable."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{what} must be a file path (str or os.PathLike), got {path!r}")
    path = Path(path)
    if path.exists() or path.is_symlink():
        if path.is_dir():
            raise ValueError(f"{what} {str(path)!r} is a directory; give a file path")
        if not path.is_file():
            raise ValueError(
                f"{what} {str(path)!r} is not a regular file (a device, a pipe or a broken link)"
            )
        if not os.access(path, os.W_OK):
            raise ValueError(f"{what} {str(path)!r} is not writable")
        return path
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"{what} {str(path)!r}: the directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {str(path)!r}: the directory {str(parent)!r} is not writable")
    return path


class _ResultsFile:
    """A results file held under an exclusive ``fcntl`` lock (on a ``.lock`` sidecar, so
    that the atomic rename of a repair keeps it) for as long as a sweep writes to it."""

    def __init__(self, path: Path) -> None:
        # The file itself, not a link to it: a link and its target are one file to lock,
        # and a repair's rename replaces the file, not the link.
        self.path = path.resolve()
        self._lock: Any = None
        self.sink: Any = None

    def __enter__(self) -> _ResultsFile:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory locks
            fcntl = None  # type: ignore[assignment]
        lock = _sidecar(self.path, ".lock")
        try:
            self._lock = lock.open("a+")
        except OSError as error:  # os.access can say yes where creating fails (/proc, /sys)
            raise ResultsFileError(
                f"{self.path} cannot be written here: its lock file {lock} cannot be created "
                f"({error.strerror}); give a path in a writable directory"
            ) from None
        if fcntl is not None:
            try:
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._lock.seek(0)
                holder = self._lock.read().strip() or "unknown"
                self._lock.close()
                raise ResultsFileBusyError(
                    f"{self.path} is being written by another process (pid {holder}); two "
                    "writers would duplicate runs: wait for it to finish, or write to "
                    "another file"
                ) from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(str(os.getpid()))
        self._lock.flush()
        return self

    def open_for_append(self) -> None:
        # Unbuffered: a record reaches the file in this call or not at all (below).
        self.sink = self.path.open("ab", buffering=0)

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` and its newline and sync them to disk. Where that fails (a
        full disk, a quota), the part written is cut off again, so the file keeps whole
        records only, and :class:`ResultsWriteError` says how to resume."""
        data = memoryview(json.dumps(record).encode() + b"\n")
        fd = self.sink.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise ResultsWriteError(
                f"a finished run could not be written to {self.path} "
                f"({error.strerror or error}); every run written before it is kept there: "
                "free space (or fix the file system) and rerun the same command to resume"
            ) from error

    def __exit__(self, *exc: Any) -> None:
        if self.sink is not None:
            self.sink.close()
        self._lock.close()  # closing the descriptor releases the lock
