"""The bilingual heuristic importance scorer against the hand-labelled turns in tests/data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.write.importance import HeuristicImportanceScorer, infer_category, spearman

DATA = Path(__file__).resolve().parents[1] / "data"


def load(name: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


LABELS = load("importance_labels.jsonl")
HOLDOUT = load("importance_labels_holdout.jsonl")


def agreement(rows: list[dict[str, object]]) -> float:
    s = HeuristicImportanceScorer()
    pred = [s.score_one(str(r["text"]), str(r["role"])).importance for r in rows]
    return spearman(pred, [float(r["label"]) for r in rows])  # type: ignore[arg-type]


def test_label_set_is_big_bilingual_and_varied() -> None:
    assert len(LABELS) >= 200
    langs = {r["lang"] for r in LABELS}
    assert langs == {"zh", "en"}
    assert min(sum(1 for r in LABELS if r["lang"] == lang) for lang in langs) >= 100
    kinds = {r["kind"] for r in LABELS}
    assert {"preference", "constraint", "fact", "plan", "pleasantry", "assistant"} <= kinds
    assert {r["label"] for r in LABELS} == set(range(1, 11))
    assert len({r["text"] for r in LABELS + HOLDOUT}) == len(LABELS) + len(HOLDOUT)


def test_spearman_on_the_labelled_set() -> None:
    # The rules were tuned while looking at this set (0.91 when written); see benchmarks/results/importance.md.
    assert agreement(LABELS) >= 0.88


def test_spearman_on_the_held_out_set() -> None:
    # Labelled before the last rule changes and not used for tuning (0.82 when written).
    assert agreement(HOLDOUT) >= 0.75


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_spearman_per_language(lang: str) -> None:
    assert agreement([r for r in LABELS if r["lang"] == lang]) >= 0.85


def test_ordering_of_typical_turns() -> None:
    s = HeuristicImportanceScorer()
    order = [
        "记住：我对花生严重过敏",
        "I prefer window seats on long flights.",
        "我住在上海浦东",
        "How do I reverse a list in Python?",
        "今天天气真好啊",
        "谢谢！",
    ]
    scores = [s.score_one(t).importance for t in order]
    assert scores == sorted(scores, reverse=True)
    assert scores[-1] == 0.0


def test_user_beats_assistant_for_the_same_text() -> None:
    s = HeuristicImportanceScorer()
    text = "I prefer short answers with bullet points."
    assert s.score_one(text, "user").importance > s.score_one(text, "assistant").importance


def test_key_frame_reasons() -> None:
    s = HeuristicImportanceScorer()
    assert s.score_one("Remember: my flight is on June 3rd").key_frame_reason == "remember"
    assert s.score_one("我不吃猪肉").key_frame_reason == "constraint"
    assert s.score_one("I prefer aisle seats").key_frame_reason == "preference"
    assert s.score_one("我打算明年考研").key_frame_reason == "goal"
    assert s.score_one("怎么做红烧肉？").key_frame_reason is None
    assert s.score_one("I prefer aisle seats", "assistant").key_frame_reason is None


def test_features_are_inspectable() -> None:
    f = HeuristicImportanceScorer().features("Remember: I never eat pork on Fridays")
    assert f["remember"] and f["constraint"] and f["date"] and f["first_person"]
    assert not f["question"]


@pytest.mark.parametrize(
    "text", ["We decided on the blue one", "Can you recommend a good sci-fi novel?", "I only drink decaf"]
)
def test_words_that_start_like_a_month_are_not_dates(text: str) -> None:
    assert not HeuristicImportanceScorer().features(text)["date"]


@pytest.mark.parametrize("text", ["We meet on 3 March", "Due in Sept", "我们5月3日见", "下周一开会"])
def test_dates_are_dates(text: str) -> None:
    assert HeuristicImportanceScorer().features(text)["date"]


def test_a_declared_change_is_a_change_for_the_scorer_too() -> None:
    # The scorer's change cues include the conflict judge's declared changes (one vocabulary).
    s = HeuristicImportanceScorer()
    for text in ("I stopped drinking alcohol last year.", "我们的会议推迟到周五", "I rescheduled the dentist"):
        assert s.features(text)["change"], text
    assert s.score_one("I stopped drinking alcohol last year.").key_frame_reason == "change"


def test_infer_category() -> None:
    assert infer_category("我喜欢喝茶") == "preference"
    assert infer_category("We're going to renovate the kitchen") == "project"
    assert infer_category("My dog is called Biscuit") == "fact"


def test_input_validation() -> None:
    s = HeuristicImportanceScorer()
    with pytest.raises(InvalidInputError):
        s.score(["a", "b"], roles=["user"])
    with pytest.raises(InvalidInputError):
        s.score([1])  # type: ignore[list-item]


def test_spearman_helper() -> None:
    assert spearman([1, 2, 2, 3], [1, 2, 2, 3]) == 1.0
    assert spearman([1, 2, 3], [5, 5, 5]) == 0.0
    with pytest.raises(InvalidInputError):
        spearman([1], [1])


async def test_async_twin() -> None:
    s = HeuristicImportanceScorer()
    assert (await s.ascore(["我对花生过敏"])).items == s.score(["我对花生过敏"]).items


@pytest.mark.parametrize(
    "text",
    [
        "Hi there!",
        "hello",
        "Hello again",
        "Hey everyone",
        "ok",
        "OK thanks",
        "Thank you very much!",
        "You're welcome",
        "no worries",
        "Hmm",
        "你好！",
        "您好，在吗？",
        "谢谢",
        "谢啦",
        "好的",
        "好嘞",
        "嗯…",
        "嗯嗯，好的",
        "哈哈好的，谢谢",
        "了解",
    ],
)
def test_greetings_thanks_and_acknowledgements_are_not_kept(text: str) -> None:
    from hybrid_memory.config import WriterConfig

    scored = HeuristicImportanceScorer().score_one(text)
    assert scored.importance < WriterConfig().turn_min_importance  # below the writer's keep threshold
    assert scored.key_frame_reason is None


def test_a_greeting_does_not_hide_what_follows_it() -> None:
    s = HeuristicImportanceScorer()
    assert s.score_one("Hi! I'm vegetarian.").key_frame_reason == "constraint"
    # "raining" inside "training" is not small talk about the weather
    assert s.score_one("I'm training for the Berlin marathon in September.").importance > 0.5


@pytest.mark.parametrize(
    "text",
    [
        "My goal is to run a marathon under 4 hours this year.",
        "I'm training for the Berlin marathon in September, 5 runs a week.",
        "I'm training for a half marathon.",
        "I want to lose 5 kg by June.",
        "I plan to read 20 books this year.",
        "I'm preparing for the IELTS exam.",
        "我的目标是年底前跑完全马。",
        "我的目标是减重5公斤",
        "我打算考研",
        "我打算学游泳",
        "计划下个月去东京",
        "我们计划十月份结婚",
    ],
)
def test_stated_goals_and_plans_are_key_frames(text: str) -> None:
    assert HeuristicImportanceScorer().score_one(text).key_frame_reason == "goal"


def test_asking_about_goals_is_not_stating_one() -> None:
    s = HeuristicImportanceScorer()
    for text in ("What's your goal?", "你的目标是什么？", "帮我做个旅行计划", "计划", "我准备好了"):
        assert s.score_one(text).key_frame_reason is None
