"""Extractive answers (no model): question parts, sentence selection and the verdict in code, and the
workflow end to end on a real Elasticsearch with the opening of chapters 1 and 37 of 《三国演义》.

The answer may contain only quotes of the sources and fixed template phrases: `assert_only_quotes`
checks every line of every answer produced here.
"""

import dataclasses
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.config import Settings
from core.embeddings import Embedder
from core.text import get_tokenizer
from retrieval import answer_kinds, extractive
from retrieval.premises import PREMISE_DENIED
from retrieval.profiles import classical_novel
from retrieval.results import Hit, interleave
from retrieval.retriever import build_retriever
from service.graph import QueryResult, WorkflowDeps, build_deps
from tests.conftest import ask, sanguo_slices

OATH = "刘备、关羽、张飞在哪里结义？"
UNANSWERABLE = "诸葛亮的手机号码是多少？"
EXTRACTIVE_PATH = ["split_question", "retrieve", "select_evidence", "quote_answer"]


NOVEL = classical_novel.PROFILE
# The novel's sentences are judged with its text profile (its weapons, mounts and units), as a base holding
# it is (retrieval/profiles); the default path's own figures are tested in tests/test_premises_general.py.
select_novel = partial(extractive.select, profile=NOVEL)


# --- units ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        (OATH, ["刘备、关羽、张飞在哪里结义"]),
        ("刘备以及关羽在哪里结义？", ["刘备以及关羽在哪里结义"]),  # "刘备" asks nothing: no cut
        ("诸葛亮住在哪里？另外，关羽用什么兵器？", ["诸葛亮住在哪里", "关羽用什么兵器"]),
        ("张角是谁；并且董卓在哪个园子召集百官？", ["张角是谁", "董卓在哪个园子召集百官"]),
        ("张角是谁？他的口号是什么？", ["张角是谁", "他的口号是什么"]),
        ("关羽用什么兵器，并且有多重？", ["关羽用什么兵器并且有多重"]),  # no subject of its own: kept together
        ("桃园结义的是哪三个人？请给出来源链接。", ["桃园结义的是哪三个人", "请给出来源链接"]),
        ("我在读三国。刘备在哪里结义？", ["我在读三国。刘备在哪里结义"]),
        # The same asked of several subjects: one part each (each part is quoted on its own).
        ("刘备、关羽、张飞各自用什么兵器？", ["刘备用什么兵器", "关羽用什么兵器", "张飞用什么兵器"]),
        ("高血糖和低血糖分别有什么症状？", ["高血糖有什么症状", "低血糖有什么症状"]),
        ("十八路诸侯各带了多少兵马？", ["十八路诸侯各带了多少兵马"]),  # one subject: nothing to distribute
        ("刘备、关羽、张飞各自的兵器有多重？", ["刘备的兵器有多重", "关羽的兵器有多重", "张飞的兵器有多重"]),
        ("刘备与孙夫人分别后去了哪里？", ["刘备与孙夫人分别后去了哪里"]),  # 分别, the verb: to part
    ],
)
def test_split_question_on_conjunctions_and_punctuation(question: str, parts: list[str]) -> None:
    assert extractive.split_question(question) == parts


def test_a_part_opening_with_a_pronoun_is_searched_with_the_part_before() -> None:
    parts = ["张角是谁", "他的口号是什么", "请给出来源链接", "这把刀有多重"]
    assert extractive.search_texts(parts, "张角是谁？他的口号是什么？请给出来源链接。这把刀有多重？") == [
        ["张角是谁"],
        ["张角是谁 他的口号是什么"],
        ["请给出来源链接"],
        ["这把刀有多重"],  # the part before is a link request: nothing to carry
    ]


@pytest.mark.parametrize(
    ("question", "texts"),
    [
        (
            "刘备、关羽、张飞各自用什么兵器？",
            [[f"{name}用什么兵器", "刘备、关羽、张飞用什么兵器"] for name in ("刘备", "关羽", "张飞")],
        ),
        (
            "高血糖和低血糖分别有什么症状？",
            [[f"{n}有什么症状", "高血糖、低血糖有什么症状"] for n in ("高血糖", "低血糖")],
        ),
        (
            "张角是谁？刘备和关羽各用什么兵器？",
            [["张角是谁"], ["刘备用什么兵器", "刘备、关羽用什么兵器"], ["关羽用什么兵器", "刘备、关羽用什么兵器"]],
        ),
        ("曹操是谁？刘备是谁？", [["曹操是谁"], ["刘备是谁"]]),  # two questions alike, not one distributed
    ],
)
def test_the_parts_of_a_distributive_clause_are_searched_alone_and_together(
    question: str, texts: list[list[str]]
) -> None:
    """Searched alone, 刘备用什么兵器 finds the weapons in 孙夫人's room; with its siblings, the one
    sentence naming the three weapons, which each part then quotes for itself. 曹操字什么 alone finds
    his 字, which the clause misses: both searches, their hits interleaved."""
    assert extractive.search_texts(extractive.split_question(question), question) == texts


def test_split_question_keeps_every_part_within_the_limit() -> None:
    question = "".join(f"第{i}个人是谁？" for i in range(1, 11))
    parts = extractive.split_question(question, max_parts=3)
    assert len(parts) == 3 and parts[:2] == ["第1个人是谁", "第2个人是谁"]
    assert all(f"第{i}个人是谁" in parts[2] for i in range(3, 11))  # merged, not dropped


def test_content_terms_drop_question_words_and_coverage_counts_them() -> None:
    terms = extractive.content_terms("关羽用什么兵器？", get_tokenizer())
    assert "什么" not in terms and {"关羽", "兵器"} <= set(terms)
    assert extractive.coverage(["关羽", "兵器"], "关羽提青龙偃月刀") == 0.5
    assert extractive.coverage(["青龙偃月刀"], "云长造青龙偃月刀") == 1.0
    assert extractive.coverage(["偃月宝刀"], "云长造青龙偃月刀") == 0.0


LIU_BEI = extractive.Source("liu", "刘备字玄德，涿郡涿县人。身长七尺五寸，两耳垂肩。生得面如冠玉，唇若涂脂。")


def limits(**changes: Any) -> extractive.Thresholds:
    """The settings' thresholds with `changes` (every verdict threshold open unless changed)."""
    opened: dict[str, Any] = {"min_similarity": 0.0, "min_coverage": 0.0, "max_unknown_terms": 99, **changes}
    return dataclasses.replace(extractive.Thresholds.from_settings(Settings(_env_file=None)), **opened)


def test_a_part_naming_what_no_source_mentions_is_not_answered(embedder: Embedder) -> None:
    """刘备's blood group: the sources share 刘备 with the part, and never mention 血型 (asked without naming
    an attribute, 刘备的血型, which would not be answered whatever the thresholds)."""
    select = partial(select_novel, "刘备是什么血型", [LIU_BEI], embedder, get_tokenizer())
    assert select(limits(max_unknown_terms=1)).answered
    strict = select(limits(max_unknown_terms=0))
    assert strict.unknown == ["血型"] and not strict.answered
    assert select(limits(max_unknown_terms=0)).extracts  # the closest quote is still shown, as such


def test_a_part_naming_someone_the_base_never_mentions_is_not_answered(embedder: Embedder) -> None:
    """李白 on 刘备: every other figure open, the part still is not answered, and the answer says whom
    the documents never mention; a base that names him (held) answers it."""
    select = partial(select_novel, "李白为刘备写过哪首诗", [LIU_BEI], embedder, get_tokenizer(), limits())
    stranger = select(held=lambda terms: set())
    assert stranger.strangers == ["李白"] and not stranger.answered and stranger.extracts
    answer = extractive.compose([stranger], {LIU_BEI.id: extractive.Quoted(1)}, [])
    assert extractive.CLOSEST in answer and "资料中没有提到李白" in answer
    assert select(held=lambda terms: set(terms)).answered


COMPANY = extractive.Source("about", "蓝鲸科技成立于2012年，总部位于成都，创始人为陈启明。公司目前有员工约600人。")


def test_a_part_asking_for_an_attribute_no_document_mentions_is_not_answered(embedder: Embedder) -> None:
    """蓝鲸科技的CEO是谁: the profile names its founder, never a CEO. Every other figure open, the part
    is not answered and the answer says what the documents never mention; an attribute the source
    states (创始人) leaves it to the other figures."""
    select = partial(select_novel, "蓝鲸科技的CEO是谁", [COMPANY], embedder, get_tokenizer(), limits())
    absent = select(held=lambda terms: set())
    assert absent.absent_attribute == "CEO" and absent.unsourced_attribute is None
    assert not absent.answered and absent.extracts
    answer = extractive.compose([absent], {COMPANY.id: extractive.Quoted(1)}, [])
    assert extractive.CLOSEST in answer and "资料中没有提到CEO" in answer
    founder = select_novel("蓝鲸科技的创始人是谁", [COMPANY], embedder, get_tokenizer(), limits(), lambda t: set())
    assert founder.absent_attribute is None and founder.unsourced_attribute is None and founder.answered


GUAN_YU = extractive.Source("guan", "关羽字云长，河东解良人也。身长九尺，髯长二尺，面如重枣。")


def test_a_part_asking_for_an_attribute_its_sources_never_mention_is_not_answered(embedder: Embedder) -> None:
    """关羽的妻子叫什么名字: the base speaks of wives (held), but the passages found about 关羽 never say
    妻子, so no quote of them can name her. The answer says the passages found do not mention it,
    not that the documents never do; a source that mentions her answers."""
    select = partial(select_novel, "关羽的妻子叫什么名字", embedder=embedder, tokenizer=get_tokenizer())
    unsourced = select(sources=[GUAN_YU], limits=limits(), held=lambda terms: set(terms))
    assert unsourced.unsourced_attribute == "妻子" and unsourced.absent_attribute is None
    assert not unsourced.answered and unsourced.extracts
    answer = extractive.compose([unsourced], {GUAN_YU.id: extractive.Quoted(1)}, [])
    assert "找到的原文没有提到所问的妻子" in answer and "资料中没有提到" not in answer
    wife = extractive.Source("wife", "关羽的妻子胡氏，生子关兴。")
    named = select(sources=[GUAN_YU, wife], limits=limits(), held=lambda terms: set(terms))
    assert named.unsourced_attribute is None and named.answered


@pytest.mark.parametrize(
    ("part", "attribute"),
    [
        ("蓝鲸科技的CEO是谁", "CEO"),
        ("他那天的铠甲一共有多少斤重", "铠甲"),  # 一共 is no part of what is asked
        ("A3的保修期到底是多久", "保修期"),
        ("刘备用什么兵器", None),  # asks without naming an attribute
    ],
)
def test_the_attribute_a_part_asks_for(part: str, attribute: str | None) -> None:
    assert answer_kinds.asked_attribute(part) == attribute


@pytest.mark.parametrize(
    ("part", "terms"),
    [
        ("出差回来多久之内要交报销", ["出差", "回来", "之内", "要交", "报销"]),  # 多久: a stop word
        ("工作满五年有几天年假", ["工作", "满", "五年", "年", "假"]),  # 几天: asked, never answered
        ("蓝鲸科技是哪一年成立的", ["蓝鲸", "科技", "成立"]),  # nor its sub-word 一年
        ("试用期工资打几折", ["试用期", "试用", "工资"]),
    ],
)
def test_question_words_glued_to_a_measure_word_are_no_terms(part: str, terms: list[str]) -> None:
    assert extractive.content_terms(part, get_tokenizer()) == terms


def test_letters_cover_a_term_in_any_case() -> None:
    assert extractive.coverage(["flybike", "重量"], "FlyBike E2 整车重量为38公斤。") == 1.0


@pytest.mark.parametrize(
    ("word", "person"),
    [
        ("李白", True),
        ("武则天", True),
        ("诸葛亮", True),
        ("克扣", False),
        ("和尚", False),
        ("延寿", False),
        ("袁尚兵", False),
        ("血型", False),
    ],
)
def test_a_person_is_a_common_name_the_dictionary_tags_as_one(word: str, person: bool) -> None:
    """jieba tags 克扣, 和尚, 延寿 and the glued 袁尚兵 as people too: a surname and some frequency are asked."""
    assert get_tokenizer().is_person(word) is person


def test_a_sentence_the_search_matched_is_preferred(embedder: Embedder) -> None:
    """Two sentences answer alike; the one inside the passage the search matched is quoted first."""
    text = LIU_BEI.text
    second = text.index("身长")
    matched = dataclasses.replace(LIU_BEI, matched=((second, second + 12),))
    select = partial(select_novel, "刘备长什么样", [matched], embedder, get_tokenizer())
    preferred = select(limits(passage_weight=1.0, sentences=1, context=0))
    assert preferred.extracts[0].text == "身长七尺五寸，两耳垂肩。"
    assert select(limits(passage_weight=0.0, sentences=1, context=0)).extracts[0].text != preferred.extracts[0].text


def test_a_quote_far_below_the_best_does_not_pad_the_answer(embedder: Embedder) -> None:
    """Only the tea house's sentence answers; the bridge shares 青岚镇 with the part and scores far below
    it, so it is quoted only when the gap allowed is wide."""
    tea = extractive.Source("tea", "青岚镇的云雾茶社由林晚舟于二〇一五年创办。")
    bridge = extractive.Source("bridge", "白鹭山在青岚镇北面，山上有一座石拱桥，名叫望归桥。")
    select = partial(select_novel, "青岚镇云雾茶社是谁创办的", [bridge, tea], embedder, get_tokenizer())
    assert [e.source_id for e in select(limits(max_gap=0.2)).extracts] == ["tea"]
    wide = select(limits(max_gap=99.0)).extracts
    assert [e.source_id for e in wide] == ["bridge", "tea"]  # no chapters: the order the search ranked them


@pytest.mark.parametrize(
    ("part", "kind", "answer", "not_answer"),
    [
        ("张飞的丈八点钢矛有多重", "重量", "重八十二斤", "张飞造丈八点钢矛"),
        ("孙坚死时多大年纪", "年龄", "坚年三十七", "孙坚死于岘山"),
        ("赤兔马死的时候几岁", "年龄", "寿止三十七岁", "其马数日不食草料而死"),
        ("曹操的青釭剑有多长", "长度", "身长七尺五寸", "青釭剑砍铁如泥"),
        ("诸葛亮在五丈原病了多久", "时长", "病了三个月", "孔明病于五丈原"),
        ("新员工的试用期有多长", "时长", "试用期为三个月", "试用期工资为转正工资的90%"),  # a period, not a length
        ("曹操南下带了多少兵马", "数目", "引兵八十三万", "曹操引大军南下"),
        ("刘备哪一年称帝", "年份或日期", "章武元年", "刘备即皇帝位"),
        ("一台手机多少钱", "金额", "售价3999元", "手机很贵"),
        ("借箭那天江上气温是多少度", "温度", "气温零下3度", "江上大雾"),
        ("诸葛亮的草庐有几间房", "以「间」计的数目", "草庐三间", "造弩十万"),
        ("周瑜要诸葛亮监造多少支箭", "以「支」计的数目", "监造十万枝箭", "限三日造完"),
        ("司马懿每天跑多少公里", "长度", "日行三十里", "每日早起"),
        ("关羽用什么兵器", "兵器", "云长造青龙偃月刀", "云长引兵出城"),
        ("张飞用什么兵器", "兵器", "张飞造丈八点钢矛", "关羽为马弓手，张飞为步弓手，两边伏下刀斧手"),  # soldiers
        ("关羽用什么兵器", "兵器", "黄盖手提铁鞭", "左有云长，右有翼德，扬鞭大骂"),  # a rider's whip is no weapon
        ("刘备有多高", "身高", "身长七尺五寸", "退三十里下寨"),  # a distance is no height
        ("许田打围时曹操骑的是什么马", "坐骑", "操骑爪黄飞电马", "操引众出城打围"),
        ("溶栓要在发病后多久内进行", "时长", "发病4.5小时内", "越早效果越好"),
        ("净水器的额定功率是多少瓦", "功率", "额定功率为60瓦", "额定净水流量为每分钟1.5升"),
        ("出差回来多久之内要交报销", "时长", "出差结束后15个工作日内提交", "报销需附发票原件"),
        ("一次最多能借几本书", "以「本」计的数目", "每次最多可借图书10册", "借期为30天"),  # books: 本 or 册
    ],
)
def test_a_part_asking_for_a_figure_wants_one(part: str, kind: str, answer: str, not_answer: str) -> None:
    asked = answer_kinds.asked_kind(part, NOVEL.kinds)  # the novel's profile: the general kinds and its own
    assert asked is not None and asked.name == kind
    assert answer_kinds.holds(asked, [not_answer, answer])
    assert not answer_kinds.holds(asked, [not_answer])


@pytest.mark.parametrize(
    "part",
    [
        "谁杀了华雄",
        "关羽在哪里结义",
        "曹操为什么退兵",
        "孔明说了什么",
        "拉肚子好几天，是不是缺钾了",  # 好几天, 十几年, 那几天: several, not asked
        "喝了十几年酒，肚子老是隐隐作痛",
        "胰腺炎刚犯的那几天能不能吃东西",
    ],
)
def test_who_where_why_and_what_was_said_are_not_checked(part: str) -> None:
    assert answer_kinds.asked_kind(part) is None and answer_kinds.holds(None, [])


def test_a_part_asking_for_a_weight_no_quote_gives_is_not_answered(embedder: Embedder) -> None:
    """刘备's swords are named, never weighed: the closest quote is shown as such, and the answer says
    which kind of answer the quotes lack; his height is in the same sentences and is answered."""
    swords = extractive.Source("swords", "玄德造双股剑。云长造青龙偃月刀，又名冷艳锯。张飞造丈八点钢矛。")
    weight = select_novel("刘备的双股剑有多重", [swords], embedder, get_tokenizer(), limits())
    assert weight.extracts and not weight.answered and weight.wanted == "重量" and not weight.wanted_found
    answer = extractive.compose([weight], {"swords": extractive.Quoted(1)}, [])
    assert extractive.CLOSEST in answer and "所引原文没有给出所问的重量" in answer
    height = select_novel("刘备有多高", [LIU_BEI], embedder, get_tokenizer(), limits())
    assert height.answered and height.wanted == "身高" and height.wanted_found


def test_a_window_holding_the_kind_of_answer_asked_is_preferred(embedder: Embedder) -> None:
    """Both sentences name the sword; only the second gives a weight, and with the kind's bonus it
    is the quote for 「有多重」 (without the bonus, the sentence sharing more of the part's words wins)."""
    blade = extractive.Source("blade", "关羽的青龙偃月刀，名闻天下，关羽常提此刀。\n此刀又名冷艳锯，重八十二斤。")
    select = partial(select_novel, "关羽的青龙偃月刀有多重", [blade], embedder, get_tokenizer())
    weighed = select(limits(kind_weight=0.5, coverage_weight=0.5, sentences=1, context=0))
    assert weighed.extracts[0].text == "此刀又名冷艳锯，重八十二斤。" and weighed.wanted_found
    named = select(limits(kind_weight=0.0, coverage_weight=0.5, sentences=1, context=0))
    assert named.extracts[0].text != weighed.extracts[0].text and not named.wanted_found


WEAPONS = extractive.Source(
    "weapons", "玄德谢别二客，便命良匠打造双股剑。云长造青龙偃月刀，又名冷艳锯。张飞造丈八点钢矛。"
)
NAMES = {"刘备": ["玄德"], "关羽": ["云长"]}


@pytest.mark.parametrize(
    ("part", "sentence"),
    [
        ("刘备用什么兵器", "玄德谢别二客，便命良匠打造双股剑。"),
        ("关羽用什么兵器", "云长造青龙偃月刀，又名冷艳锯。"),
        ("张飞用什么兵器", "张飞造丈八点钢矛。"),
    ],
)
def test_a_distributed_part_quotes_its_own_sentence_and_it_answers(
    embedder: Embedder, part: str, sentence: str
) -> None:
    """「刘备、关羽、张飞各自用什么兵器？」: one sentence names the three weapons. Each part quotes the
    sentence that names its subject (by any of its names) with a weapon, and that answers it even
    where the similarity gate is shut; the same part asked on its own gets the whole passage and the gate."""
    origin = extractive.distributed("刘备、关羽、张飞各自用什么兵器？")[part]
    select = partial(select_novel, part, [WEAPONS], embedder, get_tokenizer(), limits(min_similarity=0.99))
    distributed = select(names=NAMES, origin=origin)
    assert [e.text for e in distributed.extracts] == [sentence]
    assert distributed.answered and distributed.vouched
    alone = select(names=NAMES)
    assert not alone.answered and not alone.vouched and alone.extracts[0].text == WEAPONS.text


@pytest.mark.parametrize(
    ("part", "text"),
    [
        ("刘备身高多少", "玄德看其人：身长九尺，髯长二尺。"),  # the height is 其人's, not 玄德's
        ("刘备的手机号是多少", "玄德引兵五千，投青州来。"),  # a bare count: any number holds one
        ("刘备身高多少", "玄德兵寡不胜，退三十里下寨。"),  # a distance, not a height
    ],
)
def test_a_distributed_part_is_not_vouched_for_by_a_weak_sentence(embedder: Embedder, part: str, text: str) -> None:
    """A sentence naming the subject vouches for a part only with the specific kind asked, said of the
    subject itself: otherwise the quotes stay whole and the similarity gate decides."""
    origin = extractive.Distributed(subject="刘备", clause="刘备、关羽" + part.removeprefix("刘备"))
    source = extractive.Source("other", text)
    found = select_novel(part, [source], embedder, get_tokenizer(), limits(min_similarity=0.99), None, NAMES, origin)
    assert not found.vouched and not found.answered and found.extracts[0].text == text


def test_a_distributed_part_leaves_out_what_is_said_of_another_subject(embedder: Embedder) -> None:
    """「高血糖和低血糖分别有什么症状？」: the 高血糖 part quotes the 高血糖 passage, not the 低血糖 one
    that the search found for both; asked on its own it quotes both."""
    high = extractive.Source("high", "高血糖是指血液中的葡萄糖浓度过高。常见表现有口渴、喝水多、小便多。")
    low = extractive.Source("low", "低血糖是指血液中的葡萄糖浓度过低。常见表现有心慌、出冷汗、手抖。")
    origin = extractive.distributed("高血糖和低血糖分别有什么症状？")["高血糖有什么症状"]
    assert origin.others == ("低血糖",)
    select = partial(select_novel, "高血糖有什么症状", [low, high], embedder, get_tokenizer(), limits())
    assert [e.source_id for e in select(origin=origin).extracts] == ["high"]
    assert {e.source_id for e in select().extracts} == {"high", "low"}


def test_a_passage_cut_mid_sentence_is_quoted_from_its_sentence_start() -> None:
    """A passage's overlap may open inside a sentence (the last 30 characters of a longer one): its
    quote starts where that sentence does, never mid-word; a passage opening at a sentence stays."""
    text = "StarFit W7 支持心率监测。手表防水等级为5ATM，可在游泳时佩戴，但不可用于潜水或热水淋浴。长按侧键10秒可强制重启。"
    cut = text.index("水等级")  # where a 30-character overlap of the second sentence starts
    second = text.index("长按")
    source = extractive.Source("watch", text, passages=((cut, len(text), 0.9), (second, len(text), 0.8)))
    quoted = [window.text for window in extractive.windows_of([source], context=1)]
    assert quoted == [text[text.index("手表") :], text[second:]]


def test_a_passage_cut_mid_row_or_mid_sentence_is_quoted_to_its_end() -> None:
    """A passage may end inside a table's row (its subject without its figure) or a sentence: its quote
    runs to the end of that row or sentence, not past it; a passage ending at a line's end stays."""
    text = "## 保修期限\n\n| 部件 | 保修期 |\n|---|---|\n| 整机 | 2年 |\n| 锂电池 | 1年 |\n\n保修期从购买之日起计算，凭发票享受保修。"
    row = text.index("| 锂电池") + len("| 锂电池 |")
    sentence = text.index("计算") + 1
    whole = text.index("| 锂电池")
    source = extractive.Source("lock", text, passages=((0, row, 0.9), (whole, sentence, 0.8), (0, whole, 0.7)))
    quoted = [window.text for window in extractive.windows_of([source], context=1)]
    assert quoted[0].endswith("| 锂电池 | 1年 |") and quoted[1].endswith("保修期从购买之日起计算，凭发票享受保修。")
    assert quoted[2].endswith("| 整机 | 2年 |")


def test_a_table_row_is_quoted_its_rule_is_not() -> None:
    """A Markdown table's row is as short and unpunctuated as a heading, yet it is what answers
    (锂电池保修多久: 「| 锂电池 | 1年 |」); the rule under the header is left out like a heading."""
    assert not extractive.is_heading("| 锂电池 | 1年 |") and extractive.is_heading("|---|:---:|")
    assert extractive.is_heading("## 保修期限")
    extract = extractive.Extract(
        text="## 保修期限\n| 部件 | 保修期 |\n|---|---|\n| 锂电池 | 1年 |",
        source_id="a",
        order=(0, 0, 0, 0, 0),
        similarity=0.9,
        coverage=1.0,
        score=1.0,
    )
    assert extractive.quoted_paragraphs(extract) == ["| 部件 | 保修期 |", "| 锂电池 | 1年 |"]


def test_the_hits_of_several_searches_are_interleaved_each_chunk_once() -> None:
    def hits(*ids: str) -> list[Hit]:
        return [Hit(id=i, text=i, source="s", doc_id="d", chunk_index=0, score=1.0) for i in ids]

    assert [h.id for h in interleave([hits("a", "b", "c"), hits("x", "a", "y")], 4)] == ["a", "x", "b", "c"]
    assert [h.id for h in interleave([hits("a"), []], 3)] == ["a"]


def test_a_term_every_window_holds_counts_less_than_one_few_hold() -> None:
    """Coverage in the selection weighs a term by its rarity among the candidates: 曹操 is in all
    three, 青梅 in one, so the window with 青梅 and without 曹操 outscores the one with 曹操 alone."""
    texts = ["曹操引兵出城。", "曹操大笑。", "盘置青梅，一樽煮酒。"]
    rare = extractive.rarity_coverage(["曹操", "青梅"], texts, {})
    plain = [extractive.coverage(["曹操", "青梅"], text) for text in texts]
    assert rare[2] > rare[0] == rare[1] > 0 and plain[0] == plain[2] == 0.5
    assert extractive.rarity_coverage([], texts, {}) == [1.0, 1.0, 1.0]


def test_a_window_naming_the_subject_by_another_name_covers_it(embedder: Embedder) -> None:
    """The part asks about 关羽; the passage that answers calls him 云长. With the base's alias the
    passage covers the part's subject and, holding a weapon too, is quoted first; without it, the
    sentence that repeats 关羽 wins."""
    text = "关羽与众人饮酒，关羽大笑，关羽起身出帐。\n云长造青龙偃月刀，又名冷艳锯。\n张辽引兵出城，曹军大乱。"
    source = extractive.Source("blade", text)
    select = partial(select_novel, "关羽用什么兵器", [source], embedder, get_tokenizer())
    settings = limits(kind_weight=0.2, coverage_weight=2.0, sentences=1, context=0)
    named = select(settings, None, {"关羽": ["云长"]})
    assert named.extracts[0].text == "云长造青龙偃月刀，又名冷艳锯。"
    assert select(settings).extracts[0].text != named.extracts[0].text


# --- the workflow ---------------------------------------------------------------------------


def slices() -> dict[int, str]:
    """Chapter -> the indexed text: what every local quote must be a verbatim part of."""
    return {d.chapter: d.text for d in sanguo_slices() if d.chapter is not None}


@pytest.fixture
def make_deps(
    es: Elasticsearch, embedder: Embedder, sanguo_kb: str, index_name: Callable[[str], str]
) -> Callable[..., WorkflowDeps]:
    judgements = index_name("test-judgements")

    def make() -> WorkflowDeps:
        settings = Settings(_env_file=None, es_index=sanguo_kb, judgements_index=judgements)
        return build_deps(settings, es, build_retriever(settings, es, embedder)).for_scope(
            Scope.whole(settings.es_index)
        )

    return make


_QUOTE = re.compile(r"「(.+)」\[(\d+)\](?:（(https?://\S+)）)?")


def assert_only_quotes(result: QueryResult, local: dict[int, str]) -> None:
    """Every line is a fixed phrase, a numbered question part, a verbatim quote of the source its
    `[n]` cites, a link line of a web result, or the 无法从上下文确认 line naming question parts."""
    cited = {c.number: c for c in result.citations}
    texts = {c.number: (c.snippet if c.kind == "web" else local[c.chapter or 0]) for c in result.citations}
    lines = result.answer.split("\n")
    assert lines[0] == extractive.HEADER
    for line in lines[1:]:
        if line == extractive.CLOSEST:
            continue
        if denied := re.fullmatch(rf"{PREMISE_DENIED}（问题假定「(.+)」），资料原文：", line):
            assert denied.group(1) in result.question, line
            continue
        if numbered := re.fullmatch(r"(\d+)\. (.+)", line):
            assert numbered.group(2) in result.sub_questions, line
        elif line.startswith(extractive.UNCONFIRMED):
            assert re.fullmatch(rf"{extractive.UNCONFIRMED}：(.+)（{extractive.NO_EVIDENCE}.*）。", line), line
            named = line.split("：", 1)[1].split("（", 1)[0].split("；")
            assert all(part in result.sub_questions for part in named), line
        elif quote := _QUOTE.fullmatch(line):
            number = int(quote.group(2))
            assert number in cited, line
            assert quote.group(1) in texts[number], f"{line!r} is not a quote of [{number}]"
            assert quote.group(3) == cited[number].url
        else:
            link = re.fullmatch(r"「(.+)」(https?://\S+)\[(\d+)\]", line)
            assert link is not None, f"{line!r} is neither a quote nor a template phrase"
            citation = cited[int(link.group(3))]
            assert (link.group(1), link.group(2)) == (citation.title, citation.url)


def test_without_a_model_the_answer_quotes_cited_sentences(make_deps) -> None:
    deps = make_deps()
    result = ask(deps, OATH)

    assert (result.answer_mode, result.llm_calls, result.web_calls) == ("extractive", 0, 0)
    assert "未配置大模型" in result.mode_reason
    assert [s.node for s in result.trace] == EXTRACTIVE_PATH
    [verdict] = result.evaluations
    assert (verdict.enough, verdict.source, verdict.missing) == (True, "extractive", [])
    assert "桃园" in result.answer and extractive.UNCONFIRMED not in result.answer
    assert result.citations and all(c.kind == "local" and c.chapter == 1 for c in result.citations)
    assert_only_quotes(result, slices())


def test_each_subject_of_a_distributive_question_gets_its_own_sentence(make_deps) -> None:
    """The question of the issue: the sentence naming the three weapons answers each of the three
    parts, each quoting what it says of its own subject (玄德, 云长: names mined from chapter 1)."""
    result = ask(make_deps(), "刘备、关羽、张飞各自用什么兵器？")
    assert result.sub_questions == ["刘备用什么兵器", "关羽用什么兵器", "张飞用什么兵器"]
    assert extractive.UNCONFIRMED not in result.answer and extractive.CLOSEST not in result.answer
    for sentence in (
        "玄德谢别二客，便命良匠打造双股剑。",
        "云长造青龙偃月刀，又名“冷艳锯”，重八十二斤。",
        "张飞造丈八点钢矛。",
    ):
        assert f"「{sentence}」[" in result.answer
    assert_only_quotes(result, slices())


@pytest.mark.parametrize("question", ["关羽的兵器叫什么，有多重？", "关羽的兵器是什么？"])
def test_an_attribute_named_by_its_kind_is_answered_by_a_quote_of_that_kind(make_deps, question: str) -> None:
    """兵器 appears in no sentence of the book, yet 「云长造青龙偃月刀…重八十二斤」 answers what the
    weapon is and weighs: an attribute that names the kind asked is checked by the kind's form, not
    taken for a detail the documents lack (the demo's question, refused while it was)."""
    result = ask(make_deps(), question)
    assert extractive.UNCONFIRMED not in result.answer, result.answer
    assert "青龙偃月刀" in result.answer and "资料中没有提到" not in result.answer
    assert_only_quotes(result, slices())


def test_an_attribute_named_by_a_kind_still_wants_a_quote_of_that_kind(embedder: Embedder) -> None:
    """A price named 价格 is answered by 售价1999元; with no amount in any quote it is not, and an
    attribute that is no kind's (CEO) is still one the documents must mention."""
    phone = extractive.Source("phone", "X1手机于2024年上市，售价1999元，配备6.5英寸屏幕。")
    select = partial(extractive.select, embedder=embedder, tokenizer=get_tokenizer(), limits=limits())
    priced = select("X1手机的价格是多少", [phone], held=lambda terms: set())
    assert priced.absent_attribute is None and priced.answered
    unpriced = select("X1手机的价格是多少", [extractive.Source("p2", "X1手机于2024年上市，配备6.5英寸屏幕。")])
    assert not unpriced.answered and unpriced.wanted == "金额"
    # an amount said of something else is no price of the phone: 价格, never mentioned, is absent
    case = extractive.Source("case", "X1手机于2024年上市。保护壳另售，每个49元。")
    elsewhere = select("X1手机的价格是多少", [case], held=lambda terms: set())
    assert elsewhere.absent_attribute == "价格" and not elsewhere.answered


def test_an_unanswerable_question_says_it_cannot_confirm(make_deps) -> None:
    deps = make_deps()
    result = ask(deps, UNANSWERABLE)
    assert result.answer_mode == "extractive"
    [verdict] = result.evaluations
    assert (verdict.enough, verdict.missing) == (False, ["诸葛亮的手机号码是多少"])
    assert f"{extractive.UNCONFIRMED}：诸葛亮的手机号码是多少" in result.answer
    assert "网络搜索不可用：未配置 BOCHA_API_KEY" in result.answer
    assert_only_quotes(result, slices())


@pytest.mark.parametrize("part", ["关羽用什么兵器", "许田打围时曹操骑的是什么马", "张飞的丈八点钢矛有多长"])
def test_the_novels_kinds_are_asked_only_with_its_profile(part: str) -> None:
    """On a base without the classical-novel profile, a weapon or a mount is no kind, and a length in 丈
    and 尺 is none either; with it, they are."""
    default = answer_kinds.asked_kind(part)
    assert default is None or not answer_kinds.holds(default, ["长一丈八尺"])
    assert answer_kinds.asked_kind(part, NOVEL.kinds) is not None
