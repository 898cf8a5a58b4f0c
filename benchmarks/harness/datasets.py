"""Loaders for the three benchmark datasets in their original formats.

Each loader returns a :class:`Dataset`: a list of :class:`Group` objects, one per corpus that is
stored as one user's memories (a LoCoMo conversation, a LongMemEval question's haystack, a
MemoryBank user), each with its documents and the questions asked against it. The protocols are
those of ``docs/models-and-data.md``:

* **LoCoMo** (``locomo10*.json``): every turn of every ``session_<n>`` list, id = ``dia_id``,
  text ``"{speaker}: {text}"`` plus ``" [image: {blip_caption}]"`` when the turn shares an image,
  timestamp = the session's ``session_<n>_date_time`` (``"1:56 pm on 8 May, 2023"``, read as UTC).
  Questions of categories 1-4 with at least one evidence id are scored; category 5 (adversarial)
  is kept apart. Malformed evidence ids are normalised (``"D8:6; D9:17"`` → two ids,
  ``"D:11:26"`` → ``"D11:26"``, ``"D30:05"`` → ``"D30:5"``); ids naming no turn are dropped and
  counted.
* **LongMemEval** (``.json`` or ``.json.gz``): the corpus of a question is the user turns of its
  haystack, id ``"{session_id}_{turn_index + 1}"`` (the index counts every turn of the session; a
  session listed twice in one haystack is kept once);
  turn-level gold = user turns with ``has_answer`` in an answer session, session-level gold =
  ``answer_session_ids``. ``_abs`` questions and questions without user-side gold are skipped.
* **MemoryBank-CN** (``memory_bank_cn*.json`` + a labels JSON list of ``{user, qid, question,
  evidence, answer}``): one document per ``{query, response}`` exchange, id ``"<date>#<index>"``
  (0-based index in that date's list), timestamp = the date (UTC midnight).

Example:
    >>> parse_locomo_datetime("1:56 pm on 8 May, 2023").isoformat()
    '2023-05-08T13:56:00+00:00'
    >>> normalize_locomo_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D"])
    ['D8:6', 'D9:17', 'D11:26', 'D30:5']
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hybrid_memory.errors import InvalidInputError

__all__ = [
    "LOCOMO_CATEGORIES",
    "Dataset",
    "Doc",
    "Group",
    "Question",
    "limit_questions",
    "load_json",
    "load_locomo",
    "load_longmemeval",
    "load_memorybank",
    "normalize_locomo_evidence",
    "parse_locomo_datetime",
    "parse_longmemeval_datetime",
]

#: Names commonly used for LoCoMo's question categories (category 5 is adversarial).
LOCOMO_CATEGORIES = {
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
}


@dataclass(frozen=True)
class Doc:
    """One document of a corpus (a turn or an exchange).

    Attributes:
        id: The dataset's id for it (``dia_id``, ``"{session}_{turn}"``, ``"<date>#<index>"``).
        text: The text stored as a memory.
        timestamp: When it was said (aware UTC), if the dataset says.
        session_id: The session it belongs to (used for session-level metrics).
    """

    id: str
    text: str
    timestamp: datetime | None = None
    session_id: str | None = None


@dataclass(frozen=True)
class Question:
    """One scored question.

    Attributes:
        id: Stable question id.
        text: The question.
        gold: Gold document ids (turn level).
        category: Category used in the per-category breakdown.
        gold_sessions: Gold session ids (session-level metrics).
        answer: The reference answer, when the dataset has one.
        date: When the question is asked (aware UTC), if the dataset says.
    """

    id: str
    text: str
    gold: frozenset[str]
    category: str
    gold_sessions: frozenset[str] = frozenset()
    answer: str | None = None
    date: datetime | None = None


@dataclass(frozen=True)
class Group:
    """A corpus stored as one user's memories and the questions asked against it.

    Attributes:
        id: Group id (becomes the ``user_id`` in the store).
        docs: The corpus, in dataset order.
        questions: The scored questions.
        apart: Questions scored but reported apart (LoCoMo category 5).
        now: The time the questions are asked (after the last document).
    """

    id: str
    docs: tuple[Doc, ...]
    questions: tuple[Question, ...]
    apart: tuple[Question, ...] = ()
    now: datetime | None = None

    def session_of(self) -> dict[str, str]:
        """Map each document id to its session id (documents without one map to themselves)."""
        return {d.id: d.session_id or d.id for d in self.docs}


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset.

    Attributes:
        name: ``"locomo"``, ``"longmemeval"`` or ``"memorybank"``.
        path: The file it was read from.
        groups: The corpora with their questions.
        skipped: Counts of what the protocol left out, by reason.
        notes: Remarks about the loading (normalised ids, ...).
    """

    name: str
    path: str
    groups: tuple[Group, ...]
    skipped: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def n_questions(self) -> int:
        """Number of scored questions."""
        return sum(len(g.questions) for g in self.groups)

    @property
    def n_docs(self) -> int:
        """Number of documents over all groups."""
        return sum(len(g.docs) for g in self.groups)


def load_json(path: str | Path) -> Any:
    """Read a JSON file, gzip-compressed or not (detected from the content, not the name).

    Raises:
        InvalidInputError: the file is missing or is not JSON.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {p}: {exc.strerror or exc}") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except OSError as exc:
            raise InvalidInputError(f"{p} looks gzip-compressed but cannot be decompressed: {exc}") from exc
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"{p} is not valid JSON: {exc}") from exc


# -- LoCoMo --------------------------------------------------------------------------------

_LOCOMO_DT = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*$",
    re.IGNORECASE,
)
_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for m in names
}
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)


def parse_locomo_datetime(value: str) -> datetime:
    """Parse LoCoMo's ``"1:56 pm on 8 May, 2023"`` into an aware UTC datetime.

    Raises:
        InvalidInputError: the string is not in that format.
    """
    m = _LOCOMO_DT.match(value)
    if m is None:
        raise InvalidInputError(f"not a LoCoMo date-time: {value!r}")
    hour, minute, ampm, day, month_name, year = m.groups()
    month = _MONTHS.get(month_name.lower())
    if month is None:
        raise InvalidInputError(f"unknown month in LoCoMo date-time: {value!r}")
    h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
    try:
        return datetime(int(year), month, int(day), h, int(minute), tzinfo=timezone.utc)
    except ValueError as exc:
        raise InvalidInputError(f"invalid LoCoMo date-time {value!r}: {exc}") from exc


def normalize_locomo_evidence(evidence: Iterable[object]) -> list[str]:
    """Normalise LoCoMo evidence ids to ``"D<session>:<turn>"`` (order kept, duplicates removed).

    Handles several ids in one string (``"D8:6; D9:17"``), a stray colon (``"D:11:26"``) and
    zero-padded numbers (``"D30:05"``). Strings holding no id (``"D"``) yield nothing.
    """
    out: list[str] = []
    for item in evidence:
        if not isinstance(item, str):
            continue
        for sess, turn in _EVIDENCE.findall(item):
            norm = f"D{int(sess)}:{int(turn)}"
            if norm not in out:
                out.append(norm)
    return out


def _locomo_turn_text(turn: Mapping[str, Any]) -> str:
    text = f"{turn.get('speaker', '')}: {turn.get('text', '')}".strip()
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text += f" [image: {caption.strip()}]"
    return text


def load_locomo(path: str | Path) -> Dataset:
    """Load a LoCoMo file (``locomo10.json`` or any subset in the same schema).

    Raises:
        InvalidInputError: the file is not in LoCoMo's format.
    """
    data = load_json(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(s, dict) and "conversation" in s for s in data):
        raise InvalidInputError(f"{path}: expected a list of LoCoMo samples with a 'conversation'")
    skipped: Counter[str] = Counter()
    groups: list[Group] = []
    for n_sample, sample in enumerate(data):
        conv = sample["conversation"]
        sample_id = str(sample.get("sample_id") or f"sample-{n_sample}")
        sessions = sorted(
            (int(m.group(1)), k) for k in conv if (m := _SESSION_KEY.match(k)) and isinstance(conv[k], list)
        )
        docs: list[Doc] = []
        for num, key in sessions:
            raw_date = conv.get(f"{key}_date_time")
            ts = parse_locomo_datetime(raw_date) if isinstance(raw_date, str) else None
            for turn in conv[key]:
                if not isinstance(turn, dict) or "dia_id" not in turn:
                    skipped["turn_without_dia_id"] += 1
                    continue
                text = _locomo_turn_text(turn)
                docs.append(Doc(id=str(turn["dia_id"]), text=text, timestamp=ts, session_id=f"session_{num}"))
        ids = {d.id for d in docs}
        session_of = {d.id: d.session_id or d.id for d in docs}
        questions: list[Question] = []
        apart: list[Question] = []
        for n_q, qa in enumerate(sample.get("qa", [])):
            category = str(qa.get("category", ""))
            raw_ev = qa.get("evidence") or []
            ev = normalize_locomo_evidence(raw_ev)
            if any(not isinstance(e, str) or not re.fullmatch(r"D\d+:\d+", e) for e in raw_ev):
                skipped["malformed_evidence_ids_normalised"] += 1
            gold = [e for e in ev if e in ids]
            if len(gold) < len(ev):
                skipped["evidence_ids_not_in_conversation"] += len(ev) - len(gold)
            if not gold:
                skipped["no_usable_evidence"] += 1
                continue
            answer = qa.get("answer", qa.get("adversarial_answer"))
            q = Question(
                id=f"{sample_id}#{n_q}",
                text=str(qa.get("question", "")),
                gold=frozenset(gold),
                category=category,
                gold_sessions=frozenset(session_of[g] for g in gold),
                answer=None if answer is None else str(answer),
            )
            if category in ("1", "2", "3", "4"):
                questions.append(q)
            elif category == "5":
                apart.append(q)
            else:
                skipped[f"unknown_category_{category}"] += 1
        stamps = [d.timestamp for d in docs if d.timestamp is not None]
        now = max(stamps) + timedelta(days=1) if stamps else None
        groups.append(Group(id=sample_id, docs=tuple(docs), questions=tuple(questions), apart=tuple(apart), now=now))
    return Dataset(
        name="locomo",
        path=str(path),
        groups=tuple(groups),
        skipped=dict(skipped),
        notes=("category 5 (adversarial) is scored apart, not in the top-level numbers",),
    )


# -- LongMemEval ---------------------------------------------------------------------------

_LME_DT = re.compile(r"(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:\s*\([^)]*\))?(?:\s+(\d{1,2}):(\d{2}))?")


def parse_longmemeval_datetime(value: str) -> datetime | None:
    """Parse LongMemEval's ``"2023/05/20 (Sat) 02:21"`` as UTC; ``None`` when unparseable.

    Example:
        >>> parse_longmemeval_datetime("2023/05/20 (Sat) 02:21").isoformat()
        '2023-05-20T02:21:00+00:00'
    """
    m = _LME_DT.search(value)
    if m is None:
        return None
    y, mo, d, h, mi = m.groups()
    try:
        return datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), tzinfo=timezone.utc)
    except ValueError:
        return None


def load_longmemeval(path: str | Path) -> Dataset:
    """Load a LongMemEval file (``longmemeval_s``/``_m``/``_oracle`` schema, ``.json`` or ``.json.gz``).

    Raises:
        InvalidInputError: the file is not in LongMemEval's format.
    """
    data = load_json(path)
    if not isinstance(data, list) or not all(isinstance(e, dict) and "haystack_sessions" in e for e in data):
        raise InvalidInputError(f"{path}: expected a list of LongMemEval entries with 'haystack_sessions'")
    skipped: Counter[str] = Counter()
    groups: list[Group] = []
    for entry in data:
        qid = str(entry["question_id"])
        if "_abs" in qid:  # the official scripts test the substring
            skipped["abstention"] += 1
            continue
        answer_sessions = {str(s) for s in entry.get("answer_session_ids", [])}
        session_ids = [str(s) for s in entry.get("haystack_session_ids", [])]
        dates = entry.get("haystack_dates") or [None] * len(session_ids)
        docs: list[Doc] = []
        gold: list[str] = []
        seen_sessions: set[str] = set()
        for sid, session, raw_date in zip(session_ids, entry["haystack_sessions"], dates, strict=False):
            if sid in seen_sessions:  # a haystack can list the same session twice; ids must be unique
                skipped["repeated_haystack_sessions"] += 1
                continue
            seen_sessions.add(sid)
            ts = parse_longmemeval_datetime(raw_date) if isinstance(raw_date, str) else None
            for i, turn in enumerate(session):
                if turn.get("role") != "user":
                    continue
                content = turn.get("content")
                did = f"{sid}_{i + 1}"
                if not isinstance(content, str) or not content.strip():
                    skipped["empty_user_turns"] += 1
                    continue
                docs.append(Doc(id=did, text=content, timestamp=ts, session_id=sid))
                if sid in answer_sessions and turn.get("has_answer") is True:
                    gold.append(did)
        if not gold:
            skipped["no_user_side_gold"] += 1
            continue
        present = {d.session_id for d in docs}
        raw_qdate = entry.get("question_date")
        qdate = parse_longmemeval_datetime(raw_qdate) if isinstance(raw_qdate, str) else None
        q = Question(
            id=qid,
            text=str(entry.get("question", "")),
            gold=frozenset(gold),
            category=str(entry.get("question_type", "unknown")),
            gold_sessions=frozenset(s for s in answer_sessions if s in present),
            answer=str(entry.get("answer", "")),
            date=qdate,
        )
        stamps = [d.timestamp for d in docs if d.timestamp is not None]
        now = qdate or (max(stamps) + timedelta(days=1) if stamps else None)
        groups.append(Group(id=qid, docs=tuple(docs), questions=(q,), now=now))
    return Dataset(
        name="longmemeval",
        path=str(path),
        groups=tuple(groups),
        skipped=dict(skipped),
        notes=("corpus = user turns only (assistant turns are not stored), as in the official protocol",),
    )


# -- MemoryBank-CN -------------------------------------------------------------------------

_CN_DATE = re.compile(r"\d{1,2}\s*月\s*\d{1,2}\s*[日号]|\d{4}-\d{1,2}-\d{1,2}")


def _memorybank_text(exchange: Mapping[str, Any]) -> str:
    parts = [str(exchange.get(k) or "").strip() for k in ("query", "response")]
    return "\n".join(p for p in parts if p)


def load_memorybank(path: str | Path, labels: str | Path) -> Dataset:
    """Load MemoryBank-SiliconFriend's ``memory_bank_cn*.json`` with a labels file.

    Args:
        path: The memory bank (``{user: {"history": {date: [{query, response}, ...]}, ...}}``).
        labels: JSON list of ``{user, qid, question, evidence: ["<date>#<index>", ...], answer}``.

    Raises:
        InvalidInputError: a file is not in the expected format.
    """
    bank = load_json(path)
    label_list = load_json(labels)
    if not isinstance(bank, dict) or not all(isinstance(u, dict) for u in bank.values()):
        raise InvalidInputError(f"{path}: expected a MemoryBank object {{user: {{'history': ...}}}}")
    if not isinstance(label_list, list) or not all(isinstance(x, dict) for x in label_list):
        raise InvalidInputError(f"{labels}: expected a JSON list of {{user, qid, question, evidence, answer}}")
    skipped: Counter[str] = Counter()
    by_user: dict[str, list[Mapping[str, Any]]] = {}
    for lab in label_list:
        by_user.setdefault(str(lab.get("user", "")), []).append(lab)
    groups: list[Group] = []
    for user, content in bank.items():
        history = content.get("history") or {}
        docs: list[Doc] = []
        for date in sorted(history):
            try:
                day = datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=timezone.utc)
            except ValueError:
                day = None
            for i, exchange in enumerate(history[date] or []):
                text = _memorybank_text(exchange) if isinstance(exchange, dict) else ""
                if not text:
                    skipped["empty_exchanges"] += 1
                    continue
                docs.append(Doc(id=f"{date}#{i}", text=text, timestamp=day, session_id=date))
        ids = {d.id for d in docs}
        session_of = {d.id: d.session_id or d.id for d in docs}
        questions: list[Question] = []
        for n, lab in enumerate(by_user.pop(str(user), [])):
            ev = [str(e) for e in lab.get("evidence") or []]
            gold = [e for e in ev if e in ids]
            if len(gold) < len(ev):
                skipped["evidence_ids_not_in_bank"] += len(ev) - len(gold)
            if not gold:
                skipped["no_usable_evidence"] += 1
                continue
            text = str(lab.get("question", ""))
            questions.append(
                Question(
                    id=str(lab.get("qid") or f"{user}#{n}"),
                    text=text,
                    gold=frozenset(gold),
                    category="dated" if _CN_DATE.search(text) else "undated",
                    gold_sessions=frozenset(session_of[g] for g in gold),
                    answer=None if lab.get("answer") is None else str(lab.get("answer")),
                )
            )
        stamps = [d.timestamp for d in docs if d.timestamp is not None]
        now = max(stamps) + timedelta(days=1) if stamps else None
        if docs:
            groups.append(Group(id=str(user), docs=tuple(docs), questions=tuple(questions), now=now))
    for rest in by_user.values():
        skipped["labels_for_unknown_users"] += len(rest)
    return Dataset(
        name="memorybank",
        path=str(path),
        groups=tuple(groups),
        skipped=dict(skipped),
        notes=('category "dated" = the question names a date (e.g. 5月2日), "undated" otherwise',),
    )


def limit_questions(dataset: Dataset, limit: int | None) -> Dataset:
    """Keep the first ``limit`` scored questions (in file order) and the groups they need.

    Questions kept apart (LoCoMo category 5) are kept for the groups that remain.
    """
    if limit is None:
        return dataset
    if limit < 1:
        raise InvalidInputError(f"limit must be a positive int, got {limit}")
    left = limit
    groups: list[Group] = []
    for g in dataset.groups:
        if left <= 0:
            break
        if not g.questions:
            continue
        qs: Sequence[Question] = g.questions[:left]
        left -= len(qs)
        groups.append(replace(g, questions=tuple(qs)))
    return replace(dataset, groups=tuple(groups))
