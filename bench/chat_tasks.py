"""Open WebUI's background tasks against a normal question, over `/v1/chat/completions`, in one run.

After every answer Open WebUI asks the same model for a title, tags and follow-up questions
(and, when enabled, search queries). This times each of them, and a normal question, against
`python -m service` without a model (the extractive answer: what every user without a key gets),
on the first `--chapters` chapters of 《三国演义》 indexed into a scratch alias (vectors cached under
.cache/). Each case is sent `--repeat` times after one unmeasured warm-up; the table gives the
median and the slowest, what came back, and the load average, all from the same run.

    python -m bench.chat_tasks --chapters 5 --repeat 5

This module never imports `service`: it talks to it over HTTP, as a client would.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.client_requests import TASKS
from bench.load_test import build_index
from bench.retrieval_eval import RESULTS
from bench.service_process import ServiceProcess
from core.config import Settings

QUESTION = "刘备、关羽、张飞在哪里结义？"
ANSWER = "「刘备、关羽、张飞在桃园结义。」[1]"  # the earlier answer, as the chat history holds it
HISTORY = [("user", QUESTION), ("assistant", ANSWER)]


def cases() -> dict[str, str]:
    """Each case's user message: the question, then every task prompt over the same conversation."""
    return {"question": QUESTION} | {name: build(HISTORY) for name, build in TASKS.items()}


def time_case(client: httpx.Client, message: str, repeat: int) -> dict[str, Any]:
    """One warm-up, then `repeat` timed requests; the last reply's text (shortened) and status."""
    body = {"model": "rag", "messages": [{"role": "user", "content": message}], "stream": False}
    client.post("/v1/chat/completions", json=body)
    seconds, reply = [], httpx.Response(0)
    for _ in range(repeat):
        started = time.perf_counter()
        reply = client.post("/v1/chat/completions", json=body)
        seconds.append(time.perf_counter() - started)
    content = reply.json()["choices"][0]["message"]["content"] if reply.status_code == 200 else reply.text
    return {
        "status": reply.status_code,
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
        "reply": " ".join(str(content).split())[:120],
    }


def markdown(result: dict[str, Any]) -> str:
    question = result["cases"]["question"]["median_s"]
    lines = [
        f"Load average {result['load_average_before']} before, {result['load_average']} after, on {result['cpus']} cores, {result['measured_at']}, "
        f"{result['chapters']} chapters, no model.",
        "",
        "| case | status | median s | max s | median / question | reply |",
        "|---|---|---|---|---|---|",
    ]
    for name, case in result["cases"].items():
        ratio = case["median_s"] / question if question else 0.0
        reply = case["reply"].replace("|", "\\|")
        lines.append(f"| {name} | {case['status']} | {case['median_s']} | {case['max_s']} | {ratio:.2f} | {reply} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chat_tasks", description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", type=int, default=5, help="the first N chapters (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=5, help="timed requests per case (default %(default)s)")
    parser.add_argument("--index", default="bench-chat-tasks", help="scratch alias (default %(default)s)")
    parser.add_argument("--output", type=Path, default=RESULTS / "chat_tasks.json")
    args = parser.parse_args(argv)
    settings = Settings()
    build_index(args.index, args.chapters)
    load_before = [round(load, 2) for load in os.getloadavg()]
    run_id = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="chat-tasks-") as scratch:
        env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")} | {
            "ES_URL": settings.es_url,
            "ES_INDEX": args.index,
            "MODEL_NAME": "",
            "BOCHA_API_KEY": "",
            "JOBS_INDEX": f"bench-chat-tasks-jobs-{run_id}",
            "JUDGEMENTS_INDEX": f"bench-chat-tasks-judgements-{run_id}",
            "ANSWERS_INDEX": f"bench-chat-tasks-answers-{run_id}",
            "LOG_LEVEL": "WARNING",
        }
        service = ServiceProcess(env, Path(scratch), Path(scratch) / "service.log", ready_path="/readyz")
        service.start()
        try:
            with httpx.Client(base_url=service.url, timeout=300) as client:
                timed = {name: time_case(client, message, args.repeat) for name, message in cases().items()}
        finally:
            service.stop()
            for index in (env["JOBS_INDEX"], env["JUDGEMENTS_INDEX"], env["ANSWERS_INDEX"]):
                httpx.delete(f"{settings.es_url.split(',')[0]}/{index}", timeout=30)
    result = {
        "chapters": args.chapters,
        "repeat": args.repeat,
        "cases": timed,
        "load_average_before": load_before,
        "load_average": [round(load, 2) for load in os.getloadavg()],
        "cpus": os.cpu_count(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
