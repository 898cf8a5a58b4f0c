"""False-supersede and missed-update rates of the conflict judges on the labelled pairs (issue 18).

    python -m benchmarks.conflict_judge                     # heuristic judge, before/after vs 45740c1
    python -m benchmarks.conflict_judge --baseline none     # current judge only
    python -m benchmarks.conflict_judge --fake junk         # + the LLM judge on the scripted junk server
    python -m benchmarks.conflict_judge --base-url http://127.0.0.1:18091/v1 --model smollm2 \
        --sample 120 --checkpoint /tmp/cj-smollm2.jsonl       # + the LLM judge on a real model

Reads ``tests/data/conflict_pairs.jsonl`` (hand-written old/new pairs labelled ``update``,
``distinct``, ``paraphrase`` or ``near_duplicate``) and asks each judge ``judge(new, [old])``.
A pair counts as *superseding* when the verdict is ``contradicts`` (the writer then supersedes the
older memory, or demotes the newer one). Rates:

* **false-supersede rate**: non-update pairs (distinct, paraphrase, near_duplicate) judged
  ``contradicts`` / all non-update pairs (target ≤ 1 %);
* **missed-update rate**: update pairs not judged ``contradicts`` / all update pairs.

The judge is called directly on every pair: in the writer it only sees pairs whose cosine is at or
above ``conflict_similarity`` (and pairs at or above the dedup threshold without a hard conflict
are deduplicated first), so these rates are for the judge, not for the whole write path.

``--baseline REV`` loads ``hybrid_memory/writer.py`` as it was at git revision ``REV`` into a
temporary module for the run (nothing is written to the tree) and reports it as "before".

With ``--base-url``/``--model`` (any OpenAI-compatible server, e.g. llama.cpp's
``llama_cpp.server``) or ``--fake junk`` (the scripted server of
``tests/reliability/fake_openai.py``) it also asks ``LLMConflictJudge(ChatOpenAI(...))`` as the
library ships it (default ``max_tokens``, one attempt per pair) and reports three rows on the same
pairs: the heuristic judge, the model's own verdicts (only the pairs it answered) and the
*combined* judge (the model's verdicts, the heuristic's wherever the model failed: what the
writer gets), with how many verdicts fell back to the heuristic and why. ``--sample N`` takes a
stratified sample (every category × language stratum, in proportion, seeded); ``--checkpoint``
keeps each verdict as it comes so a long run can stop and resume. Each LLM run replaces the
run of the same model in the results, which keep the others.
Writes ``benchmarks/results/conflict_judge.{md,json}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hybrid_memory.write.conflict import ConflictJudge, HeuristicConflictJudge, Verdict  # noqa: E402

DATA = ROOT / "tests" / "data" / "conflict_pairs.jsonl"
RESULTS = Path(__file__).parent / "results"
#: The commit before the issue-18 judge fix (the judge that collapsed the bug templates).
DEFAULT_BASELINE = "45740c1"
_PLUMBING_IMPORT = "from hybrid_memory.llm_call import StructuredMethod, StructuredCaller as _LLMCaller"


def load_pairs(path: Path = DATA) -> list[dict[str, Any]]:
    """The labelled pairs (the leading ``meta`` line is skipped)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if "meta" not in r]


def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def evaluate(judge: ConflictJudge, pairs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Rates overall and per label, category and language, plus the misjudged pairs."""
    pairs = list(pairs)
    return tally(pairs, [judge.judge(p["new"], [p["old"]])[0] for p in pairs])


def tally(pairs: Sequence[dict[str, Any]], verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """:func:`evaluate` on given verdicts (``verdicts[i]`` is the verdict on ``pairs[i]``)."""
    groups: dict[str, dict[str, int]] = defaultdict(lambda: {"update": 0, "hit": 0, "other": 0, "false": 0})
    errors: list[dict[str, Any]] = []
    for p, v in zip(pairs, verdicts, strict=True):
        sup = v.relation == "contradicts"
        upd = p["label"] == "update"
        keys = ["overall", f"label:{p['label']}", f"category:{p['category']}", f"lang:{p['lang']}"]
        for k in keys:
            g = groups[k]
            if upd:
                g["update"] += 1
                g["hit"] += sup
            else:
                g["other"] += 1
                g["false"] += sup
        if sup != upd:
            errors.append({**p, "verdict": v.relation, "reason": v.reason})
    out = {
        k: {
            "updates": g["update"],
            "missed_updates": g["update"] - g["hit"],
            "missed_update_rate": _rate(g["update"] - g["hit"], g["update"]),
            "non_updates": g["other"],
            "false_supersedes": g["false"],
            "false_supersede_rate": _rate(g["false"], g["other"]),
        }
        for k, g in sorted(groups.items())
    }
    return {"groups": out, "errors": errors}


def baseline_judge(rev: str) -> ConflictJudge:
    """``HeuristicConflictJudge`` from ``hybrid_memory/writer.py`` at git revision ``rev``."""
    src = subprocess.run(
        ["git", "show", f"{rev}:hybrid_memory/writer.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    # The old writer imported the LLM plumbing from hybrid_memory.scoring, which now only re-exports
    # public names; point it at the plumbing's home.
    src = src.replace("from hybrid_memory.scoring import StructuredMethod, _LLMCaller", _PLUMBING_IMPORT)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "writer_baseline.py"
        path.write_text(src, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("_writer_baseline", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
        try:
            spec.loader.exec_module(mod)
        finally:
            del sys.modules[spec.name]
    judge: ConflictJudge = mod.HeuristicConflictJudge()
    return judge


def stratified(pairs: Sequence[dict[str, Any]], n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """The pairs in an order whose every prefix is a stratified sample; the first ``n`` of them.

    Each (category, language) stratum is shuffled (seeded), then the strata take turns, the one
    with the smallest share taken so far first: any prefix holds every stratum in proportion
    (each at least once from the number of strata on), so a run stopped early is still a
    stratified sample.
    """
    strata: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for p in pairs:
        strata[(p["category"], p["lang"])].append(p)
    rng = random.Random(seed)
    for rows in strata.values():
        rng.shuffle(rows)
    taken = dict.fromkeys(strata, 0)
    order: list[dict[str, Any]] = []
    while len(order) < (len(pairs) if n is None else min(n, len(pairs))):
        k = min((k for k in strata if taken[k] < len(strata[k])), key=lambda k: (taken[k] / len(strata[k]), k))
        order.append(strata[k][taken[k]])
        taken[k] += 1
    return order


def _source(v: Verdict) -> str:
    """Where a verdict of ``LLMConflictJudge`` came from: the model, or the heuristic and why."""
    if v.judge == "llm":
        return "model"
    if "model gave no verdict" in v.reason:
        return "heuristic: the model gave no verdict for the pair"
    if "LLM judge failed" in v.reason:
        why = v.reason.split("LLM judge failed: ", 1)[1]
        why = re.sub(r"^\w+(Error|Exception): ", "", why)  # the exception's class
        return "heuristic: call failed: " + re.split(r" \(|: | after \d", why, maxsplit=1)[0][:80]
    return "heuristic"


def llm_verdicts(
    pairs: Sequence[dict[str, Any]],
    *,
    base_url: str | None,
    model: str,
    fake: str | None,
    method: str,
    checkpoint: Path | None,
    timeout: float = 120.0,
) -> tuple[list[Verdict], list[float]]:
    """``LLMConflictJudge`` on every pair (verdicts kept in ``checkpoint``, reused on a rerun), and seconds per call."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from hybrid_memory.llm_call import LLMCallPolicy
    from hybrid_memory.write.conflict import LLMConflictJudge

    done: dict[tuple[str, str], dict[str, Any]] = {}
    if checkpoint is not None and checkpoint.exists():
        for line in checkpoint.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            done[(row["old"], row["new"])] = row
    seconds: list[float] = []
    with ExitStack() as stack:
        if fake is not None:
            from tests.reliability.fake_openai import serve

            base_url = stack.enter_context(serve([fake])).base_url
        chat = ChatOpenAI(base_url=base_url, api_key=SecretStr("sk-local"), model=model, temperature=0, max_retries=0)
        judge = LLMConflictJudge(chat, method=method, policy=LLMCallPolicy(timeout=timeout, max_retries=0))  # type: ignore[arg-type]
        sink = stack.enter_context(checkpoint.open("a", encoding="utf-8")) if checkpoint is not None else None
        for i, p in enumerate(pairs):
            key = (p["old"], p["new"])
            if key not in done:
                t0 = time.perf_counter()
                v = judge.judge(p["new"], [p["old"]])[0]
                took = time.perf_counter() - t0
                done[key] = {
                    "old": p["old"],
                    "new": p["new"],
                    "relation": v.relation,
                    "reason": v.reason,
                    "judge": v.judge,
                    "seconds": round(took, 3),
                }
                if sink is not None:
                    sink.write(json.dumps(done[key], ensure_ascii=False) + "\n")
                    sink.flush()
                print(f"[{i + 1}/{len(pairs)}] {took:.1f} s {_source(v)[:60]}", file=sys.stderr, flush=True)
            seconds.append(done[key]["seconds"])
    verdicts = [
        Verdict(done[k]["relation"], done[k]["reason"], done[k]["judge"]) for k in ((p["old"], p["new"]) for p in pairs)
    ]
    return verdicts, seconds


def replayed(pairs: Sequence[dict[str, Any]], verdicts: Sequence[Verdict]) -> list[Verdict]:
    """What ``LLMConflictJudge`` in this tree returns, given the model answers a checkpoint recorded.

    The model's own verdicts are replayed in call order through a scripted chat model (the model is
    not called again), so the sanity checks (hard signals, degenerate window) see the same answers;
    a pair the model did not answer keeps its recorded heuristic fallback (failures do not enter
    the degenerate window). Meaningful for checkpoints recorded before the sanity checks, whose
    model rows hold the model's raw relation.
    """
    from langchain_core.language_models import FakeListChatModel

    from hybrid_memory.write.conflict import LLMConflictJudge

    answered = [i for i, v in enumerate(verdicts) if v.judge == "llm"]
    replies = [
        json.dumps({"verdicts": [{"index": 0, "relation": verdicts[i].relation, "reason": verdicts[i].reason}]})
        for i in answered
    ]
    judge = LLMConflictJudge(FakeListChatModel(responses=replies or ["{}"]), method="json_mode")
    out = list(verdicts)
    for i in answered:
        out[i] = judge.judge(pairs[i]["new"], [pairs[i]["old"]])[0]
    return out


def llm_run(
    pairs: Sequence[dict[str, Any]],
    total: int,
    *,
    base_url: str | None,
    model: str,
    fake: str | None,
    method: str,
    checkpoint: Path | None,
    timeout: float = 120.0,
    replay: bool = False,
) -> dict[str, Any]:
    """The heuristic, the model's own verdicts and the combined judge on the same pairs.

    With ``replay`` also ``checked``: the recorded model answers through this tree's judge (see
    :func:`replayed`).
    """
    verdicts, seconds = llm_verdicts(
        pairs, base_url=base_url, model=model, fake=fake, method=method, checkpoint=checkpoint, timeout=timeout
    )
    extra: dict[str, Any] = {}
    if replay:
        checked = replayed(pairs, verdicts)
        extra = {
            "checked": tally(pairs, checked),
            "checked_overrides": dict(
                Counter(
                    "degenerate window" if "model degenerate" in v.reason else "hard signal: " + v.reason.split(" (")[0]
                    for v, w in zip(checked, verdicts, strict=True)
                    if w.judge == "llm" and v.judge != "llm"
                ).most_common()
            ),
        }
    sources = [_source(v) for v in verdicts]
    answered = [i for i, s in enumerate(sources) if s == "model"]
    heuristic = HeuristicConflictJudge()
    seconds_sorted = sorted(seconds)
    return {
        "model": f"fake:{fake}" if fake is not None else model,
        "method": method,
        "timeout_seconds": timeout,
        "pairs": len(pairs),
        "sample": "all pairs"
        if len(pairs) == total
        else f"stratified sample of {len(pairs)} of {total} pairs (seed 0)",
        "model_verdicts": len(answered),
        "model_relations": dict(Counter(verdicts[i].relation for i in answered).most_common()),
        "fallbacks": dict(Counter(s for s in sources if s != "model").most_common()),
        "seconds_per_pair_median": seconds_sorted[len(seconds) // 2] if seconds else None,
        "seconds_total": round(sum(seconds), 1),
        "load_average_at_end": list(os.getloadavg()),
        "runs": {
            "heuristic": evaluate(heuristic, pairs),
            "llm_only": tally([pairs[i] for i in answered], [verdicts[i] for i in answered]),
            "combined": tally(pairs, verdicts),
            **({"checked": extra["checked"]} if replay else {}),
        },
        **({"checked_overrides": extra["checked_overrides"]} if replay else {}),
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _table(runs: dict[str, dict[str, Any]], prefix: str) -> list[str]:
    names = list(runs)
    head = "| group | updates | non-updates | " + " | ".join(f"false-supersede {n} | missed-update {n}" for n in names)
    lines = [head + " |", "|" + "---|" * (3 + 2 * len(names))]
    keys = [k for k in next(iter(runs.values()))["groups"] if k == prefix or k.startswith(prefix + ":")]
    for k in keys:
        g0 = runs[names[0]]["groups"][k]
        cells = []
        for n in names:
            g = runs[n]["groups"].get(k, {"updates": 0, "non_updates": 0})
            # A run on fewer pairs of the group (the model's own verdicts) gives its denominator too.
            of_fs = "" if g["non_updates"] == g0["non_updates"] else f"/{g['non_updates']}"
            of_mu = "" if g["updates"] == g0["updates"] else f"/{g['updates']}"
            fs = f"{_pct(g['false_supersede_rate'])} ({g['false_supersedes']}{of_fs})" if g["non_updates"] else "–"
            mu = f"{_pct(g['missed_update_rate'])} ({g['missed_updates']}{of_mu})" if g["updates"] else "–"
            cells += [fs, mu]
        label = k.split(":", 1)[-1]
        lines.append(f"| {label} | {g0['updates']} | {g0['non_updates']} | " + " | ".join(cells) + " |")
    return lines


_LLM_NAMES = {"heuristic": "heuristic", "llm_only": "model only", "combined": "combined", "checked": "checked"}


def _llm_section(r: dict[str, Any]) -> list[str]:
    """The report of one LLM run: the three judges on the same pairs, and where the verdicts came from."""
    runs = {_LLM_NAMES[k]: v for k, v in r["runs"].items()}
    falls = "; ".join(f"{n} {why}" for why, n in r["fallbacks"].items()) or "none"
    load = ", ".join(f"{x:.1f}" for x in r["load_average_at_end"])
    secs = r["seconds_per_pair_median"]
    return [
        f"## LLM judge: `{r['model']}` ({r['method']}) on {r['sample'] if r['sample'] == 'all pairs' else 'a ' + r['sample']}",
        "",
        f"`LLMConflictJudge(ChatOpenAI(...), method={r['method']!r})` as shipped (default `max_tokens`), one attempt "
        f"per pair ({r.get('timeout_seconds', 120):g} s deadline). **The model gave its own verdict for "
        f"{r['model_verdicts']} of {r['pairs']} pairs** ("
        + (", ".join(f"{k} {n}" for k, n in r.get("model_relations", {}).items()) or "none")
        + f"); the heuristic answered the rest ({falls}). Columns: "
        "`heuristic` = `HeuristicConflictJudge` on the same pairs; `model only` = the model's own verdicts, on the "
        "pairs it answered (counts k/n where n differs); `combined` = what `LLMConflictJudge` returns to the writer "
        "(the model's verdict, the heuristic's where the model failed). "
        + (
            "`checked` = the model's recorded answers replayed (in call order, without calling the model again) "
            "through `LLMConflictJudge` with the sanity checks of this tree (a hard signal wins over `contradicts`; "
            "`contradicts` and nothing else for the last 8 pairs = degenerate, heuristic used): **`combined` is before, `checked` "
            "after the checks**; overrides: "
            + ("; ".join(f"{n} {why}" for why, n in r["checked_overrides"].items()) or "none")
            + ". "
            if "checked" in r["runs"]
            else ""
        )
        + (
            f"Median {secs:.1f} s per pair; load average when the report was written {load} (2 cores, shared; verdicts kept in a checkpoint may be older)."
            if secs
            else ""
        ),
        "",
        *_table(runs, "overall"),
        "",
        *_table(runs, "label"),
        "",
        *_table(runs, "category"),
        "",
        *_table(runs, "lang"),
        "",
    ]


def markdown(res: dict[str, Any]) -> str:
    """The report as Markdown."""
    runs = res["runs"]
    out = [
        "# Conflict judge: false supersedes and missed updates (issue 18)",
        "",
        f"Data: `tests/data/conflict_pairs.jsonl`, {res['pairs']} hand-written pairs "
        f"({', '.join(f'{k} {v}' for k, v in res['labels'].items())}; "
        f"{', '.join(f'{k} {v}' for k, v in res['langs'].items())}). "
        "Each judge is asked `judge(new, [old])`; `contradicts` = the writer would supersede (or demote).",
        "",
        "* **false-supersede rate** = non-update pairs (distinct, paraphrase, near-duplicate) judged `contradicts`"
        " / non-update pairs — target ≤ 1 %;",
        "* **missed-update rate** = update pairs not judged `contradicts` / update pairs.",
        "",
        f"Runs: {', '.join(f'`{n}` = {d}' for n, d in res['descriptions'].items())}.",
        "LLM judge (`LLMConflictJudge`): "
        + (
            ", ".join(f"`{r['model']}` ({r['sample']})" for r in res["llm_runs"]) + ", see below"
            if res["llm_runs"]
            else "not measured in this run"
        )
        + ".",
        "",
        "Caveat: the `after` rule was written while looking at this set (there is no held-out split), so its "
        "rates are optimistic for text unlike these pairs.",
        "",
        "## Overall",
        "",
        *_table(runs, "overall"),
        "",
        "## By label",
        "",
        *_table(runs, "label"),
        "",
        "## By category",
        "",
        *_table(runs, "category"),
        "",
        "## By language",
        "",
        *_table(runs, "lang"),
        "",
    ]
    for r in res["llm_runs"]:
        out += _llm_section(r)
    last = list(runs)[-1]
    errs = runs[last]["errors"]
    out += [f"## Pairs `{last}` gets wrong ({len(errs)})", "", "| label | category | old | new | verdict | reason |"]
    out.append("|---|---|---|---|---|---|")
    for e in errs:
        cells = [e["label"], e["category"], e["old"], e["new"], e["verdict"], e["reason"] or ""]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    out.append("")
    out.append(
        "Reproduce: `python -m benchmarks.conflict_judge`"
        + "".join(f"; `{r['command']}`" for r in res["llm_runs"] if "command" in r)
        + " (each LLM run keeps the others in the results)."
    )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the judges on the labelled set and write the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision of the 'before' judge, or 'none'")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--base-url", default=None, help="also run LLMConflictJudge on this OpenAI-compatible endpoint")
    p.add_argument("--model", default="local", help="the model name for --base-url")
    p.add_argument("--fake", choices=("junk",), default=None, help="LLMConflictJudge on the scripted local server")
    p.add_argument("--method", choices=("json_mode", "function_calling"), default="json_mode")
    p.add_argument("--sample", type=int, default=None, help="a stratified sample of this many pairs for the LLM")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per LLM call (one attempt)")
    p.add_argument("--checkpoint", type=Path, default=None, help="JSON lines of LLM verdicts, reused on a rerun")
    p.add_argument(
        "--replay",
        action="store_true",
        help="also replay the checkpoint's model answers through this tree's judge (sanity checks) as 'checked'",
    )
    args = p.parse_args(argv)
    if args.base_url is not None and args.fake is not None:
        p.error("give at most one of --base-url and --fake")
    pairs = load_pairs()
    runs: dict[str, dict[str, Any]] = {}
    descriptions: dict[str, str] = {}
    if args.baseline != "none":
        runs["before"] = evaluate(baseline_judge(args.baseline), pairs)
        descriptions["before"] = f"HeuristicConflictJudge at {args.baseline}"
    runs["after"] = evaluate(HeuristicConflictJudge(), pairs)
    descriptions["after"] = "HeuristicConflictJudge in this tree"

    def count(key: str) -> dict[str, int]:
        c: dict[str, int] = defaultdict(int)
        for r in pairs:
            c[r[key]] += 1
        return dict(sorted(c.items()))

    old = args.out / "conflict_judge.json"
    llm_runs: list[dict[str, Any]] = json.loads(old.read_text("utf-8")).get("llm_runs", []) if old.exists() else []
    if args.base_url is not None or args.fake is not None:
        new = llm_run(
            stratified(pairs, args.sample),
            len(pairs),
            base_url=args.base_url,
            model=args.model,
            fake=args.fake,
            method=args.method,
            checkpoint=args.checkpoint,
            timeout=args.timeout,
            replay=args.replay,
        )
        where = f"--fake {args.fake}" if args.fake is not None else f"--base-url {args.base_url} --model {args.model}"
        sample = f" --sample {args.sample}" if new["pairs"] < len(pairs) else ""
        replay = f" --checkpoint {args.checkpoint} --replay" if args.replay else ""
        new["command"] = f"python -m benchmarks.conflict_judge {where} --method {args.method}{sample}{replay}"
        llm_runs = [r for r in llm_runs if (r["model"], r["method"]) != (new["model"], new["method"])] + [new]
    res = {
        "pairs": len(pairs),
        "labels": count("label"),
        "langs": count("lang"),
        "descriptions": descriptions,
        "runs": runs,
        "llm_runs": llm_runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "conflict_judge.json").write_text(json.dumps(res, ensure_ascii=False, indent=2) + "\n", "utf-8")
    (args.out / "conflict_judge.md").write_text(markdown(res), "utf-8")
    named = [(n, r) for n, r in runs.items()] + [
        (f"{r['model']} {n}", x) for r in llm_runs for n, x in r["runs"].items()
    ]
    for n, r in named:
        g = r["groups"].get("overall")
        if g is None:
            print(f"{n}: no pairs")
            continue
        print(
            f"{n}: false-supersede {_pct(g['false_supersede_rate'])} ({g['false_supersedes']}/{g['non_updates']}), "
            f"missed-update {_pct(g['missed_update_rate'])} ({g['missed_updates']}/{g['updates']})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
