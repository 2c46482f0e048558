"""Aliases mined from the corpus: each naming pattern, confirmation by co-occurrence, the merge of a
re-run, query expansion in the keyword lists, and access: an alias mined only from a hidden
document is neither used nor shown for a reader without its group."""

import uuid
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import pytest
from elasticsearch import Elasticsearch

from core.access import DocumentAccess, Scope
from core.aliases import (
    MAX_PER_BASE,
    MAX_PER_DOCUMENT,
    MAX_PER_TERM,
    Alias,
    AliasSource,
    MinedFrom,
    expansions,
    generic,
    merged,
    mine,
)
from core.documents import Document
from core.embeddings import Embedder
from core.profiles import naming_rules
from core.schema import Mode
from core.store import read_index_meta
from core.text import ChineseTokenizer
from indexing.loaders import split_chapters
from indexing.options import RunScope
from indexing.pipeline import index_documents
from retrieval.retriever import Retriever
from tests.conftest import INDEX_OPTIONS, PARAMS, SANGUO_PATH, delete_indices

NOVEL = naming_rules("classical-novel")  # the classical-novel profile's 字 and 号 (core/profiles)

CORPUS = [
    MinedFrom("c1", "那人姓刘，名备，字玄德。刘备拜谢。玄德曰：“好。”刘备去了。", "第1回"),
    MinedFrom("c2", "却说董卓字仲颖，为人粗猛。董卓大怒，仲颖不听。", "第3回"),
    MinedFrom("c3", "诸葛亮，号卧龙，隐居隆中。卧龙先生也。诸葛亮出山。", "第37回"),
    MinedFrom("c4", "吾姓关名羽，字长生，后改云长。关羽提刀，云长上马，关羽去了，长生者，旧字也。", "第1回"),
    MinedFrom(
        "c5",
        "姓宋名江，表字公明，绰号及时雨。宋江上山，及时雨来也，宋江大喜。李逵绰号黑旋风。黑旋风杀来，李逵大叫。"
        "此人绰号赛仁贵，此人姓郭，赛仁贵也。",
        "第18回",
    ),
    MinedFrom("m1", "世界卫生组织，简称世卫组织。世卫组织发布指南，世界卫生组织建议。", "指南"),
    MinedFrom("m2", "糖化血红蛋白（HbA1c）反映血糖。HbA1c 高于 7%，糖化血红蛋白需复查。", "检验"),
    MinedFrom("m3", "番茄又名西红柿。西红柿炒蛋，番茄汤。", "菜谱"),
    MinedFrom("m4", "甲状腺功能亢进症俗称甲亢。甲亢患者，甲状腺功能亢进症。", "内分泌"),
    MinedFrom("m5", "高血压又称原发性高血压。一次提到的别名：血压病又称压病。高血压，原发性高血压。", "心血管"),
    MinedFrom("m6", "慢阻肺全称慢性阻塞性肺疾病。慢阻肺，慢性阻塞性肺疾病。", "呼吸"),
]


def test_each_naming_pattern_is_mined_with_its_sentence() -> None:
    pairs = {(a.alias, a.name): a.sources[0] for a in mine(CORPUS, ChineseTokenizer(), NOVEL)}
    expected = {
        ("玄德", "刘备"): "c1",  # 姓 … 名 … 字
        ("仲颖", "董卓"): "c2",  # X字Y, the name cut where the corpus says (董卓, not 却说董卓)
        ("卧龙", "诸葛亮"): "c3",  # 号
        ("长生", "关羽"): "c4",
        ("云长", "关羽"): "c4",  # 字 …，后改 …: the courtesy name taken later
        ("及时雨", "宋江"): "c5",  # 姓 … 名 …，表字 …，绰号 …
        ("黑旋风", "李逵"): "c5",  # 绰号: a sobriquet of three characters
        ("世卫组织", "世界卫生组织"): "m1",  # 简称
        ("HbA1c", "糖化血红蛋白"): "m2",  # a term and its equivalent in brackets
        ("西红柿", "番茄"): "m3",  # 又名
        ("甲亢", "甲状腺功能亢进症"): "m4",  # 俗称
        ("原发性高血压", "高血压"): "m5",  # 又称
        ("慢性阻塞性肺疾病", "慢阻肺"): "m6",  # 全称
    }
    for pair, doc_id in expected.items():
        assert pair in pairs, f"{pair} not mined from {pairs}"
        assert pairs[pair].doc_id == doc_id and pair[0] in pairs[pair].sentence
    assert not any(alias == "压病" for alias, _ in pairs)  # stated once, never used: not confirmed
    assert not any(name == "此人" for _, name in pairs)  # a pronoun refers to someone, it names no one
    default = {(a.alias, a.name) for a in mine(CORPUS, ChineseTokenizer())}
    modern = {pair for pair, source in pairs.items() if source.doc_id.startswith("m")}
    assert default == modern  # without the profile: the modern patterns only, no 字 or 号


GIVEN = [
    MinedFrom(
        "g1",
        "却说赵衡有三子：长子名昂，字伯起；次子名朗，字仲明。赵昂骑马，伯起大笑，赵朗读书，仲明不语，赵昂与赵朗同去。",
        "第5回",
    ),
    MinedFrom("g2", "孙越回城，先见友人公良岳。岳字子高，北海人也。公良岳设宴，子高举杯，公良岳去了。", "第9回"),
    MinedFrom("g3", "他参与数据整理，参与数据分析。数字可能出错，数字可能丢失。", "报告"),
]


def test_a_courtesy_name_of_a_given_name_alone_is_mined_with_the_full_name() -> None:
    """「次子名朗，字仲明」 names 赵朗, whom the corpus writes in full; 「岳字子高」 names the one the text just
    wrote ending in 岳 (公良岳: the corpus says where the name starts, no surname list needed). 数字 is a
    word, not 与数 named 可能."""
    pairs = {(a.alias, a.name) for a in mine([*GIVEN, *CORPUS], ChineseTokenizer(), NOVEL)}
    assert {("伯起", "赵昂"), ("仲明", "赵朗"), ("子高", "公良岳")} <= pairs
    assert not any(alias == "可能" for alias, _ in pairs)


MANUAL = MinedFrom(
    "manual",
    "本合同由甲方与乙方（以下简称“用户”）签订。用户应遵守以下条款，乙方应付款。"
    "中华人民共和国个人信息保护法（以下简称“个保法”）适用于本合同。个保法要求数据最小化。"
    "云服务器（Elastic Compute Service，简称ECS）按量计费。ECS可随时释放，云服务器可扩容。"
    "马铃薯（土豆）富含淀粉。土豆切丝，马铃薯炖肉。"
    "超时时间（可选）默认30秒。重试次数（可选）默认3次。超时时间过短，重试次数过多，均属可选。"
    "二甲双胍（一线用药）适用于多数患者。一线用药还有饮食控制，二甲双胍可能引起胃肠反应。"
    "剂量（mg）按体重计算。剂量过大有害，mg为毫克。"
    "关键字查询支持模糊匹配，关键字查询区分大小写。"
    "管理办法（草案）与实施细则（草案）同时发布。管理办法和实施细则均为草案。",
    "用户手册",
)


def test_a_manuals_definitions_are_mined_and_its_remarks_are_not() -> None:
    """Modern documents put definitions and remarks alike in brackets, and use 字 and 号 in words (read
    as words even by the classical-novel profile)."""
    pairs = {(a.alias, a.name) for a in mine([MANUAL], ChineseTokenizer())}
    assert {(a.alias, a.name) for a in mine([MANUAL], ChineseTokenizer(), NOVEL)} == pairs
    # （以下简称“用户”）: 用户 and 乙方 name roles every contract has, not a party (issue 59 point 6)
    assert not {word for pair in pairs for word in pair} & {"用户", "乙方", "以下"}
    assert ("个保法", "中华人民共和国个人信息保护法") in pairs  # the whole name, though written out once
    assert ("ECS", "云服务器") in pairs  # an English name, then its abbreviation
    assert ("土豆", "马铃薯") in pairs  # a noun in brackets, after one term only
    assert not {name for _, name in pairs} & {"以下", "关键"}
    # （草案） follows two terms; 可选 and 一线用药 are no names; mg is a unit; 关键字查询 is no courtesy name
    assert not {alias for alias, _ in pairs} & {"草案", "可选", "一线用药", "mg", "查询"}


ENCYCLOPEDIA = MinedFrom(
    "wiki",
    "鲁迅，原名周树人，浙江绍兴人。周树人留学日本。鲁迅写了很多书。"
    "南京旧称金陵。金陵十二钗。南京夏天很热。"
    "土豆的学名是马铃薯。马铃薯耐寒。土豆丝好吃。"
    "番茄，别名西红柿，原产南美洲。西红柿炒蛋很常见。番茄富含维生素。"
    "榅桲（又名木梨）是一种水果。木梨味酸。榅桲原产中亚。"
    "山东女子学院（原名中华女子学院山东分院）在济南。中华女子学院山东分院建于1995年。山东女子学院很大。"
    "东华学院与西华学院相邻，学院众多。"
    "本站在1900年启用时，原名糠之目。糠之目站很小。新线启用时人很多。"
    "氯化钠的俗名叫食盐。食盐很咸。氯化钠易溶于水。"
    "中央处理器，英文缩写CPU。CPU很热。中央处理器很贵。"
    "苹果公司的正式名称为Apple Inc.。Apple Inc.总部在加州。苹果公司发布手机。"
    "协会的英文名取为「Mercy」，取为此名。协会很大。",
    "百科",
)


def test_an_encyclopedias_other_and_former_names_are_mined() -> None:
    """别名, 学名, 旧称, 原名, 俗名, 英文缩写 (after a name, a comma, a 的, or in brackets) name what comes before; a clause
    before them (本站在1900年启用时，原名…) names nothing, and a name in brackets is the whole one jieba
    reads (山东女子学院), not the corpus's most used end of it (学院)."""
    pairs = {(a.alias, a.name) for a in mine([ENCYCLOPEDIA], ChineseTokenizer())}
    assert {
        ("周树人", "鲁迅"),
        ("金陵", "南京"),
        ("马铃薯", "土豆"),
        ("西红柿", "番茄"),
        ("木梨", "榅桲"),
        ("中华女子学院山东分院", "山东女子学院"),
        ("食盐", "氯化钠"),
        ("CPU", "中央处理器"),
        ("Apple Inc.", "苹果公司"),  # a Latin name runs to its last letter
    } <= pairs
    assert not any(alias in {"糠之目", "取为"} for alias, _ in pairs)  # 英文名 names a Latin name
    assert not any(name == "学院" for _, name in pairs)


def test_a_latin_alias_is_expanded_in_any_letter_case() -> None:
    pairs = mine([MANUAL], ChineseTokenizer())
    found = expansions(pairs, "ecs怎么收费", DocumentAccess(everything=True))
    assert [(e.term, e.expansion) for e in found] == [("ECS", "云服务器")]
    assert expansions(pairs, "云服务器和ecs的区别", DocumentAccess(everything=True)) == []  # both named


def test_a_pair_is_kept_only_when_both_sides_are_names_and_without_a_leading_preposition() -> None:
    """「适用于青禾智能科技有限公司（以下简称“公司”）」 gave 于青禾智能科技有限公司 ↔ 公司 (issue 59 point 6)."""
    handbook = MinedFrom(
        "handbook",
        "本办法适用于青禾智能科技有限公司（以下简称“公司”）全体员工。公司按月发放工资，公司提供培训。"
        "本协议由蓝鲸数据服务有限公司（以下简称“蓝鲸数据”）与员工签订。蓝鲸数据负责体检，蓝鲸数据每年调薪。"
        "服务对象为慢性病人群（以下简称“患者”）。患者应按时服药，患者定期复查。"
        "本店（以下简称“本公司”）出售本产品（以下简称“产品”）。本公司承诺，产品保修，本公司负责。",
        "员工手册",
    )
    tokenizer = ChineseTokenizer()
    pairs = {(a.alias, a.name) for a in mine([handbook], tokenizer)}
    assert pairs == {("蓝鲸数据", "蓝鲸数据服务有限公司")}  # 由 cut off; 公司, 患者, 本公司, 产品 are roles
    assert [generic(word, tokenizer) for word in ("公司", "本公司", "患者", "本人", "用户", "本产品")] == [True] * 6
    assert not any(generic(word, tokenizer) for word in ("刘备", "玄德", "番茄", "高血压", "世卫组织", "ECS"))


def test_aliases_are_capped_per_document_per_base_and_per_term() -> None:
    """One text declaring 2,000 names for one word (the attack of issue 58) gives at most the caps."""
    planted = "".join(f"青禾智能科技有限公司（以下简称“青禾{n}”）。青禾{n}，青禾{n}。" for n in range(300))
    pairs = mine([MinedFrom("planted", planted, "x")], ChineseTokenizer())
    assert len(pairs) == MAX_PER_DOCUMENT
    many = [Alias(f"别名{n}", "糖化血红蛋白", (AliasSource("句", f"d{n}", "x"),)) for n in range(MAX_PER_BASE + 50)]
    admin = Alias("HbA1c", "糖化血红蛋白", (), origin="admin")
    kept = merged([*many, admin], [], set())
    assert len(kept) == MAX_PER_BASE and kept[0] == admin  # an admin's pair is never the one dropped
    found = expansions(kept, "糖化血红蛋白高怎么办", DocumentAccess(everything=True))
    assert len(found) == MAX_PER_TERM and found[0].expansion == "HbA1c"


def test_an_upload_under_a_hidden_documents_id_leaves_its_aliases() -> None:
    """A run that may not read a document's sources (its groups) neither replaces nor removes them."""
    hidden = Alias("孔明", "诸葛亮", (AliasSource("字孔明", "secret", "第40回", ("strategists",)),))
    public = Alias("玄德", "刘备", (AliasSource("字玄德", "intro", "第1回"),))
    writer = DocumentAccess()  # reads only documents without groups
    kept = merged([hidden, public], [], {"secret", "intro"}, writer)
    assert [(a.alias, a.sources) for a in kept] == [("孔明", hidden.sources)]  # intro was the writer's to replace
    assert merged([hidden], [], {"secret"}, DocumentAccess(frozenset({"strategists"}))) == []


def test_a_rerun_replaces_its_documents_aliases_and_keeps_an_admins() -> None:
    old = [
        Alias("玄德", "刘备", (AliasSource("旧句", "c1", "第1回"),)),
        Alias("皇叔", "刘备", (), origin="admin"),
        Alias("仲颖", "董卓", (AliasSource("句", "c2", "第3回"),)),
    ]
    new = merged(old, [Alias("玄德", "刘备", (AliasSource("新句", "c1", "第1回"),))], {"c1", "c2"})
    assert {(a.alias, a.name): [s.sentence for s in a.sources] for a in new} == {
        ("玄德", "刘备"): ["新句"],
        ("皇叔", "刘备"): [],
    }


DOCUMENTS = [
    Document("intro", "那人姓刘，名备，字玄德。刘备拜谢众人，刘备上马。", "a.txt", chapter=1),
    Document("deeds", "玄德三顾茅庐，请得军师出山。", "a.txt", chapter=38),
    Document(
        "secret", "军师姓诸葛，名亮，字孔明。诸葛亮夜观天象，诸葛亮入帐。", "b.txt", chapter=40, access=["strategists"]
    ),
    Document("public", "孔明借东风，火烧赤壁。", "c.txt", chapter=49),
]


@pytest.fixture(scope="module")
def base(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    alias = f"test-aliases-{uuid.uuid4().hex[:10]}"
    summary = index_documents(
        es,
        DOCUMENTS,
        alias=alias,
        visible=DocumentAccess(everything=True),
        embedder=embedder,
        tokenizer=ChineseTokenizer(),
        options=replace(INDEX_OPTIONS, profile="classical-novel"),
    )
    assert summary.failed == 0
    yield alias
    delete_indices(es, alias)


@pytest.fixture(scope="module")
def retriever(es: Elasticsearch, embedder: Embedder) -> Retriever:
    return Retriever(es, embedder, ChineseTokenizer(), replace(PARAMS, alias_weight=1.0))


def test_aliases_are_stored_with_the_base_with_their_source(es: Elasticsearch, base: str) -> None:
    stored = {(a.alias, a.name): a for a in read_index_meta(es, base).aliases}
    assert stored[("玄德", "刘备")].sources[0].doc_id == "intro"
    assert stored[("孔明", "诸葛亮")].sources[0].access == ("strategists",)


def test_a_query_by_one_name_finds_the_passage_that_uses_the_other(retriever: Retriever, base: str) -> None:
    result = retriever.search(Scope.whole(base), "刘备的事迹", Mode.BM25, 5)
    assert "deeds" in {hit.doc_id for hit in result.hits}  # says 玄德 only
    assert [(e.term, e.expansion) for e in result.expansions] == [("刘备", "玄德")]
    assert "第1章" in result.expansions[0].source and "字玄德" in result.expansions[0].source
    # Each hit's explanation names the expansions it holds: the chunk that says only 玄德 was found by it.
    by_doc = {hit.doc_id: hit for hit in result.hits}
    assert [(e.term, e.expansion) for e in by_doc["deeds"].expansions] == [("刘备", "玄德")]
    assert all(all(e.expansion in hit.text for e in hit.expansions) for hit in result.hits)
    plain = Retriever(retriever.es, retriever.embedder, ChineseTokenizer(), replace(PARAMS, alias_weight=0.0))
    assert "deeds" not in {hit.doc_id for hit in plain.search(Scope.whole(base), "刘备的事迹", Mode.BM25, 5).hits}


def test_an_alias_from_a_hidden_document_is_neither_used_nor_shown(retriever: Retriever, base: str) -> None:
    query = "诸葛亮"
    public = retriever.search(Scope(base, DocumentAccess()), query, Mode.HYBRID, 5)
    assert public.expansions == []  # 孔明 was learnt only from the hidden document
    assert "字孔明" not in public.model_dump_json()  # nor is the sentence it was learnt from shown
    assert [hit.doc_id for hit in retriever.search(Scope(base, DocumentAccess()), query, Mode.BM25, 5).hits] == []
    allowed = Scope(base, DocumentAccess(frozenset({"strategists"})))
    seen = retriever.search(allowed, query, Mode.BM25, 5)
    assert [(e.term, e.expansion) for e in seen.expansions] == [("诸葛亮", "孔明")]
    assert "public" in {hit.doc_id for hit in seen.hits}
    assert [(e.term, e.expansion) for hit in seen.hits if hit.doc_id == "public" for e in hit.expansions] == [
        ("诸葛亮", "孔明")
    ]


# What main's miner (字 and 号 on every base) found in the novel's first 12 chapters before the patterns
# moved into the classical-novel profile: the profile must find the same.
SANGUO_COURTESY_NAMES = {
    ("云长", "关羽"), ("元龙", "陈登"), ("奉先", "吕布"), ("子仲", "糜竺"), ("子龙", "赵云"), ("孟德", "曹操"),
    ("恭祖", "陶谦"), ("文举", "孔融"), ("文台", "孙坚"), ("景升", "刘表"), ("本初", "袁绍"), ("玄德", "刘备"),
    ("翼德", "张飞"),
}  # fmt: skip


def test_the_novels_courtesy_names_are_mined_with_its_profile_only() -> None:
    chapters = split_chapters(
        SANGUO_PATH.read_text(encoding="utf-8"), source="sanguo_yanyi.txt", title="三国演义", marks="章回"
    )
    documents = [MinedFrom(d.doc_id, d.text, str(d.chapter)) for d in chapters[:12]]
    tokenizer = ChineseTokenizer()
    assert {(a.alias, a.name) for a in mine(documents, tokenizer, NOVEL)} == SANGUO_COURTESY_NAMES
    assert not {(a.alias, a.name) for a in mine(documents, tokenizer)} & SANGUO_COURTESY_NAMES


def test_a_run_mines_with_the_profile_it_sets_or_the_one_the_base_stores(es: Elasticsearch, embedder: Embedder) -> None:
    """The profile is stored before the aliases are mined (python -m indexing --profile); a re-run or a
    rebuild without one mines with the base's (a rebuild carries it to its new index); "" turns it off."""
    alias = f"test-aliases-profile-{uuid.uuid4().hex[:10]}"
    run = partial(
        index_documents, es, DOCUMENTS[:2], alias=alias, visible=DocumentAccess(everything=True), embedder=embedder,
        tokenizer=ChineseTokenizer(),
    )  # fmt: skip

    def stored() -> tuple[str | None, set[tuple[str, str]]]:
        meta = read_index_meta(es, alias)
        return meta.kb.get("profile"), {(a.alias, a.name) for a in meta.aliases}

    try:
        run(options=INDEX_OPTIONS)
        assert stored() == (None, set())  # the default path reads no 字
        run(options=replace(INDEX_OPTIONS, profile="classical-novel"))
        assert stored() == ("classical-novel", {("玄德", "刘备")})
        run(options=INDEX_OPTIONS, scope=RunScope(recreate=True))
        assert stored() == ("classical-novel", {("玄德", "刘备")})
        run(options=replace(INDEX_OPTIONS, profile=""))
        assert stored() == (None, set())
    finally:
        delete_indices(es, alias)
