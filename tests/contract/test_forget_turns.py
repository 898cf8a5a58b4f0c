"""Forgetting or editing a turn memory takes its turn out of the session's log, in every process.

A turn ``add_turn`` stored is in two places: a long-term memory and the session's log in the
store, which drives the short-term window, fact extraction and summaries of every process. An
operator who forgets the memory or edits a detail out of it (``edit``, or ``put`` of a new
version), from another process (a second store object on the same data, its own connection or
Weaviate client), must not see the old text come back: not in the window, not in a prompt to
the extraction model or in a summary, not as a new memory. The model calls are real code paths
(a fake chat model answers the extractor; the summarizer is the extractive one); a hook in the
model fixes the one interleaving a test could otherwise not cause on purpose: the forget or edit
while the model runs. An extracted fact forgotten after a process died between writing its
batch's facts and marking the batch (the store's ``mark_extracted`` raising stands for the
death) is not extracted again by the next process, nor is a session summary forgotten after its
process died before moving the summary watermark. LocalStore on a file and a real Weaviate
server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from pydantic import Field

from hybrid_memory import HybridMemory
from hybrid_memory.config import HybridMemoryConfig
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter, MemoryStore, SearchRequest
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.extraction import FactExtractor
from hybrid_memory.write.summary import SessionSummarizer, SummaryResult
from tests.contract.test_forget_races import _before

T0 = datetime(2025, 6, 2, 9, tzinfo=timezone.utc)
WAIT = 30.0
ADDRESS = "12 Elm Street"
SECRET = f"Remember: I keep bees on my roof at {ADDRESS}"
EDITED = "Remember: I keep bees on my roof"
_EVERY = MemoryFilter(statuses=("active", "superseded", "archived"))


class Model(FakeListChatModel):
    """A fake chat model that records every prompt and can run a hook while it answers."""

    prompts: list[str] = Field(default_factory=list)
    during: Any = None

    def _call(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.prompts.append(str(messages))
        if self.during is not None:
            hook, self.during = self.during, None
            hook()
        return super()._call(messages, stop, run_manager, **kwargs)


class HookedSummarizer(SessionSummarizer):
    """The extractive summarizer (no model), running ``during`` once before it summarises."""

    def __init__(self) -> None:
        super().__init__()
        self.during: Callable[[], object] | None = None
        self.seen: list[list[str]] = []

    def summarize(self, previous: str | None, turns: Any, *, roles: Any = None) -> SummaryResult:
        if self.during is not None:
            hook, self.during = self.during, None
            hook()
        self.seen.append(list(turns))
        return super().summarize(previous, turns, roles=roles)


def killed(*args: Any, **kwargs: Any) -> bool:
    """A watermark move that never happens: the process died between a write and its mark."""
    raise RuntimeError("killed before the mark")


def facts(*items: tuple[str, list[int]]) -> str:
    return json.dumps(
        {"memories": [{"content": c, "category": "fact", "importance": 7, "source_turns": s} for c, s in items]}
    )


def app(store: MemoryStore, llm: Model, summarizer: SessionSummarizer | None = None) -> HybridMemory:
    return HybridMemory(
        store,
        embedder=HashingEmbedder(),
        config=HybridMemoryConfig(buffer={"summary_every": 3}),  # type: ignore[arg-type]
        extractor=FactExtractor(llm, method="json_mode", batch_turns=3),
        summarizer=summarizer if summarizer is not None else SessionSummarizer(),
    )


def say(mem: HybridMemory, *texts: str, role: str = "user") -> None:
    for text in texts:
        mem.add_turn("u", "s", role, text, timestamp=T0 + timedelta(minutes=len(mem.short_term("u", "s"))))


def remove_the_secret(operator: HybridMemory, how: str) -> None:
    """What an operator does: find the turn memory that holds the address; forget it, or edit it out."""
    [secret] = [r for r in operator.list_memories("u") if ADDRESS in r.content]
    assert secret.metadata.get("turn_id") and secret.category != "summary"
    if how == "forget":
        assert operator.forget(secret.id, user_id="u") is True
    elif how == "edit":
        assert operator.edit(secret.id, user_id="u", content=EDITED).content == EDITED
    else:  # the keyed replace of the LangGraph store
        assert operator.put(secret.evolve(content=EDITED)).action == "updated"


def nothing_holds_the_secret(how: str, *mems: HybridMemory) -> None:
    for mem in mems:
        stored = mem.store.list("u", filter=_EVERY)
        texts = [r.content for r in stored]
        assert [t for t in texts if ADDRESS in t] == []
        assert [r.context for r in stored if ADDRESS in r.context] == []  # the next turn's search context
        assert keyword_hits(mem, ADDRESS) == []
        assert [t.content for t in mem.short_term("u", "s") if ADDRESS in t.content] == []
        assert (EDITED in texts) is (how != "forget")  # an edited memory stays in long-term memory


def keyword_hits(mem: HybridMemory, query: str) -> list[str]:
    """What the store's keyword search (BM25 alone) finds for ``query``, memories of every status."""
    request = SearchRequest(user_id="u", query=query, vector=None, alpha=0.0, limit=50, filter=_EVERY)
    return [h.record.content for h in mem.store.search(request)]


@contextmanager
def plain_apps(stores: tuple[MemoryStore, MemoryStore]) -> Iterator[tuple[HybridMemory, HybridMemory]]:
    """The app and the operator (another process) without models, each on its own store object."""
    mem, operator = (HybridMemory(store, embedder=HashingEmbedder()) for store in stores)
    try:
        yield mem, operator
    finally:
        mem.close()
        operator.close()


HOW = pytest.mark.parametrize("how", ["forget", "edit", "put"])


@HOW
def test_a_forgotten_or_edited_turn_memory_leaves_no_window_prompt_fact_or_summary_behind(
    stores: tuple[MemoryStore, MemoryStore], how: str
) -> None:
    app_store, operator_store = stores
    llm = Model(responses=[facts(("The user plays the oboe.", [0]))])
    mem, operator = app(app_store, llm), HybridMemory(operator_store, embedder=HashingEmbedder())
    try:
        say(mem, SECRET, "I play the oboe")  # two of three: no extraction or summary is due yet
        assert any(ADDRESS in t.content for t in mem.short_term("u", "s"))
        remove_the_secret(operator, how)
        nothing_holds_the_secret(how, operator, mem)  # the app's window, cached before, follows the log
        say(mem, "Nice!", role="assistant")
        say(mem, "I practise every evening")  # the third pending turn: extraction and summary are due
        assert mem.flush(timeout=WAIT)
        assert len(llm.prompts) == 1 and "oboe" in llm.prompts[0] and ADDRESS not in llm.prompts[0]
        assert [r.content for r in mem.list_memories("u") if r.metadata.get("extracted")] == [
            "The user plays the oboe."
        ]
        [summary] = [r for r in mem.list_memories("u") if r.category == "summary"]
        assert "oboe" in summary.content
        nothing_holds_the_secret(how, operator, mem)
        assert list(mem._sessions.worker.errors) == []
    finally:
        mem.close()
        operator.close()


@HOW
@pytest.mark.parametrize("written", ["now", "before context_of"])
def test_the_next_turns_memory_loses_the_removed_text_from_its_search_context(
    stores: tuple[MemoryStore, MemoryStore], how: str, written: str
) -> None:
    app_store = stores[0]
    with plain_apps(stores) as (mem, operator):
        say(mem, SECRET, "Remember: I play the oboe every evening")
        [oboe] = [r for r in operator.list_memories("u") if "oboe" in r.content]
        assert oboe.context == SECRET  # add_turn indexed it with the turn before it
        if written == "before context_of":  # a memory stored before memories named their context's turn
            assert oboe.metadata.pop("context_of") is not None
            app_store.update([oboe])
        else:
            assert oboe.metadata["context_of"] == mem.short_term("u", "s")[0].id
        assert oboe.content in keyword_hits(operator, "Elm Street")  # by the secret's words in its context alone
        remove_the_secret(operator, how)
        for m in (operator, mem):
            assert m.get(oboe.id, user_id="u").context == ("" if how == "forget" else EDITED)
            assert keyword_hits(m, "Elm Street") == []
        nothing_holds_the_secret(how, operator, mem)
        say(mem, "Remember: I also keep a cat")  # the window follows the log: the oboe turn is its context now
        [cat] = [r for r in mem.list_memories("u") if "cat" in r.content]
        assert cat.context == "Remember: I play the oboe every evening"


def the_next_turn_after_a_racing_removal(
    app_store: MemoryStore, mem: HybridMemory, operator: HybridMemory, how: str, monkeypatch: pytest.MonkeyPatch
) -> MemoryRecord:
    """The app says the secret, then its next turn; the operator removes the secret in between.

    The app has read the log (the secret is its context) when the operator removes the secret and looks for
    memories holding its text: the app's memory of the next turn lands only after that, with the secret's words.
    """
    say(mem, SECRET)
    _before(app_store, "upsert", lambda: remove_the_secret(operator, how), monkeypatch)
    say(mem, "Remember: I play the oboe every evening")
    [oboe] = [r for r in operator.list_memories("u") if "oboe" in r.content]
    assert oboe.context == SECRET  # the forget looked before this write landed
    return oboe


@HOW
def test_a_removal_in_another_process_while_the_next_turn_is_written_leaves_no_context_behind(
    stores: tuple[MemoryStore, MemoryStore], how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with plain_apps(stores) as (mem, operator):
        oboe = the_next_turn_after_a_racing_removal(stores[0], mem, operator, how, monkeypatch)
        # The app's next read of the session sees a turn deleted, and the context's turn among them.
        assert [t.content for t in mem.short_term("u", "s")] == ["Remember: I play the oboe every evening"]
        assert operator.get(oboe.id, user_id="u").context == ""
        nothing_holds_the_secret(how, operator, mem)
        say(mem, "Remember: and a second one")
        operator.clear_session("u", "s")  # another process deletes the whole log: that is no forget
        assert mem.short_term("u", "s") == []
        [second] = [r for r in operator.list_memories("u") if r.content == "Remember: and a second one"]
        assert second.context == "Remember: I play the oboe every evening"


@pytest.mark.parametrize("leaves", ["end_session", "close"])
def test_a_process_that_ends_the_session_or_closes_after_such_a_race_leaves_no_context_behind(
    stores: tuple[MemoryStore, MemoryStore], leaves: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with plain_apps(stores) as (mem, operator):
        oboe = the_next_turn_after_a_racing_removal(stores[0], mem, operator, "forget", monkeypatch)
        # No further read of the session comes: the app lets go of it right away.
        mem.end_session("u", "s") if leaves == "end_session" else mem.close()
        assert operator.get(oboe.id, user_id="u").context == ""
        nothing_holds_the_secret("forget", operator)


def test_a_turn_appended_and_one_forgotten_around_this_process_s_own_append_are_both_seen(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store = stores[0]
    with plain_apps(stores) as (mem, operator):
        say(mem, SECRET)

        def meanwhile() -> None:  # after the app read the log for its next turn, before that turn is appended
            operator.add_turn("u", "s", "user", "Remember: my cat is called Miso", timestamp=T0)
            [said] = [t for t in operator.short_term("u", "s") if ADDRESS in t.content]
            assert operator.forget_turn(said.id, user_id="u", session_id="s") is True

        _before(app_store, "append_turns", meanwhile, monkeypatch)
        say(mem, "Remember: I play the oboe every evening")
        # one turn more, one less: the app's window must not keep the forgotten turn or miss the new one
        expected = ["Remember: my cat is called Miso", "Remember: I play the oboe every evening"]
        assert [t.content for t in mem.short_term("u", "s")] == expected
        assert [t.content for t in operator.short_term("u", "s")] == expected
        nothing_holds_the_secret("forget", operator, mem)


def test_forget_turn_takes_an_echoing_reply_and_the_users_turn_out_of_every_process(
    stores: tuple[MemoryStore, MemoryStore], tmp_path: Path
) -> None:
    app_store, operator_store = stores
    app = HybridMemory(app_store, embedder=HashingEmbedder())
    operator = HybridMemory(operator_store, embedder=HashingEmbedder(), trace=tmp_path / "steps.sqlite")
    try:
        say(operator, SECRET)
        echo = operator.add_turn("u", "s", "assistant", f"Noted, your bees live at {ADDRESS}.", timestamp=T0)
        say(operator, "Remember: I play the oboe every evening")
        [oboe] = [r for r in app.list_memories("u") if "oboe" in r.content]
        assert ADDRESS in oboe.context and oboe.metadata["context_of"] == echo.id  # the reply's end
        assert len([t for t in app.short_term("u", "s") if ADDRESS in t.content]) == 2
        # The reply is no memory (an assistant turn): forget_turn is the only way to take it back.
        assert operator.forget_turn(echo.id, user_id="u", session_id="s") is True
        assert [t.content for t in app.short_term("u", "s") if t.role == "assistant"] == []
        assert app.get(oboe.id, user_id="u").context == ""
        [said] = [t for t in app.short_term("u", "s") if ADDRESS in t.content]
        assert operator.forget_turn(said.id, user_id="u", session_id="s") is True  # and its memory
        nothing_holds_the_secret("forget", operator, app)
        assert keyword_hits(app, ADDRESS) == [] and app.count_memories("u") == 1
        assert ADDRESS.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
        assert [o for o in operator.write_log("u") if ADDRESS in o.model_dump_json()] == []
        assert operator.forget_turn(said.id, user_id="u", session_id="s") is False  # nothing left of it
    finally:
        app.close()
        operator.close()


def test_forget_turn_of_a_reply_after_its_session_ended_cuts_it_from_the_next_memorys_context(
    stores: tuple[MemoryStore, MemoryStore], tmp_path: Path
) -> None:
    app_store, operator_store = stores
    steps = tmp_path / "steps.sqlite"  # one trace file for both processes, as next to a shared store file
    app = HybridMemory(app_store, embedder=HashingEmbedder(), trace=steps)
    operator = HybridMemory(operator_store, embedder=HashingEmbedder(), trace=steps)
    try:
        echo = app.add_turn("u", "s", "assistant", f"Noted, your bees live at {ADDRESS}.", timestamp=T0)
        say(app, "Remember: I play the oboe every evening")
        app.end_session("u", "s")  # the log is deleted: the reply's words are left only in the oboe's context
        [oboe] = [r for r in operator.list_memories("u") if "oboe" in r.content]
        assert ADDRESS in oboe.context and oboe.content in keyword_hits(operator, ADDRESS)
        assert operator.forget_turn(echo.id, user_id="u", session_id="s") is True  # something of it was there
        assert app.get(oboe.id, user_id="u").context == ""
        nothing_holds_the_secret("forget", operator, app)
        assert operator.forget_turn(echo.id, user_id="u", session_id="s") is False  # nothing left of it
        # the reply's trace step is blanked (by the context's text and the turn id); no file holds the words,
        # while both processes run (a WAL) and once they closed (each saves its index of the user)
        assert ADDRESS.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
        app.close()
        operator.close()
        assert ADDRESS.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    finally:
        app.close()
        operator.close()


def removal(
    when: str, app_store: MemoryStore, remove: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> Callable[[], None]:
    """What runs while the model answers: the removal itself, or a hook that runs it right before
    the job's write reaches the store (after the job checked the log)."""
    if when == "while the model runs":
        return remove
    return lambda: _before(app_store, "upsert", remove, monkeypatch)


WHEN = pytest.mark.parametrize("when", ["while the model runs", "between the job's check and its write"])


@HOW
@WHEN
def test_a_turn_forgotten_or_edited_while_the_extraction_model_runs_grounds_no_fact(
    stores: tuple[MemoryStore, MemoryStore], how: str, when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, operator_store = stores
    reply = facts((f"The user keeps bees on the roof at {ADDRESS}.", [0]), ("The user plays the oboe.", [1]))
    llm = Model(responses=[reply])
    mem, operator = app(app_store, llm), HybridMemory(operator_store, embedder=HashingEmbedder())
    llm.during = removal(when, app_store, lambda: remove_the_secret(operator, how), monkeypatch)
    try:
        say(mem, SECRET, "I play the oboe", "I practise every evening")
        assert mem.flush(timeout=WAIT)
        assert len(llm.prompts) == 1 and ADDRESS in llm.prompts[0]  # read before the forget
        assert llm.during is None  # the forget ran while the model answered
        # The fact grounded in the forgotten turn is not written; the other one is.
        assert [r.content for r in mem.list_memories("u") if r.metadata.get("extracted")] == [
            "The user plays the oboe."
        ]
        assert mem.store.extracted_upto("u", "s") == mem.short_term("u", "s")[-1].seq
        nothing_holds_the_secret(how, operator, mem)
        assert list(mem._sessions.worker.errors) == []
    finally:
        mem.close()
        operator.close()


@HOW
@WHEN
def test_a_turn_forgotten_or_edited_while_a_summary_is_made_is_summarised_again_without_it(
    stores: tuple[MemoryStore, MemoryStore], how: str, when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, operator_store = stores
    summarizer = HookedSummarizer()
    llm = Model(responses=[facts(), facts()])
    mem, operator = app(app_store, llm, summarizer), HybridMemory(operator_store, embedder=HashingEmbedder())
    summarizer.during = removal(when, app_store, lambda: remove_the_secret(operator, how), monkeypatch)
    try:
        say(mem, SECRET, "I play the oboe", "I practise every evening")  # a summary of these three is due
        assert mem.flush(timeout=WAIT)
        assert summarizer.during is None and any(ADDRESS in t for t in summarizer.seen[0])
        # That summary was not written (nor its turns marked): two turns wait for the next one.
        assert [r for r in mem.list_memories("u") if r.category == "summary"] == []
        assert mem.store.summarized_upto("u", "s") == 0
        say(mem, "My teacher is Ana")
        assert mem.flush(timeout=WAIT)
        [summary] = [r.content for r in mem.list_memories("u") if r.category == "summary"]
        assert summary.splitlines() == ["I play the oboe", "I practise every evening", "My teacher is Ana"]
        nothing_holds_the_secret(how, operator, mem)
    finally:
        mem.close()
        operator.close()


@pytest.mark.parametrize("when", ["before the next extraction", "while the next extraction's model runs"])
def test_a_fact_forgotten_after_a_process_died_before_marking_its_batch_is_not_extracted_again(
    stores: tuple[MemoryStore, MemoryStore], when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, operator_store = stores
    first_llm = Model(responses=[facts(("The user keeps bees on the roof.", [0]))])
    first = HybridMemory(
        app_store, embedder=HashingEmbedder(), extractor=FactExtractor(first_llm, method="json_mode", batch_turns=3)
    )

    monkeypatch.setattr(app_store, "mark_extracted", killed)  # dies between the write and the mark
    try:
        say(first, "I keep bees on the roof", "How lovely!", "I love honey")
        assert first.flush(timeout=WAIT)
        assert [r.content for r in first.list_memories("u") if r.metadata.get("extracted")] == [
            "The user keeps bees on the roof."
        ]
        assert operator_store.extracted_upto("u", "s") == 0  # the batch is still pending in the log
    finally:
        first.close()
    # Another process forgets the fact (the turn memory it came from stays) and continues the
    # session. Before: the batch is the three turns after the bees. While the model runs: the
    # batch read before the forget, whose model names the bees again, then the oboe alone.
    if when == "before the next extraction":
        replies = [facts(("The user keeps bees on the roof.", [0]), ("The user plays the oboe.", [2]))]
    else:
        replies = [facts(("The user keeps bees on the roof.", [0])), facts(("The user plays the oboe.", [0]))]
    llm = Model(responses=replies)
    second = HybridMemory(
        operator_store, embedder=HashingEmbedder(), extractor=FactExtractor(llm, method="json_mode", batch_turns=3)
    )

    def forget_the_fact() -> None:
        [fact] = [r for r in second.list_memories("u") if r.metadata.get("extracted")]
        assert second.forget(fact.id, user_id="u") is True

    if when == "before the next extraction":
        forget_the_fact()
    else:
        llm.during = forget_the_fact
    try:
        say(second, "I play the oboe")
        assert second.flush(timeout=WAIT)
        extracted = [r.content for r in second.list_memories("u") if r.metadata.get("extracted")]
        assert "The user plays the oboe." in extracted
        assert [t for t in extracted if "bees" in t] == []
        # Before: the forget moved the watermark past the bees, which no prompt shows again. While the
        # model ran: the batch was read before it; the write drops what the watermark passed.
        assert any("bees" in p for p in llm.prompts) is (when != "before the next extraction")
        assert llm.during is None and list(second._sessions.worker.errors) == []
    finally:
        second.close()


def test_a_summary_forgotten_after_a_process_died_before_marking_it_is_not_made_again(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, operator_store = stores
    config = HybridMemoryConfig(buffer={"summary_every": 3})  # type: ignore[arg-type]
    first = HybridMemory(app_store, embedder=HashingEmbedder(), config=config, summarizer=SessionSummarizer())

    monkeypatch.setattr(app_store, "mark_summarized", killed)  # dies between the write and the mark
    try:
        say(first, "I keep bees on the roof", "I love honey", "I sell it at the market")
        assert first.flush(timeout=WAIT)
        assert [r.content for r in first.list_memories("u") if r.category == "summary"] == [
            "I keep bees on the roof\nI love honey\nI sell it at the market"
        ]
        assert operator_store.summarized_upto("u", "s") == 0  # its turns are still due
    finally:
        first.close()
    # Another process forgets the summary and continues the session: three more turns make the next one.
    second = HybridMemory(operator_store, embedder=HashingEmbedder(), config=config, summarizer=SessionSummarizer())
    try:
        [summary] = [r for r in second.list_memories("u") if r.category == "summary"]
        assert second.forget(summary.id, user_id="u") is True
        say(second, "I play the oboe", "I practise every evening", "My teacher is Ana")
        assert second.flush(timeout=WAIT)
        made = [r.content for r in second.store.list("u", filter=_EVERY) if r.category == "summary"]
        assert made == ["I play the oboe\nI practise every evening\nMy teacher is Ana"]
        assert list(second._sessions.worker.errors) == []
    finally:
        second.close()
