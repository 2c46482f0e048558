"""False premises (retrieval/premises.py): a question that takes for granted a success the documents
deny is not answered; the sentence that denies it is quoted, without a model and in the workflow."""

import asyncio

import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.kbs import write_profile
from core.text import get_tokenizer, given_name
from retrieval import extractive, premises
from retrieval.profiles import classical_novel as novel
from retrieval.retriever import build_retriever
from service.graph import QueryOptions, build_deps, run_query
from tests.conftest import knowledge_base

REPORT = "赵阳率军在青石岭与孙越交战，两军相持三日。\n赵阳兵败被擒，押送孙越营中。孙越收兵回城。"


@pytest.mark.parametrize(
    ("part", "subject", "claim"),
    [
        ("关羽在麦城打败吕蒙之后去了哪里", "关羽", "打败"),
        ("马谡守住街亭以后得到了什么封赏", "马谡", "守住"),
        ("吕布在白门楼被曹操赦免后投奔了谁", "吕布", "赦免"),  # 被 … 赦免: still a success for 吕布
        ("于禁在樊城打败关羽后升了什么官", "于禁", "打败"),  # a name may start with 于, 和, 将 …
        ("诸葛亮在五丈原病好之后又打了哪一仗", "诸葛亮", "病好"),  # a recovery, which a death denies
        ("孙越被赵阳救出青石岭后去了哪里", "孙越", "救出"),  # 被 … 救出: 孙越 survived
    ],
)
def test_a_premise_claiming_a_success_is_read(part: str, subject: str, claim: str) -> None:
    premise = novel.premise_of(part)
    assert premise is not None and (premise.subject, premise.claim) == (subject, claim)


def test_a_death_denies_a_recovery() -> None:
    premise = novel.premise_of("赵阳在营中病好之后去了哪里")
    assert premise is not None
    texts = [("camp", "赵阳病重。是夜，赵阳奄然归天。孙越闻之大喜。")]
    assert novel.contradiction(premise, texts, {}) == ("camp", "是夜，赵阳奄然归天。")


def test_a_kinsmans_setback_is_not_the_subjects() -> None:
    """「卓母亦被杀」 is his mother's death, not 董卓's; 「父子皆遇害」 is both of theirs."""
    premise = novel.premise_of("赵阳被孙越救出青石岭后去了哪里")
    assert premise is not None
    assert novel.contradiction(premise, [("a", "赵阳母亦被杀。赵阳子赵平被擒。")], {}) is None
    assert novel.contradiction(premise, [("b", "赵阳父子皆遇害。")], {}) == ("b", "赵阳父子皆遇害。")


def test_a_subject_with_nothing_marking_its_end_is_the_name_the_clause_opens_with() -> None:
    """「赵阳亲征青石岭大胜之后…」: no 在 or 于 ends the subject; the tokenizer reads 赵阳 as a name."""
    part = "赵阳亲征青石岭大胜之后封了谁为大将"
    assert novel.premise_of(part) is None
    premise = novel.premise_of(part, get_tokenizer(None))
    assert premise is not None and (premise.subject, premise.claim) == ("赵阳", "大胜")
    assert novel.contradiction(premise, [("report", REPORT)], {}) == ("report", "赵阳兵败被擒，押送孙越营中。")


@pytest.mark.parametrize(
    "part",
    [
        "诸葛亮为什么说魏延日后一定会造反",  # 日后 is no premise
        "刘备去世后谁继位",  # no success claimed
        "关羽在哪里结义",
        "刘备打败曹操的最后一战在哪里",  # 最后 is no premise
    ],
)
def test_other_parts_take_nothing_for_granted(part: str) -> None:
    assert novel.premise_of(part) is None


def test_a_passive_premise_claims_the_success_for_its_agent() -> None:
    """「孙越在青石岭被赵阳打败之后…」 takes 赵阳's victory for granted, and 赵阳's defeat denies it; a
    captive's question (严颜被张飞擒住后…) is denied only by a setback of the captor's, not the captive's."""
    premise = novel.premise_of("孙越在青石岭被赵阳打败之后去了哪里")
    assert premise is not None and (premise.subject, premise.claim, premise.target) == ("赵阳", "打败", "孙越")
    assert novel.contradiction(premise, [("report", REPORT)], {}) == ("report", "赵阳兵败被擒，押送孙越营中。")
    # The agent's setback must be in the same clause: a later death is not the victory denied.
    later = [("later", "赵阳引兵回城，数年后病故。")]
    assert novel.contradiction(premise, later, {}) is None
    active = novel.premise_of("赵阳在青石岭打败孙越之后去了哪里")
    assert active is not None and novel.contradiction(active, later, {}) is not None
    captive = novel.premise_of("严颜被张飞擒住后说了一句什么硬气的话")
    assert captive is not None and (captive.subject, captive.target) == ("张飞", "严颜")
    assert novel.contradiction(captive, [("b", "严颜兵败被擒，面不改色。")], {}) is None


def test_a_setback_of_the_subject_contradicts_the_premise_by_any_of_its_names() -> None:
    premise = novel.premise_of("赵阳在青石岭打败孙越之后去了哪里")
    assert premise is not None
    texts = [("other", "孙越大胜，班师回城。"), ("report", REPORT)]
    assert novel.contradiction(premise, texts, {}) == ("report", "赵阳兵败被擒，押送孙越营中。")
    by_name = [("report", REPORT.replace("赵阳兵败", "子昂兵败"))]
    assert novel.contradiction(premise, by_name, {}) is None
    assert novel.contradiction(premise, by_name, {"赵阳": ["子昂"]}) is not None
    winner = novel.premise_of("孙越在青石岭打败赵阳之后去了哪里")
    assert winner is not None and novel.contradiction(winner, texts, {}) is None  # 孙越 had no setback


def test_a_setback_under_the_one_character_given_name_contradicts_after_the_full_name() -> None:
    """A narrative names 曹操 in full once and 操 after: 「操自赤壁败后」 denies a victory at 赤壁 (the
    sentence naming him in full comes first when both say it); a setback of the premise's target
    is not the subject's (「布向前，一刀砍下丁原首级」: 丁原's head, and 吕布 did kill him)."""
    premise = novel.premise_of("曹操在赤壁之战大胜之后封了谁为大将军")
    assert premise is not None
    texts = [("a", "众将皆来贺喜。操自赤壁败后，常思报仇。"), ("b", "曹操兵败，走华容道。")]
    assert novel.contradiction(premise, texts[:1], {}) == ("a", "操自赤壁败后，常思报仇。")
    assert novel.contradiction(premise, texts, {}) == ("b", "曹操兵败，走华容道。")
    killer = novel.premise_of("吕布杀了丁原投靠董卓后，愿意认董卓做什么")
    assert killer is not None and killer.target == "丁原投靠董卓"
    assert novel.contradiction(killer, [("c", "布向前，一刀砍下丁原首级。")], {}) is None
    assert novel.contradiction(killer, [("d", "布向前，一刀砍下首级。")], {}) is not None


@pytest.mark.parametrize(
    "sentence",
    [
        "孙越正欲交锋，早被赵阳一刀斩于马下。",  # the subject of 被 is the one named before it
        "两马交处，被赵阳一刀，斩孙越于马下。",  # the loser acts, the subject is its object
        "孙越兵至城下，为赵阳所败。",
        "孙越兵至城下，为子昂所败。",  # the loser by another of its names
    ],
)
def test_the_losers_hand_on_the_subject_denies_its_victory(sentence: str) -> None:
    """「夏侯存打败关羽之后…」 against 「夏侯存…只一合，被云长砍死」: the roles of the premise reversed."""
    premise = novel.premise_of("孙越斩了赵阳之后去了哪里")
    assert premise is not None and (premise.subject, premise.loser) == ("孙越", "赵阳")
    assert novel.contradiction(premise, [("a", sentence)], {"赵阳": ["子昂"]}) == ("a", sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "孙越部将周平正欲交锋，被赵阳一刀斩于马下。",  # someone else undergoes it
        "孙越见赵阳兵至，大笑。",  # both named, nothing overcome
        "孙越帐下之人，多被赵阳部将周平所杀。",
    ],
)
def test_the_losers_hand_on_someone_else_denies_nothing(sentence: str) -> None:
    premise = novel.premise_of("孙越斩了赵阳之后去了哪里")
    assert premise is not None and novel.contradiction(premise, [("a", sentence)], {}) is None


@pytest.mark.parametrize(
    "sentence",
    [
        "周平已被赵阳所杀。",  # right after the name, 所杀 makes it the agent
        "孙越曰：“赵阳勇猛，周平、李通俱为所杀。”",  # no agent named: those named last undergo it
        "赵阳言：未成功，不可退兵。",  # a setback refused is not undergone
        "倘阳败回，汝便闭门。",  # only supposed (by the given name)
        "吾愿斩赵阳首级，献于麾下。",  # only wished for
        "孙越与赵阳交锋，大败而回。",  # 赵阳 is whom the subject of the clause fought
    ],
)
def test_a_setback_the_subject_does_not_undergo_denies_nothing(sentence: str) -> None:
    """「龚都已被夏侯渊所杀」 is no setback of 夏侯渊's; 「马超言：…不可退兵」 none of 马超's."""
    premise = novel.premise_of("赵阳杀了周平之后去了哪里")
    assert premise is not None and novel.contradiction(premise, [("a", sentence)], {}) is None
    undergone = "周平为赵阳所杀。赵阳后为孙越所杀。"
    assert novel.contradiction(premise, [("b", undergone)], {}) == ("b", "赵阳后为孙越所杀。")
    again = "孙越与赵阳交战，不十合，赵阳败走。"  # every mention is read: the second one's setback is its own
    assert novel.contradiction(premise, [("c", again)], {}) == ("c", again)


def test_a_setback_in_a_passage_about_another_event_denies_nothing() -> None:
    """Everyone in a chronicle dies at last: 「后夏侯渊为黄忠所斩」 does not deny 夏侯渊杀了龚都. With the
    tokenizer the premise keeps its scene (青石岭, 孙越), and only a passage naming it can deny it."""
    premise = novel.premise_of("赵阳在青石岭打败孙越之后去了哪里", get_tokenizer(None))
    assert premise is not None and "孙越" in premise.scene
    later = [("later", "数年后，赵阳出猎，为流矢所中，兵败身死。")]
    assert novel.contradiction(premise, later, {}) is None
    assert novel.contradiction(premise, [*later, ("report", REPORT)], {}) == (
        "report",
        "赵阳兵败被擒，押送孙越营中。",
    )


@pytest.mark.parametrize(("name", "given"), [("曹操", "操"), ("诸葛瞻", "瞻"), ("司马懿", "懿"), ("玄德", None)])
def test_the_given_name_is_one_character_after_a_surname(name: str, given: str | None) -> None:
    assert given_name(name) == given


HANDBOOK = [
    ("leave", "婚假为3天，产假按国家规定执行，男员工享有陪产假15天。丧假为3天，限直系亲属。"),
    ("probation", "试用期为三个月，试用期工资为转正工资的90%。"),
    ("drug", "常用的氨氯地平每日服用一次，每次5毫克。"),
    ("annual", "员工入职满一年后享有带薪年假5天，满五年后增至10天。"),
    ("watch", "手表防水等级为5ATM，可在游泳时佩戴，但不可用于潜水。"),
    ("library", "图书馆开放时间为周二至周日9:00至21:00，每周一闭馆。"),
]


@pytest.mark.parametrize(
    ("part", "sentence"),
    [
        ("陪产假延长到30天以后需要提交什么材料", "婚假为3天，产假按国家规定执行，男员工享有陪产假15天。"),
        ("试用期六个月结束后怎么转正", "试用期为三个月，试用期工资为转正工资的90%。"),
        ("氨氯地平一天吃三次的话每次吃多少", "常用的氨氯地平每日服用一次，每次5毫克。"),
        (
            "手表防水等级是10ATM，那可以戴着潜水到多深",
            "手表防水等级为5ATM，可在游泳时佩戴，但不可用于潜水。",
        ),  # a Latin unit
        # a day of the week: the day said to be 闭馆, not the days the same sentence says are open
        ("图书馆每周二闭馆，那周二还能去还书吗", "图书馆开放时间为周二至周日9:00至21:00，每周一闭馆。"),
    ],
)
def test_a_figure_the_documents_give_otherwise_is_a_denied_premise(part: str, sentence: str) -> None:
    found = premises.figure_premise(part, HANDBOOK, get_tokenizer())
    assert found is not None and found.sentence == sentence


@pytest.mark.parametrize(
    "part",
    [
        "工作满五年有几天年假",  # the documents state 五年 too: no contradiction
        "陪产假有几天",  # no figure asked
        "孟获第二次被擒后说了什么",  # an ordinal states no amount
        "试用期的工资打几折",
        "图书馆每周一闭馆，那周一能还书吗",  # the day the documents give
        "图书馆周日开放到几点",  # 周日 is open: said in the same sentence as 周一闭馆
    ],
)
def test_a_figure_the_documents_also_give_or_none_is_no_premise(part: str) -> None:
    assert premises.figure_premise(part, [*HANDBOOK, ("meng", "孟获一次被擒，不服。")], get_tokenizer()) is None


ENCYCLOPEDIA = [
    ("intern", "实习生试用期为一个月。"),  # another value, beside the handbook's 三个月
    ("script", "新加坡曾于1969年自行简化汉字，在1976年后则改用简化字。"),
    ("group", "昌明集团共有五个部门。"),
]


@pytest.mark.parametrize(
    "part",
    [
        "试用期三个月结束后怎么转正",  # one sentence gives 一个月, another the part's 三个月
        "新加坡1974年公布了什么文件",  # a year of the calendar: a subject has many (CMRC gave 170 such denials)
        "昌明集团分成哪两个部门",  # the count asked, not stated
    ],
)
def test_a_figure_some_sentence_gives_or_that_states_no_amount_is_no_premise(part: str) -> None:
    assert premises.figure_premise(part, [*HANDBOOK, *ENCYCLOPEDIA], get_tokenizer()) is None


MANUAL = [
    ("p5", "滤网寿命约为3000小时。请勿在浴室等潮湿环境中使用本机。"),
    ("a3", "设备工作时请勿断电，否则可能导致管路进气。本机不适用于处理海水或工业废水。"),
    ("novel", "赵范曰：“若擒不得赵云，那时任太守投降不迟。”"),
]


@pytest.mark.parametrize(
    ("part", "sentence"),
    [
        ("AirFresh P5 放在浴室里用时应该开哪个模式", "请勿在浴室等潮湿环境中使用本机。"),
        ("用净水器过滤海水以后滤芯多久换一次", "本机不适用于处理海水或工业废水。"),
    ],
)
def test_a_scene_the_documents_forbid_is_a_denied_premise(part: str, sentence: str) -> None:
    found = premises.forbidden_premise(part, MANUAL, get_tokenizer())
    assert found is not None and found.sentence == sentence


@pytest.mark.parametrize(
    "part",
    [
        "净水器工作时突然断电会怎样",  # the forbidden act is asked about, not taken for granted
        "赵云取桂阳时，太守赵范想把谁许配给他",  # 擒不得赵云 forbids nothing; a name does not count
        "平民禁止带刀的规定是什么时候宣布的",  # 什么时候 asks a time, it sets no scene
    ],
)
def test_a_question_about_what_is_forbidden_is_no_premise(part: str) -> None:
    ban = ("ban", "平民禁止带刀是在1871年宣布。")
    assert premises.forbidden_premise(part, [*MANUAL, ban], get_tokenizer()) is None


def test_a_denied_premise_is_quoted_and_not_answered() -> None:
    part = "赵阳在青石岭打败孙越之后去了哪里"
    answered = extractive.PartAnswer(part=part, extracts=[], answered=True, best_similarity=0.95, coverage=1.0)
    denied = extractive.deny_premise(
        answered, [extractive.Source("report", REPORT)], {}, get_tokenizer(), novel.PROFILE
    )
    assert not denied.answered and denied.premise_denied == "赵阳在青石岭打败孙越"
    assert [e.text for e in denied.extracts] == ["赵阳兵败被擒，押送孙越营中。"]
    answer = extractive.compose([denied], {"report": extractive.Quoted(1)}, [])
    assert f"{premises.PREMISE_DENIED}（问题假定「赵阳在青石岭打败孙越」），资料原文：" in answer
    assert "「赵阳兵败被擒，押送孙越营中。」[1]" in answer
    assert f"{extractive.UNCONFIRMED}：{part}" in answer


def test_the_workflow_says_the_documents_deny_the_premise(es: Elasticsearch, embedder: Embedder) -> None:
    """Without a model, over a real base with the classical-novel profile: the false premise is denied with
    its quote; the same question with the premise the documents state is answered as usual; on the same
    base without the profile, the narrative rule does not run."""
    documents = [Document("report", REPORT, "战报.txt"), Document("weather", "青石岭多雾，秋季尤甚。", "地志.txt")]
    with knowledge_base(es, embedder, documents, "test-premises") as alias:
        settings = Settings(_env_file=None, es_index=alias)
        deps = build_deps(settings, es, build_retriever(settings, es, embedder)).for_scope(Scope.whole(alias))
        modern = asyncio.run(run_query(deps, "赵阳在青石岭打败孙越之后去了哪里？", QueryOptions()))
        write_profile(es, alias, novel.NAME)  # what the admin's PATCH /kbs/{kb} stores
        deps = build_deps(settings, es, build_retriever(settings, es, embedder)).for_scope(Scope.whole(alias))
        false = asyncio.run(run_query(deps, "赵阳在青石岭打败孙越之后去了哪里？", QueryOptions()))
        true = asyncio.run(run_query(deps, "孙越在青石岭打败赵阳之后去了哪里？", QueryOptions()))
    assert false.answer_mode == "extractive"
    assert premises.PREMISE_DENIED in false.answer and "「赵阳兵败被擒，押送孙越营中。」[1]" in false.answer
    assert false.evaluations[0].missing == ["赵阳在青石岭打败孙越之后去了哪里"]
    assert premises.PREMISE_DENIED not in true.answer
    assert premises.PREMISE_DENIED not in modern.answer  # without the profile, the narrative rules do not run
