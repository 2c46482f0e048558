"""What the local title and follow-ups are made of, on the project's own 三国 questions.

For each question of `bench/data/sanguo_questions.jsonl` (the test split first, `--questions` of
them), the conversation is the question and an extractive answer that quotes its evidence with
the sentences around it (the chapter's text, `--window` characters either side), as the service
answers without a model. The corpus dictionary is the one the indexing job learns from the whole
book (`core.lexicon.discover_terms`, as `indexing/dictionary.py` does). Then:

- follow-ups: the share whose subject (the name it asks about) is a term of that dictionary;
- titles: the share that keep every dictionary term the question names, and the share free of
  question words (几, 多少, 什么, …), which a title never needs.

`--before REF` measures the task answers of another revision too (its `chat_tasks.py`, read
with `git show`), on the same conversations:

    python -m bench.chat_task_terms --questions 50 --before main
"""

import argparse
import json
import re
import subprocess
import types
from collections.abc import Callable
from pathlib import Path

from bench.datasets import BENCH_DATA, read_jsonl, sanguo_book
from core.lexicon import discover_terms
from core.text import ChineseTokenizer, get_tokenizer, stopwords

_SUBJECT = re.compile(r"^(?:资料里关于)?(.+?)(?:还说了什么|还有哪些记载|还讲了哪些内容|和.+?是什么关系|是谁)？$")
_QUESTION_WORDS = re.compile(r"几|多少|什么|哪|谁|怎|如何|为何|为什么|吗")
Tasks = types.ModuleType


def conversations(count: int, window: int) -> list[tuple[str, str]]:
    """(question, extractive answer quoting the evidence in context), test split first."""
    book = sanguo_book().read_text(encoding="utf-8")
    items = sorted(read_jsonl(BENCH_DATA / "sanguo_questions.jsonl"), key=lambda item: item["split"] != "test")
    found = []
    for item in items[:count]:
        at = book.find(item["evidence"])
        quote = book[max(0, at - window) : at + len(item["evidence"]) + window].replace("\n", "")
        answer = f"（抽取式回答：未使用大模型，以下句子均为资料原文摘录）\n「{quote}」[1]\n\n---\n**来源**\n- [1] 第{item['chapter']}回 · sanguo"
        found.append((item["question"], answer))
    return found


def revision(ref: str | None) -> Tasks:
    """The service's task answers (`service/http/protocols/chat_tasks.py`) as they are in the work
    tree (None) or at the git revision `ref`, loaded from source: bench imports no service code."""
    path = "service/http/protocols/chat_tasks.py"
    if ref is None:
        source = (Path(__file__).resolve().parent.parent / path).read_text(encoding="utf-8")
    else:
        source = subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, text=True, check=True).stdout
    module = types.ModuleType(f"chat_tasks_{ref or 'now'}")
    exec(compile(source, f"{ref or 'work tree'}:{path}", "exec"), module.__dict__)  # our own code
    return module


def measure(tasks: Tasks, talks: list[tuple[str, str]], tokenizer: ChineseTokenizer) -> dict[str, object]:
    terms = set(tokenizer.corpus_terms)
    follow: Callable[[list[str], str, ChineseTokenizer], list[str]] = tasks.follow_ups
    title: Callable[[str, ChineseTokenizer], str] = tasks.title
    subjects, titles, examples = [], [], []
    for question, answer in talks:
        asked = follow([question], answer, tokenizer)
        named = [(m[1] if (m := _SUBJECT.match(text)) else text) for text in asked]
        subjects += [name in terms for name in named]
        named_in_question = [term for term in terms if term in question and len(term) > 1 and term not in stopwords()]
        made = title(question, tokenizer)
        titles.append((all(term in made for term in named_in_question), not _QUESTION_WORDS.search(made)))
        examples.append({"question": question, "title": made, "follow_ups": asked})
    return {
        "follow_ups": len(subjects),
        "follow_ups_on_dictionary_terms": _share(subjects),
        "titles_keeping_dictionary_terms": _share([kept for kept, _ in titles]),
        "titles_without_question_words": _share([clean for _, clean in titles]),
        "examples": examples[:8],
    }


def _share(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)} = {sum(flags) / max(len(flags), 1):.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--window", type=int, default=60, help="characters quoted either side of the evidence")
    parser.add_argument("--before", help="a git revision to measure too (e.g. main)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/chat_task_terms.json"))
    args = parser.parse_args()
    book = sanguo_book().read_text(encoding="utf-8")
    edge_stop = frozenset(word for word in stopwords() if len(word) == 1)
    tokenizer = get_tokenizer(None, tuple(discover_terms([book], edge_stop=edge_stop)))
    talks = conversations(args.questions, args.window)
    report: dict[str, object] = {"questions": len(talks), "dictionary_terms": len(tokenizer.corpus_terms)}
    report["after"] = measure(revision(None), talks, tokenizer)
    if args.before:
        report[f"before ({args.before})"] = measure(revision(args.before), talks, tokenizer)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items()}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
