"""Chinese-aware chunking: sentence boundaries first, size bound, overlap, determinism."""

import itertools

import pytest

from core.chunking import sentence_end, split_sentences, split_text

TEXT = (
    "话说天下大势，分久必合，合久必分。周末七国分争，并入于秦！及秦灭之后，楚、汉分争，又并入于汉？"
    "汉朝自高祖斩白蛇而起义；一统天下……后来光武中兴，传至献帝，遂分为三国。\n"
    "　　推其致乱之由，殆始于桓、灵二帝。他说：“走吧！”然后走了。\n"
)


def test_sentences_keep_end_marks_closing_quotes_and_reassemble_the_text() -> None:
    sentences = split_sentences(TEXT)
    assert "".join(sentences) == TEXT
    assert "他说：“走吧！”" in sentences
    assert sentences[0] == "话说天下大势，分久必合，合久必分。"
    assert "一统天下……" in sentences


def test_chunks_end_at_sentence_marks_and_respect_the_size() -> None:
    chunks = split_text(TEXT, chunk_size=40, chunk_overlap=0)
    assert len(chunks) > 2
    assert all(len(chunk) <= 40 for chunk in chunks)
    assert all(chunk[-1] in "。！？；…”" for chunk in chunks)
    # No overlap: the chunks are the text, minus indentation and line breaks at chunk edges.
    assert "".join(chunks).replace("\n", "") == TEXT.replace("\n", "").replace("\u3000", "")


def test_overlap_repeats_the_previous_chunks_last_whole_sentences() -> None:
    chunks = split_text(TEXT, chunk_size=40, chunk_overlap=20)
    assert len(chunks) > 2
    for previous, following in itertools.pairwise(chunks):
        overlap = max(k for k in range(21) if previous.endswith(following[:k]))
        assert overlap > 0, (previous, following)
        # The shared part is whole sentences: it ends at a sentence mark.
        assert following[overlap - 1] in "。！？；…”", (previous, following)


def test_a_sentence_longer_than_the_chunk_is_cut_into_overlapping_windows() -> None:
    text = "甲乙丙丁戊己庚辛壬癸" * 30  # 300 characters, no punctuation
    chunks = split_text(text, chunk_size=100, chunk_overlap=10)
    assert [len(c) for c in chunks] == [90, 100, 100, 40]
    for previous, following in itertools.pairwise(chunks):
        assert following[:10] == previous[-10:]
    assert chunks[0] + "".join(c[10:] for c in chunks[1:]) == text


def test_chunks_are_pinned_and_blank_text_gives_none() -> None:
    """Chunk ids hash the chunk text: a change here re-embeds every indexed knowledge base."""
    assert split_text(TEXT, 50, 10) == [
        "话说天下大势，分久必合，合久必分。周末七国分争，并入于秦！及秦灭之后，楚、汉分争，又并入于汉？",
        "汉分争，又并入于汉？汉朝自高祖斩白蛇而起义；一统天下……后来光武中兴，传至献帝，遂分为三国。",
        "推其致乱之由，殆始于桓、灵二帝。他说：“走吧！”然后走了。",
    ]
    assert split_text("  \n\u3000\n", 50, 10) == []


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (100, 100), (100, -1)])
def test_bad_sizes_are_refused_with_the_reason(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="chunk_"):
        split_text(TEXT, size, overlap)


def test_a_sentence_end_is_found_within_reach_or_not_at_all() -> None:
    text = "第一句没有完。第二句很长很长很长很长很长。\n| 行 | 值 |\n"
    assert sentence_end(text, 3, 10) == text.index("第二")  # 「第一句没有完。」 ends 4 characters on
    assert sentence_end(text, text.index("第二"), 40) == text.index("第二")  # already at a sentence's start
    assert sentence_end(text, text.index("第二") + 2, 5) == text.index("第二") + 2  # its end is past the reach
    assert sentence_end(text, text.index("| 值"), 10) == len(text)  # a row ends at its line break
