"""bench/extractive_eval.py judges each dumped part again at every grid point: its verdict must be
the service's (`retrieval.extractive.select` / `link_answer`), or the published figures are not."""

from bench.extractive_eval import answered
from retrieval.extractive import link_answer


def _dumped(part: dict[str, object]) -> dict[str, object]:
    return {"unknown": [], "strangers": [], "wanted_found": True, **part}


def test_a_request_for_links_is_answered_only_by_links() -> None:
    """「张角的太平道官方网站网址是什么？」 with web search off gets no link and says 无法从上下文确认."""
    for links in ([], [("太平道", "https://example.org/taiping")]):
        part = link_answer("张角的太平道官方网站网址是什么", links).model_dump()
        assert answered(_dumped(part), similarity=0.89, coverage=0.1, unknown=99) == bool(links)


def test_a_local_part_is_judged_by_its_thresholds() -> None:
    part = _dumped({"part": "关羽用什么兵器", "wants_links": False, "best_similarity": 0.9, "coverage": 0.5})
    assert answered(part, similarity=0.89, coverage=0.1, unknown=99)
    assert not answered(part, similarity=0.91, coverage=0.1, unknown=99)
    assert not answered({**part, "premise_denied": "关羽在麦城打败吕蒙"}, similarity=0.89, coverage=0.1, unknown=99)
