"""Each base calibrates itself (evaluation/calibration.py), on a real base in Elasticsearch: the questions
it makes about itself are the same every time and of every kind; over HTTP a calibration is stored, shown
(its provenance to admins only), used by the base's extractive answers, and undone by one call; a caller
who may not read the base gets what an absent base gets."""

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.kbs import read_kb, write_calibration
from core.reader import Reader
from evaluation.calibration import ANSWERABLE_KINDS, NEGATIVE_KINDS, Observed, Probe, choose, self_made
from evaluation.calibration import Figures as PartFigures
from retrieval.extractive import Thresholds
from retrieval.retriever import build_retriever
from service.app import create_app
from tests.conftest import TEST_INDICES, knowledge_base
from tests.protocols import write_keys_file
from tests.serving import serve

GUIDE = [
    "空腹血糖是指至少8小时未进食后测得的血糖。空腹血糖在7.0毫摩尔每升以上可诊断为糖尿病。",
    "低血糖是指血糖低于3.9毫摩尔每升。出现低血糖时应立即进食15克含糖食物，15分钟后复测血糖。",
    "胰岛素笔开封后可在室温下保存28天。未开封的胰岛素应放在2至8摄氏度的冷藏室，切勿冷冻。",
    "糖化血红蛋白是反映近3个月平均血糖的指标。多数成人的控制目标为低于7%。",
    "每周至少进行150分钟中等强度的运动。运动前血糖低于5.6毫摩尔每升时应先加餐。",
    "二甲双胍是常用的口服降糖药。肾功能不全的患者服用前须咨询医生，每日剂量一般不超过2000毫克。",
]
MANUAL = [
    "扫地机器人的电池容量是5200毫安时。满电可连续清扫150分钟，电量低于15%时自动回充。",
    "主刷建议每6个月更换一次，边刷建议每3个月更换一次。滤网是可水洗的，晾干24小时后才能装回。",
    "错误码E1是指左轮被卡住。错误码E2是指尘盒未安装。首次使用前请充电5小时以上。",
    "水箱容量为300毫升，拖地模式下可连续工作90分钟。请勿在地毯上开启拖地模式。",
]
DOCUMENTS = [Document(doc_id=f"guide-{n}", text=text, source=f"guide-{n}.md") for n, text in enumerate(GUIDE)] + [
    Document(doc_id=f"manual-{n}", text=text, source=f"manual-{n}.md") for n, text in enumerate(MANUAL)
]
ASKED = {"question": "出现低血糖时应进食多少克含糖食物？", "mode": "hybrid"}
UNCONFIRMED = "无法从上下文确认"
# The base's own question set: ten answerable questions, each with its evidence.
OWN = [
    ("空腹血糖多少可以诊断糖尿病？", "空腹血糖在7.0毫摩尔每升以上可诊断为糖尿病"),
    ("血糖多低算低血糖？", "低血糖是指血糖低于3.9毫摩尔每升"),
    ("开封的胰岛素笔能放多久？", "胰岛素笔开封后可在室温下保存28天"),
    ("糖化血红蛋白反映什么？", "糖化血红蛋白是反映近3个月平均血糖的指标"),
    ("每周运动多长时间？", "每周至少进行150分钟中等强度的运动"),
    ("二甲双胍每天最多吃多少？", "每日剂量一般不超过2000毫克"),
    ("扫地机器人电池多大？", "扫地机器人的电池容量是5200毫安时"),
    ("主刷多久换一次？", "主刷建议每6个月更换一次"),
    ("E2是什么故障？", "错误码E2是指尘盒未安装"),
    ("水箱能装多少水？", "水箱容量为300毫升"),
]


@pytest.fixture(scope="module")
def base(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, DOCUMENTS, "test-calibration") as name:
        yield name
        es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=name)


def test_self_made_questions_are_the_same_every_time_and_of_every_kind(
    es: Elasticsearch, embedder: Embedder, base: str, settings: Settings
) -> None:
    retriever = build_retriever(settings, es, embedder)
    scope = Scope.whole(base)
    tokenizer = retriever.index_tokenizer(scope)

    def made(seed: int) -> list[Probe]:
        return self_made(Reader(es, scope), tokenizer, lambda terms: retriever.terms_held(scope, terms), 12, seed)

    first = made(59)
    assert first == made(59)
    assert set(Counter(p.kind for p in first)) == {*ANSWERABLE_KINDS, *NEGATIVE_KINDS}, first
    answerable = [p for p in first if p.answerable]
    assert 0 < len(answerable) <= 12 and 0 < len(first) - len(answerable) <= 12
    # an answerable one is its own chunk's sentence asked; a figure is asked with 多少, changed in its negative
    figure = next(p for p in answerable if p.kind == "figure")
    assert "多少" in figure.question and len(figure.relevant) == 1
    changed = next(p for p in first if p.kind == "changed_figure")
    assert changed.question.endswith("吗？") and not changed.answerable
    # each question about what the base lacks holds a word the base never holds
    for probe in (p for p in first if p.kind in ("absent_attribute", "foreign_term")):
        words = tokenizer.content_words(probe.question)
        assert any(not retriever.terms_held(scope, [word]) for word in words), probe


def test_the_rule_keeps_the_defaults_without_enough_questions_and_moves_when_it_gains() -> None:
    limits = replace(Thresholds.from_settings(Settings(_env_file=None)), min_similarity=0.89, min_coverage=0.1)
    yes, no = Probe("问", True, "figure"), Probe("问", False, "changed_figure")
    # answerable questions at .93, those to refuse at .90: the defaults (.89) answer both
    observed = [Observed(yes, (PartFigures(0.93, 1.0),))] * 12 + [Observed(no, (PartFigures(0.90, 1.0),))] * 12
    similarity, coverage, note = choose(observed, limits)
    assert 0.90 < similarity <= 0.93 and coverage == 0.1, note
    assert choose(observed[:5] + observed[12:], limits)[:2] == (0.89, 0.1)  # 5 answerable: too few
    forced = [Observed(no, (PartFigures(0.95, 1.0, forced=False),))] * 12  # refused whatever the threshold
    assert choose(observed[:12] + forced, limits)[:2] == (0.89, 0.1)


def _absent_alike(first: httpx.Response, second: httpx.Response, names: tuple[str, str]) -> None:
    assert first.status_code == second.status_code == 404
    assert first.json() == json.loads(second.text.replace(names[1], names[0]))


def test_calibration_is_stored_shown_used_and_undone(
    es: Elasticsearch, es_url: str, embedder: Embedder, base: str
) -> None:
    keys = write_keys_file(
        [
            {"name": "admin", "key": "key-admin", "kbs": {base: "admin"}},
            {"name": "reader", "key": "key-read", "kbs": {base: "read"}},
            {"name": "stranger", "key": "key-other", "kbs": {"test-calibration-elsewhere": "admin"}},
        ]
    )
    settings = Settings(_env_file=None, es_url=es_url, es_index=base, keys_file=keys, answer_mode="extractive")
    admin, reader, stranger = ({"X-API-Key": k} for k in ("key-admin", "key-read", "key-other"))
    absent = f"test-calibration-absent-{uuid.uuid4().hex[:6]}"
    with serve(create_app(settings, embedder=embedder)) as url, httpx.Client(base_url=url, timeout=300) as client:
        assert client.get(f"/kbs/{base}", headers=admin).json()["calibration"] is None
        assert UNCONFIRMED not in client.post(f"/query?kb={base}", json=ASKED, headers=admin).json()["answer"]
        assert client.post(f"/kbs/{base}/calibration", json={"count": 10}, headers=reader).status_code == 403
        for method in ("POST", "DELETE"):  # a base the caller may not read is answered as an absent one
            hidden = client.request(method, f"/kbs/{base}/calibration", headers=stranger)
            _absent_alike(
                hidden, client.request(method, f"/kbs/{absent}/calibration", headers=stranger), (base, absent)
            )
        bad = client.post(f"/kbs/{base}/calibration", json={"count": 1000}, headers=admin)
        assert bad.status_code == 422 and "count" in bad.json()["message"]
        done = client.post(f"/kbs/{base}/calibration", json={"count": 10}, headers=admin)
        assert done.status_code == 200, done.text
        chosen = done.json()["calibration"]
        assert chosen["source"] == "self-made" and chosen["answerable"] > 0 and chosen["negative"] > 0
        assert chosen["at_defaults"]["answerable"] == chosen["answerable"] and chosen["note"]
        shown = client.get(f"/kbs/{base}", headers=admin).json()["calibration"]
        assert shown == chosen
        seen = client.get(f"/kbs/{base}", headers=reader).json()["calibration"]  # values, not provenance
        assert seen["min_similarity"] == chosen["min_similarity"] and seen["note"] == "" and seen["at_chosen"] is None
        check_the_answer_uses_it(client, es, base)
        assert client.delete(f"/kbs/{base}/calibration", headers=admin).json()["calibration"] is None
        assert client.get(f"/kbs/{base}", headers=admin).json()["calibration"] is None
        assert read_kb(es, base, settings).calibration is None
        assert (
            UNCONFIRMED not in client.post(f"/query?kb={base}", json=ASKED, headers=admin).json()["answer"]
        )  # the defaults again


def check_the_answer_uses_it(client: httpx.Client, es: Elasticsearch, base: str) -> None:
    """A calibration asking more similarity than any quote has turns the answered question into a refusal."""
    stored = read_kb(es, base, Settings(_env_file=None)).calibration
    assert stored is not None
    write_calibration(es, base, replace(stored, min_similarity=1.01))
    client.delete(
        f"/kbs/{base}/fusion", headers={"X-API-Key": "key-admin"}
    )  # a write: the service reads the base again
    refused = client.post(f"/query?kb={base}", json=ASKED, headers={"X-API-Key": "key-admin"}).json()["answer"]
    assert UNCONFIRMED in refused, refused
