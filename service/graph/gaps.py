"""`python -m service.graph.gaps`: the knowledge-gap report from the judgement log.

Prints the most frequent aspects the knowledge base was missing and the share of questions
that needed the web, for one knowledge base (settings from the environment / `.env`; `--index` overrides
`JUDGEMENTS_INDEX`).
"""

import argparse
import sys

from core.config import Settings
from core.store import create_client
from service.graph.memory import VerdictScope, knowledge_gap_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.graph.gaps", description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20, help="how many missing aspects to list")
    parser.add_argument("--kb", help="knowledge base (default: ES_INDEX)")
    parser.add_argument("--index", help="judgement log index (default: JUDGEMENTS_INDEX)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    settings = Settings()
    if args.index:
        settings = settings.model_copy(update={"judgements_index": args.index})
    es = create_client(settings)
    try:
        report = knowledge_gap_report(es, settings, VerdictScope(args.kb or settings.es_index, "*"), top=args.top)
    finally:
        es.close()
    if args.json:
        print(report.model_dump_json())
        return 0
    print(f"judgement log {report.index}: {report.evaluations} evaluations, {report.total_questions} questions")
    print(f"questions that needed the web: {report.questions_needing_web} ({report.web_share:.0%})")
    print("most frequent missing aspects:" if report.top_missing else "no missing aspects recorded")
    for gap in report.top_missing:
        print(f"  {gap.count:5d}  {gap.aspect}")
    if report.conflicts:
        print("these sources disagree:")
    for conflict in report.conflicts:
        print(f"  {conflict.count:5d}  {conflict.claim}: {' / '.join(conflict.sources)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
