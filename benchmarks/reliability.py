"""``python -m benchmarks.reliability``: the long variants of ``tests/reliability`` and the report.

Runs the reliability suite with long settings (60 s load per store and caller kind, repeated
kill -9 runs, more fuzzing examples with random seeds, forget_user of 100,000 memories on both
stores), collects the numbers every test reports, and writes
``benchmarks/results/reliability.md`` (+ ``reliability.json``): one row per fault, how many runs,
what survived, what was lost (must be 0) and the command that reproduces it.

    python -m benchmarks.reliability                  # the long variants (about 30 min on 2 cores)
    python -m benchmarks.reliability --quick          # the default-suite settings (about 4 min)
    python -m benchmarks.reliability --seconds 60 --runs 5 --fuzz-examples 500 --forget-n 100000

Also runs the cluster fault tests (``tests/cluster/test_cluster_faults.py``: three local nodes).
Needs the ``weaviate-server`` binary (``WEAVIATE_BINARY``, ``PATH`` or ``$GOPATH/bin``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: scenario prefix -> (fault, what survived, test node ids to rerun it)
SCENARIOS: list[tuple[str, str, str, str]] = [
    (
        "weaviate kill -9 mid-ingest (store batches)",
        "weaviate-server killed with SIGKILL during a batched ingest of 5,000 memories (10 users), restarted",
        "acknowledged writes in Weaviate; the rest in the dead-letter queue; replay -> all 5,000 exactly once "
        "(ids, content, metadata, vectors)",
        "tests/reliability/test_weaviate_faults.py::test_kill9_mid_batched_ingest_then_replay_brings_all_5000_exactly_once",
    ),
    (
        "weaviate kill -9 mid-ingest (facade remember_many)",
        "same, through HybridMemory.remember_many (writer dedup read included)",
        "every call returned or raised StoreUnavailableError; replay + resubmitting the raised calls -> all stored once",
        "tests/reliability/test_weaviate_faults.py::test_kill9_during_facade_ingest_nothing_lost_silently",
    ),
    (
        "weaviate kill9 during recall/build_context",
        "weaviate-server SIGKILL right after a successful call, then restarted",
        "typed StoreUnavailableError within the 3 s query timeout; degraded build_context (short-term only, "
        "FusedContext.degraded); same store object recovers",
        "tests/reliability/test_weaviate_faults.py::test_store_down_or_hanging_during_recall_and_build_context[kill9]",
    ),
    (
        "weaviate sigstop during recall/build_context",
        "weaviate-server SIGSTOP (hung: TCP accepted, no answer), then SIGCONT",
        "as above",
        "tests/reliability/test_weaviate_faults.py::test_store_down_or_hanging_during_recall_and_build_context[sigstop]",
    ),
    (
        "cluster kill -9 of one node during ingest",
        "3-node cluster, RF 3: SIGKILL of the node the store talks to (entry-node) or of the Raft leader during an "
        "ingest of 600 memories (4 users, batches of 20); 40 more written while it is down; then restarted",
        "every acknowledged write readable while the node is down; the rest typed StoreUnavailableError and "
        "dead-lettered, replay -> every memory exactly once; recall and writes go on; the node's own replica "
        "repaired by async replication",
        "tests/cluster/test_cluster_faults.py::test_kill_one_node_during_ingest",
    ),
    (
        "cluster two of three nodes down",
        "3-node cluster, RF 3: two nodes SIGKILLed, a write of 50 memories, both restarted",
        "typed StoreUnavailableError within the insert timeout (+ slack), the 50 dead-lettered; reads answer from "
        "the live replica or raise typed; replay after recovery -> all 200 exactly once",
        "tests/cluster/test_cluster_faults.py::test_two_of_three_nodes_down",
    ),
    (
        "cluster rolling restart under traffic",
        "3-node cluster, RF 3: each node in turn stopped and restarted while one thread writes and another recalls",
        "nothing acknowledged lost; raised writes typed and replayed; no recall returns another user's memory",
        "tests/cluster/test_cluster_faults.py::test_rolling_restart_under_traffic",
    ),
    (
        "LocalStore writer process kill -9",
        "a child process ingesting (remember, remember_many, add_turn, forget) killed with SIGKILL at a random point",
        "PRAGMA integrity_check ok; every acknowledged write present, every acknowledged forget still gone",
        "tests/reliability/test_local_faults.py",
    ),
    (
        "LLM faults",
        "fake OpenAI endpoint over real HTTP: timeout, 429, 500, 503, truncated (finish_reason=length), "
        "malformed, wrong schema, non-JSON body, connection cut",
        "retries with exponential backoff, heuristic fallback recorded (ScoreBatch.fallback_reason / "
        "ExtractionResult.error / background_errors); nothing raised to the agent; API key never logged",
        "tests/reliability/test_llm_faults.py",
    ),
    (
        "isolation load",
        "8 callers (threads, asyncio tasks) x 50 users, mixed add_turn/remember/recall/build_context/forget, "
        "queries naming other users' marker tokens",
        "every hit and fused block checked: no other user's memory; no unexpected exception; every "
        "acknowledged write present; no forgotten memory back",
        "tests/reliability/test_isolation_load.py",
    ),
    (
        "fuzz",
        "hypothesis: empty/whitespace, NUL, lone surrogates, 1 MB, RTL/emoji, SQL/GraphQL-like text, odd ids, "
        "NaN/inf/wrong-dim vectors, naive/far-future datetimes, negative k, alpha outside [0,1], wrong types",
        "only HybridMemoryError subclasses (documented framework exceptions for adapter constructors and "
        "LangGraph namespaces); store unchanged after every rejected call",
        "tests/reliability/test_fuzz.py",
    ),
    (
        "forget_user, LocalStore",
        "forget_user of a user with 100,000 memories (+ write log, review queue, summary, buffer, caches)",
        "done under 30 s; canary text and user id in no file of the data directory (no VACUUM needed); "
        "other users intact",
        "tests/reliability/test_privacy.py::test_forget_user_100k_local_no_trace_on_disk_or_in_process",
    ),
    (
        "forget_user, WeaviateStore (+ dead letters)",
        "forget_user of a tenant (+ 20 dead letters written while the server hung)",
        "done under 30 s; canary in no file of the server's data directory nor the dead-letter file",
        "tests/reliability/test_privacy.py::test_forget_user_weaviate_no_trace_in_server_data_or_dead_letters",
    ),
    (
        "processes: kill -9 right after add_turn",
        "an app process (LocalStore file / WeaviateStore) killed with SIGKILL right after add_turn returned",
        "a new process holds every acknowledged turn in the session window and recalls it",
        "tests/reliability/test_processes.py::test_kill_9_right_after_add_turn_loses_nothing",
    ),
    (
        "processes: kill -9 before the extraction batch ran",
        "SIGKILL after facts were told but before the background extraction batch ran",
        "the next process extracts every fact exactly once (the watermark is in the store)",
        "tests/reliability/test_processes.py::test_kill_9_before_the_extraction_batch_ran_loses_no_fact_and_extracts_once",
    ),
    (
        "processes: a session continued across processes",
        "turn 1 of a session in process A, turn 2 in process B",
        "B's window holds A's turn; a cached window follows the other process's appends and end_session",
        "tests/reliability/test_processes.py::test_a_session_continued_across_processes_keeps_one_window",
    ),
    (
        "processes: CLI forget while 3 processes talk",
        "`hybrid-memory forget --user` while 3 app processes keep talking for that user, then end their sessions",
        "nothing said before the forget in memories, turns, context, store files or trace steps; bystanders intact",
        "tests/reliability/test_processes.py::test_cli_forget_while_three_processes_talk_leaves_nothing_said_before_it",
    ),
    (
        "processes: CLI forget of a pending turn",
        "a turn memory forgotten with `hybrid-memory forget --id` after its process was SIGKILLed with the turn's "
        "extraction batch pending; the next process continues the session",
        "the forgotten text in no memory, log turn, window or extracted fact (the log drives all of them)",
        "tests/reliability/test_processes.py::"
        "test_a_turn_memory_the_cli_forgot_comes_back_in_no_window_or_fact_of_the_next_process",
    ),
    (
        "processes: 4 processes of mixed traffic",
        "4 OS processes of add_turn / remember / recall / build_context / end_session / forget / forget_turn for "
        "several users",
        "nothing acknowledged lost, nothing forgotten stored, nothing duplicated, nothing of one user in another's "
        "results, no process failed",
        "tests/reliability/test_processes.py::test_processes_of_mixed_traffic_lose_duplicate_and_leak_nothing",
    ),
]

EXTRA_TESTS = [
    (
        "PII",
        "phones (CN mobile, landline, +86, +1), e-mails, CN ID numbers (check digit), Luhn bank cards via "
        "remember / remember_many / add_turn / eviction / build_context / recall",
        "no raw PII in any stored record, embedder call, log record or file",
        "tests/reliability/test_privacy.py::test_pii_never_reaches_a_store_an_embedder_or_a_log",
    ),
    (
        "memories are data",
        "stored 'ignore previous instructions', fake delimiters (</memory-context>, < /memory-context>, "
        "full-width, _), '## System' headers, chat-template tokens",
        "inside the one delimited block, one line each (core, LangChain agent system message, chat memory, "
        "hypothesis property)",
        "tests/reliability/test_privacy.py -k 'inject or block'",
    ),
    (
        "Weaviate API key / TLS",
        "AUTHENTICATION_APIKEY_ENABLED server; HTTPS + gRPC TLS with a private CA",
        "no/wrong key -> typed StoreError; works with the key; untrusted CA refused; trust_env=True works; "
        "key never logged",
        "tests/reliability/test_weaviate_security.py",
    ),
]


#: Issue 15's attacks: static (measured by hand, not by the suite run above); rendered after FINDINGS.
HARDENING_15 = """## Hardening (issue 15): identity, prompt block, forget, inspector, edge inputs

Each attack of issue 15, reproduced on the code before its fix ("before") and on `main` with the fixes
("after"); every test named passes after. Measured 2026-12-02 (x86_64, 2 shared cores, load average 9-14
from other jobs): the test counts are the named tests run against the pre-fix trees (how many fail there);
the timings and sizes come from small scripts (a forget while a reader subprocess holds a read transaction; a
raw-socket flood of the inspector), before and after interleaved, 3 runs each.

| attack | before | after (asserted) | measured before -> after | reproduce |
|---|---|---|---|---|
| **1. the client names the user**: a LangGraph server run authenticated as alice (`langgraph_auth_user`, `langgraph_auth_user_id`, Studio or dict-shaped users) whose client sends `context={"user_id": "bob"}` (copied into `configurable`) or `langgraph_user_id`; `HybridMemoryStore` namespaces `("memories", "bob")`, user-less searches and listings; adapters bound to bob | `HybridMemoryMiddleware` took `runtime.context` first: alice's run read bob's memories into the prompt and wrote its turns into bob's short-term window | an authenticated identity always wins: a client id that disagrees raises `IdentityMismatchError` (a `HybridMemoryError` and `PermissionError`) before anything is read or written, bob's records, access counts and window unchanged; without a client id the identity names the user; conflicting server identities fail closed; `client_user_ids="refuse"` / `require_authenticated=True` only make it stricter; the store refuses other users' namespaces and narrows user-less searches to the authenticated user; a `HybridMemoryRetriever` / `HybridChatMemory` bound to bob refuses to run in alice's run; the MCP server takes the user from `--user` (stdio) or the bearer token (HTTP), no tool takes one. Trust model: README "Who may name a user" | bob's memory injected into alice's run and 2 turns written to bob's window -> refused, 0 read, 0 written; the 18 tests need the new error type, so they cannot run on the old tree | `python -m pytest tests/adapters/langchain/test_langchain_identity.py` |
| **2. delimiter look-alikes in stored text**: `</memory\\u200b-context>`, soft hyphen, word joiner, BOM, Cyrillic `е`, mathematical bold `𝐦`, small-form `﹤/memory-context﹥`, `&lt;…&gt;`, `&#60;…&#x3E;`, `&#60` without `;`, `&amp;lt;…`, `%3C…%3E`, `\\u003c…\\u003e`, Greek / Cyrillic capitals, U+2028 / NEL / CR line breaks; every bracket look-alike by Unicode name (`‹ 〈 ⟨ ❬ ❰ ⦑ « ⟪ 《 ≤ ≪ ⧼` ...: every visible character named ANGLE BRACKET, LESS-THAN, GREATER-THAN or ANGLE QUOTATION, Unicode 18.0, plus `˂ ᐸ ≺`); hypothesis: format characters inserted, confusables swapped, entity / percent / backslash encoding, full-width and small forms, mixed case, whitespace inside the tag | the block read as a model might held a second closing tag followed by "Ignore previous instructions"; after the first fix, 48 of 59 bracket pairs (`❬❭ ❰❱ ⦑⦒ ⟪⟫ 《》 ≤≥` ...) still passed through | read as a model might (an oracle independent of the fuser: escapes decoded, NFKC, Cf and marks dropped, look-alikes mapped, case folded) the block has exactly one opening and one closing tag; every memory is one `- [` line; no Cf character but ZWNJ / ZWJ reaches the block; ordinary Chinese punctuation, `<b>`, `&` and emoji ZWJ sequences unchanged; the fuser's bracket table equals the one regenerated from Python's Unicode names (300 hypothesis examples per run) | 9 of 10 audit variants unsafe -> 0; bracket pairs 48 of 59 -> 0 of 59; the test file: 53 of 79 failing on the first fix -> 79 passing | `python -m pytest tests/unit/test_prompt_block_lookalikes.py` |
| **3. forget with an open reader**: another *process* holds `BEGIN; SELECT count(*) ...` on the `LocalStore` file, on the trace file beside it (`<db>.traces.sqlite`) or on a `WeaviateStore`'s dead-letter file while `forget_user` / `delete_user` / `delete` runs | every forget stalled the 5 s busy timeout behind an unchecked `wal_checkpoint(TRUNCATE)`, ignored its busy result and reported success; the text stayed in the `-wal` also after the reader ended and the next write (the trace file and dead letters: still so after the store itself was fixed) | forget returns within `wipe_timeout` (0.5 s default) with the wipe *pending*: `ForgetCount.wipe_pending`, `HybridMemory.wipe_pending()` (store, trace file and dead-letter file), `LocalStore` / `TraceStore` / `WeaviateStore.wipe_pending`, CLI `forget` exit code 3 + warning; the marker is in the file itself (`meta`, `trace_meta`, `dead_letter_meta`), so another process sees it; the next write, open or close after the reader ends (or `finish_wipe`) finishes the wipe: canary in none of the file / `-wal` / `-shm`; no reader: no wait, nothing pending | store file: forget 5.08-5.12 s, not pending, canary kept -> 0.55-0.59 s, pending, canary gone with the next write; trace file: 5.10-5.31 s, `wipe_pending=False`, canary kept -> 0.54-0.60 s, pending, gone with the next step; dead-letter file: 5.05-5.12 s, not reported -> 0.51-0.58 s, pending | `python -m pytest tests/reliability/test_forget_open_reader.py` |
| **4. inspector flooding**: a POST with `Content-Length: -1` and 150 MB of body; malformed / oversized lengths; `Transfer-Encoding: chunked`; POSTs to a read-only inspector or without the form token announcing 900 kB they never send; 100 connections that send nothing or half a request line | the whole body read before any check (even read-only, even without the token); read-only / token-less POSTs blocked waiting for the body; chunked accepted as an empty form; one thread per hung connection, forever (no timeouts) | refused before a byte of the body is read (400 / 411 / 413 / 403), connection closed; the form token sits in the form's action URL (or `X-CSRF-Token`) so it is checked before the body; at most `max_connections` threads (32 default), a new connection replaces the longest-idle one so a normal GET is served at once; every thread ends after `request_timeout` (10 s default); all slots busy with requests: `503` + `Retry-After: 1`; a body that does not arrive in time: 408 | 150 of 150 MB read, RSS 128 -> 278-281 MB -> 1-3 MB accepted (kernel buffers) then `403`, RSS 57 -> 58 MB; 100 hung connections: 102 threads -> 34 (32 + 2), a normal GET answered in 0.003-0.004 s; 7 of 11 tests failing -> 11 passing | `python -m pytest tests/unit/test_inspector_flood.py` |
| **5a. an embedder whose output size changes** between calls (64-d, then 32-d), between two batches of one `remember_many`, a hand-written `Embedder` or precomputed vectors of another width; through remember, remember_many, add_turn, put, aremember | numpy's `ValueError` (broadcast / vstack) instead of the documented error | `EmbeddingDimensionError` (expected 64, got 32); records, vectors and the store's dimension unchanged (add_turn: the turn stays in the short-term window, its long-term write is refused); writes work again once the embedder recovers | 6 of 7 tests failing -> 7 passing | `python -m pytest tests/unit/test_edge_inputs_hardening.py -k embedder` |
| **5b. a timestamp far in the future** (year 9999, clock + 301 s, a day ahead in UTC+8) through add_turn, aadd_turn, remember, remember_many (one bad item among good ones), put | accepted: the memory pinned at recency 1.0, labelled "today", forever | `InvalidInputError` naming `writer.max_future_skew_seconds` (300 s default, configurable, `0` allowed, negative refused); nothing stored (records, vectors, short-term window); a read's `now=` in year 9999 is not refused but the access stamp it writes is capped at clock + skew, so recency still decays | 17 of 17 tests failing -> 17 passing | `python -m pytest tests/unit/test_edge_inputs_hardening.py -k "future or skew"` |
| **5c. import edge values**: `access_count=10**30`, `version=2**63`, negative / zero counters, vectors too short / long / a string / strings / booleans / nested / NaN / beyond float32 / all zeros, empty content, NUL in a user id, `Infinity` in metadata, torn JSON; into a new and into an existing store | Python tracebacks (`OverflowError` ...), or a typed error only after the earlier batches were written; a string vector silently re-embedded | `error: FILE: bad line after byte N: ...` (exit 2, one line) for every case, from a validation pass over the whole file before the first write; the store byte-for-byte unchanged (records, vectors, embedder binding), no progress file; `MemoryRecord` bounds both counters to 2^53 - 1 | 39 of 39 tests failing -> 39 passing (38 cases + the counter bound) | `python -m pytest tests/unit/test_import_edges.py -k "bad_line or bound_counters"` |
| **5d. an import header claiming dimension 10\\*\\*12** (also `"8"`, `8.0`) | the empty target was bound to 10^12 dimensions and refused every later write | refused (1..65536); the dimension is bound only by the first written batch, so the target stays unbound and takes a good import afterwards; vectors that disagree with the header are refused before writing | 4 of 7 tests failing -> 7 passing | `python -m pytest tests/unit/test_import_edges.py -k dimension` |
| **5e. an import line of another user, and the count**: an export of `alice` holding one line of `mallory`; 1,200 memories + a repeated line | `mallory`'s line stored silently; "imported 1201" for 1,200 memories | a line of a user the header does not name is refused (naming the user and `--user`) unless `--user USER` remaps every line; a repeated id is refused; the summary counts exactly and per user (`imported 1200 memories of 1 user into ...: alice 1200`); resume keeps the running count | 4 of 4 tests failing -> 4 passing | `python -m pytest tests/unit/test_import_edges.py -k "another_user or count_is_exact or repeating or names_its_users"` |
"""


#: Issue 13's multi-process suite: measured by hand on 2026-12-02 (the suite run above predates its report rows).
PROCESSES_13 = """## Many processes over one memory (issue 13)

`tests/reliability/test_processes.py`: real OS processes over one `LocalStore` file and over one real Weaviate.
Measured 2026-12-02 on 2 shared cores (load average 9-14 from other jobs); the rows above will carry these
scenarios from the next full run on.

| scenario | LocalStore file | WeaviateStore |
|---|---|---|
| kill -9 right after `add_turn` returned (3 turns acknowledged) | lost 0, duplicated 0, 2 of 2 facts recalled first | same |
| kill -9 before the extraction batch ran (2 facts) | lost 0, duplicated 0, extracted once | same |
| a session continued across processes (2 turns) | lost 0, duplicated 0, one window | same |
| CLI `forget` while 3 processes talk: turns acknowledged before / after the forget | 35 / 34 | 22 / 13 |
| ... text said before the forget still present (memories, turns, files, trace steps) | 0 | 0 |
| ... bystander leaks | 0 | 0 |
| CLI `forget --id` of a turn memory whose extraction batch was pending (its process killed): the text back in a memory, log turn, window or fact (measured 2026-12-03) | 0 (3 before the fix) | 0 (3 before the fix) |
| 4 processes x 60 s of mixed traffic: writes acknowledged / reads / sessions ended | 1,536 / 661 / 136 | 739 / 313 / 61 |
| ... lost / duplicated / cross-user leaks | 0 / 0 / 0 | 0 / 0 / 0 |

Reproduce: `HYBRID_MEMORY_RELIABILITY_SECONDS=60 python -m pytest tests/reliability/test_processes.py` (20 s of
mixed traffic by default). Races of `consolidate`, `clear_review`, the inspector's edits, `remember` and
Weaviate's `touch`/`update` with another process's forget are pinned deterministically in `tests/contract/`,
and so are a forget or edit of a turn memory while an extraction or summary model runs, and a forgotten fact or
summary whose process died before its watermark moved (`tests/contract/test_forget_turns.py`).
"""

FINDINGS = """## Bugs the tests found

Fixed (each in its own commit, message names the bug):

| bug | found by | fix |
|---|---|---|
| First Weaviate call after the server died took ~64 s (weaviate-client's internal UNAVAILABLE retry 1+2+...+32 s); a hung server cost the query timeout plus 2 s per retry | kill -9 / SIGSTOP during recall | `WeaviateStore._call` watchdog: liveness probe every 0.5 s while a request runs, whole call bounded by the query timeout (landed inside a1b010b, recorded in 6ce3696) |
| The same client stayed unusable ~63 s after the server restarted (grpc reconnect backoff towards 120 s) | kill -9 + restart | gRPC reconnect backoff 250 ms..2 s in `connect()`/`embedded()` (same commits) |
| Removing replayed dead letters: one fsync per row (3,500 rows 10.5 s) and per record of every upsert once the queue file existed | kill -9 mid-ingest + replay | one transaction (1ec2166) |
| A batch spanning N users slept through the retry backoff once per user during an outage | kill -9 mid-ingest | later tenants tried once after the server proved unreachable (ff666ab) |
| A recall's `touch` (read-modify-write upsert) resurrected a memory forgotten at the same moment; same for `update` and `forget_user` | isolation load on Weaviate (1 of 42 forgets) | fetch+write under the write lock that deletes take (2e055bc) |
| Raw PII reached the embedder (recall/build_context query, short-term turns embedded for dedup) and the store's keyword leg (query) | embedder wrapper recording every text | query and turns redacted like memories (aa3c2ff) |
| Delimiter look-alikes `< /memory-context>`, `</memory_context>`, full-width `＜/memory-context＞` survived the fuser | injection tests | broader neutralising pattern (3c0dab5) |
| `forget_user` on a `LocalStore` file left a copy of a deleted row in `memory.db` (and in the trace file) although `secure_delete` is on: when a delete empties pages, SQLite rebalances the remaining rows and the pages it rebuilds keep old bytes in the gap between the cell index and the cell content | the 100k forget test, flaky (then 2,000 memories: every run) | `forget_user` rewrites the file (`VACUUM`) after deleting, in the store, the trace file and the dead-letter file; a writer holding the file makes it a pending wipe finished by the next write, open or close (s25-canary). Cost: about the time to copy what the other users keep (forgetting 200 of 100k memories 0.04 -> 0.7-1.4 s) |
| `connect("https://...")` could not trust a private CA | TLS against a real server | `connect(trust_env=True)` (378c4fa) |
| Untyped errors: `remember(tags=None/metadata=False/provenance=None)` TypeError, `remember_many(None)` TypeError, LocalStore ids with lone surrogates UnicodeEncodeError, WeaviateStore ids None/5/[b'x']/['\\udfff'] TypeError/AttributeError/UnicodeEncodeError, non-numeric vectors ValueError, LangGraph store float/None limit/offset TypeError and surrogate keys UnicodeEncodeError, `add_turn(timestamp=datetime(1,1,1,utc))` OverflowError, float32-overflowing vectors RuntimeWarning | hypothesis fuzzing | typed `InvalidInputError` (29421d5, b9e4135, ccceeaa, 9c805c8, 7b0a9cd, 9749dd1, a2c92dd, 64b0500) |
| `HybridChatMemory.save_context` with a bad output had already recorded the input (a key frame in long-term memory) | fuzzing: store changed after a rejected call | validate all messages first (f521648) |
| `HybridMemory.touch(user, 0)` TypeError; a single str touched its characters | fuzzing | InvalidInputError (28a132d) |
| `remember` raised `NotFoundError` when another thread forgot the memory the writer was about to bump or supersede | 60 s isolation load, LocalStore | `forget`/`forget_user` delete under the writer's lock (e6d518e) |

Fixed by the core engineer after the reliability test reported it (29e51f7): the facade dropped
`ScoreBatch.fallback_reason`, so an LLM-scorer fallback was not visible in `Turn`, `WriteOutcome` or
`write_log` (now `Turn.scoring_note`, `WriteOutcome.notes`; asserted by
`test_scorer_fallback_is_visible_in_the_facade_outcome`).

Not fixed (reported):

* The LLM scorer, extractor and summarizer receive raw turn text (PII included); only embedder and
  store calls are redacted. Metadata and tags are stored as given (never redacted).
* Writes to a Weaviate that just died wait ~15 s (client-internal retry), to a hung one
  `insert_timeout`, before being dead-lettered (writes are deliberately not abandoned mid-flight).

Fixed across processes since (2026-12-02): a `remember` in another process that bumps or supersedes
a memory deleted at that moment re-plans the write without it instead of raising `NotFoundError`
(`tests/contract/test_remember_forget_race.py`), and a Weaviate `touch`/`update` no longer writes a
memory deleted between its read and its write back (tombstones checked after the batch write;
`tests/contract/test_store_delete_races.py`, `tests/integration/test_weaviate_tombstones.py`).
`forget_user` reaches every process: writes that could bring a user's data back -- turns,
memories, touches, background extraction, summaries, refinements, traces, `consolidate`,
`clear_review`, the inspector's edits -- check the store's forget epoch, so nothing racing another
process's `forget_user` is written back and a caller's write fails with `UserForgottenError`, never
`NotFoundError` (`tests/reliability/test_processes.py`, `tests/contract/test_forget_races.py`,
`tests/contract/test_edit_forget_race.py`).

Fixed since (2026-12-03): `forget(memory_id)` of a memory `add_turn` wrote left the turn in the
session's log in the store, so every process's short-term window kept showing it and the session's
next fact extraction and summary wrote it back as new memories (an `edit` of its text likewise kept
the old text in the log). Forget and a new text (`edit`, `put`) now take the turn out of the log
(`MemoryStore.delete_turns`); an extraction or summary whose model ran meanwhile re-reads the log
before and after writing; a forgotten extracted fact or summary moves its session's watermark past its turns,
so a process that died between writing them and moving the watermark does not leave them to be made
again (`tests/contract/test_forget_turns.py`, `tests/reliability/test_processes.py`).

A record dead-lettered by one process's `WeaviateStore` before another process deleted it is not
replayed: the replay compares the delete's tombstone with the letter's queue time. Found by review
since (2026-12-03): those two times come from two machines' clocks, so a delete made after the
write was queued, on a machine whose clock is behind, looked older and the replay re-created the
deleted memory. Tombstones now name the clock that dated them (the kernel's boot id, hashed): one
from this machine compares exactly, one from another machine dated less than five minutes before
the queue time holds the letter back, logged, until `replay_dead_letters(include_stale=True)`
(`tests/integration/test_weaviate_store.py`, a delete dated 90 s behind).

Fixed since (2026-12-04), found by three processes adding, forgetting and searching one `LocalStore` file:
a search raised `KeyError` (an untyped crash of `recall` / `build_context`) when another process deleted one of its
hits between the check of the in-process index against the file and the read of the hits' rows. The search now runs
again on the current index (at most three times; the last leaves such hits out). The mixed-traffic process test
now forgets too (each process some of its own acknowledged writes, while the others search) and failed 2 of 2 runs
before the fix (`tests/reliability/test_processes.py`, `tests/unit/test_local_store.py`). The same runs, checking
every byte of the file for the forgotten turns, found three more (`tests/contract/test_forget_turns.py`, each on a
`LocalStore` file and a real Weaviate): a process's short-term window kept a turn another process forgot, and
missed one it appended, when both happened around its own append (the two cancelled out in the turn count its next
sync compares); `forget_turn` of a reply after its session ended returned False and left the reply's words as the
next memory's search context; a context a racing forget missed was cut out only at that process's next read of the
session, not when it ended the session or closed (left contexts in 2 of 49 and 5 of 60 runs before the window fix,
0 of 60 after). A
`LocalStore` update that drops text (an edit, a context cut out) now also empties the WAL.

Fixed since (2026-12-04), found by asking what at-least-once delivery does to a turn: a retried `add_turn` added
the turn again -- a worker SIGKILLed inside `add_turn` (its memory written, the log append made or not) whose
request is delivered again to another process, a client retrying on a timeout, and a `create_agent` run that
LangGraph resumes after its worker died before `after_agent` was checkpointed (the middleware recorded the user
message and the answer a second time: every process's window showed them twice). `add_turn(turn_id=...)` now finds
a turn id the log already holds before writing anything and returns the stored turn; both stores keep one turn per
id (`append_turns` returns the stored turn; on Weaviate a retried append used to move the turn to the end of the
log); the same id for another session, role or text is refused and leaves nothing; the middleware derives turn ids
from the session and the message ids (`tests/reliability/test_processes.py`, SIGKILL before and after the log
append, on both stores; `tests/adapters/langchain/test_langchain_resume.py`, a SQLite-checkpointed agent resumed
after `os._exit`; `tests/contract/test_turn_retries.py`).

Fixed since (2026-12-04), the same question asked once more: a retry that arrived *after* its turn was forgotten
added it again -- after an operator's `forget_turn` (or a `forget` of its memory) the forgotten turn and its memory
came back, after `forget_user` the user's turns came back (also those of a session that had ended before), and a
`create_agent` thread resumed after such a forget recorded the forgotten message again. Every delete that takes
turns out of a log (`delete_turns`, `delete_session`, `delete_user`) now first records a SHA-256 of user and turn
id for seven days, as forgotten or ended, with the user's forget epoch (`retired_turns`; LocalStore in the delete's
transaction, Weaviate in the tombstone collection), and `add_turn` with a `turn_id` refuses a forgotten one (or an
ended one whose user was forgotten since) before it writes and again after its append. Ending a session forgets
nothing: an id said again afterwards is a turn of the new window, so ids numbered anew per conversation lose
nothing (`tests/reliability/test_processes.py`, the retry in a new process after `forget_turn` and `forget_user`
on both stores, 4 of 4 failed before; `tests/adapters/langchain/test_langchain_resume.py`;
`tests/contract/test_turn_retries.py`). Cost on a local Weaviate: `add_turn` with a `turn_id` p50 12.6 -> 14.5 ms
(two reads), without one unchanged; `end_session` of 200 turns 8 -> 28 ms, `forget_user` 21 -> 35 ms.
"""


def run_suite(args: argparse.Namespace, report: Path, junit: Path) -> int:
    env = dict(os.environ)
    env.update(
        {
            "HYBRID_MEMORY_RELIABILITY_REPORT": str(report),
            "HYBRID_MEMORY_RELIABILITY_SECONDS": str(args.seconds),
            "HYBRID_MEMORY_RELIABILITY_RUNS": str(args.runs),
            "HYBRID_MEMORY_FUZZ_EXAMPLES": str(args.fuzz_examples),
            "HYBRID_MEMORY_FUZZ_RANDOM": "0" if args.quick else "1",
            "HYBRID_MEMORY_FORGET_N": str(args.forget_n),
            "HYBRID_MEMORY_FORGET_N_WEAVIATE": str(args.forget_n_weaviate),
        }
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/reliability",
        "tests/cluster/test_cluster_faults.py",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={junit}",
        "--timeout",
        str(max(600, int(args.seconds) * 4 + 300)),
    ]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode


def junit_counts(junit: Path) -> dict[str, dict[str, int]]:
    """``{test file or node prefix: {passed, failed, skipped, xfailed}}``."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if not junit.exists():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            state = "failed"
        elif (sk := case.find("skipped")) is not None:
            state = "xfailed" if "xfail" in (sk.get("type", "") + sk.get("message", "")) else "skipped"
        else:
            state = "passed"
        out[path][state] += 1
    return out


def matches(test_ref: str, node: str) -> bool:
    ref, _, k = test_ref.partition(" -k ")
    ok = node.startswith(ref) if "::" in ref else node.split("::")[0] == ref
    if ok and k:  # the simple "-k 'a or b'" form used in SCENARIOS
        ok = any(term in node.split("::")[-1] for term in k.strip("'\"").split(" or "))
    return ok


def summarise(lines: list[dict[str, Any]], counts: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    rows = []
    for prefix, fault, survived, test in SCENARIOS + EXTRA_TESTS:
        got = [x for x in lines if str(x["scenario"]).startswith(prefix)]
        states: dict[str, int] = defaultdict(int)
        for node, c in counts.items():
            if matches(test, node):
                for k, v in c.items():
                    states[k] += v
        lost = sum(int(x.get("lost", 0)) + int(x.get("resurrected", 0)) + int(x.get("leaks", 0)) for x in got)
        lost += sum(int(x.get("files_with_canary", 0)) for x in got)
        rows.append(
            {
                "fault": prefix,
                "injected": fault,
                "runs": len(got) if got else states.get("passed", 0) + states.get("failed", 0),
                "tests": dict(states),
                "survived": survived,
                "measured": got,
                "lost": lost if got else (0 if states.get("failed", 0) == 0 and states else None),
                "command": f"python -m pytest {test}",
            }
        )
    return rows


def measured_text(row: dict[str, Any]) -> str:
    m = row["measured"]
    if not m:
        return ""
    keys = [k for k in m[0] if k not in ("scenario", "lost")]
    if len(m) == 1:
        return ", ".join(f"{k}={m[0][k]}" for k in keys)
    parts = []
    for k in keys:
        vals = [x.get(k) for x in m]
        if all(isinstance(v, (int, float)) for v in vals):
            parts.append(f"{k}={min(vals)}..{max(vals)}" if min(vals) != max(vals) else f"{k}={vals[0]}")
    return ", ".join(parts)


def write_report(
    rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float, rc: int, *, save_json: bool = True
) -> None:
    """Write ``reliability.md`` (and, after a run, ``reliability.json``; ``--render-only`` leaves it as it is)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    if save_json:
        data = {
            "settings": vars(args),
            "rows": rows,
            "seconds": seconds,
            "exit_code": rc,
            "date": time.strftime("%Y-%m-%d"),
        }
        (RESULTS / "reliability.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# Reliability and security report",
        "",
        f"Generated by `python -m benchmarks.reliability{' --quick' if args.quick else ''}` "
        f"({getattr(args, 'date', None) or time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, "
        f"weaviate-server 1.39.0, {seconds / 60:.1f} min, pytest exit code {rc}). Settings: load "
        f"{args.seconds:g} s per store and caller kind, {args.runs} run(s) per kill scenario, "
        f"{args.fuzz_examples} hypothesis examples per fuzz test ({'fixed' if args.quick else 'random'} seeds), "
        f"forget_user of {args.forget_n:,} (LocalStore) / {args.forget_n_weaviate:,} (Weaviate) memories.",
        "",
        "Every fault is injected for real (SIGKILL, SIGSTOP, a real HTTP server returning errors); "
        "'lost' counts lost acknowledged writes, resurrected forgotten memories, cross-user leaks and "
        "files still holding a forgotten user's canary. It must be 0.",
        "",
        "| fault injected | runs | what survived (asserted) | measured | lost | reproduce |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        tests = r["tests"]
        extra = "".join(f", {tests[k]} {k}" for k in ("failed", "xfailed", "skipped") if tests.get(k))
        runs = f"{r['runs']} ({tests.get('passed', 0)} passed{extra})"
        lost = "n/a" if r["lost"] is None else str(r["lost"])
        lines.append(
            f"| **{r['fault']}**: {r['injected']} | {runs} | {r['survived']} | {measured_text(r)} | {lost} "
            f"| `{r['command']}` |"
        )
    lines += [
        "",
        "Long variants: `python -m benchmarks.reliability` (see its docstring for the options).",
        "",
        FINDINGS,
        PROCESSES_13,
        HARDENING_15,
    ]
    (RESULTS / "reliability.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the default-suite settings")
    p.add_argument("--seconds", type=float, default=None, help="load duration per store and caller kind")
    p.add_argument("--runs", type=int, default=None, help="repetitions of each kill scenario")
    p.add_argument("--fuzz-examples", type=int, default=None)
    p.add_argument("--forget-n", type=int, default=100_000)
    p.add_argument("--forget-n-weaviate", type=int, default=None)
    p.add_argument("--render-only", action="store_true", help="rewrite reliability.md from reliability.json")
    args = p.parse_args(argv)
    if args.render_only:
        data = json.loads((RESULTS / "reliability.json").read_text())
        saved = argparse.Namespace(**{**data["settings"], "date": data.get("date")})
        write_report(
            data["rows"], saved, float(data.get("seconds", 0.0)), int(data.get("exit_code", 0)), save_json=False
        )
        return 0
    quick = args.quick
    args.seconds = args.seconds if args.seconds is not None else (5.0 if quick else 60.0)
    args.runs = args.runs if args.runs is not None else (1 if quick else 5)
    args.fuzz_examples = args.fuzz_examples if args.fuzz_examples is not None else (100 if quick else 500)
    args.forget_n_weaviate = (
        args.forget_n_weaviate if args.forget_n_weaviate is not None else (3000 if quick else 100_000)
    )
    with tempfile.TemporaryDirectory() as tmp:
        report, junit = Path(tmp) / "report.jsonl", Path(tmp) / "junit.xml"
        t0 = time.monotonic()
        rc = run_suite(args, report, junit)
        elapsed = time.monotonic() - t0
        lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
        rows = summarise(lines, junit_counts(junit))
    write_report(rows, args, elapsed, rc)
    print(f"wrote {RESULTS / 'reliability.md'} (pytest exit code {rc})")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
