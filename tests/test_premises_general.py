"""The general premise checks (retrieval/premises.py), answer kinds (retrieval/answer_kinds.py) and the
answer's order (retrieval/extractive.py), each with a true and a false case from more than one domain:
a medical guide, a staff handbook (policy) and a product manual."""

import pytest

from core.text import get_tokenizer
from retrieval import claims, extractive, premises
from retrieval.answer_kinds import asked_kind, holds
from retrieval.conflicts import (
    Conflict,
    ConflictSource,
    Quote,
    describe,
    document_date,
    figure_conflicts,
    figures_of,
    newest_side,
)

MEDICAL = [
    ("sugar", "空腹血糖低于3.9 mmol/L为低血糖，应立即处理。血糖高于13.9 mmol/L为高血糖，应及时就医。"),
    ("insulin", "未开封的胰岛素应冷藏保存。胰岛素开封后可在室温下保存28天，切勿放入冷冻室。"),
    ("coma", "如患者意识不清或昏迷，切勿给昏迷者喂食物或糖水，应立即拨打120。"),
]
POLICY = [
    ("leave", "病假需提供二级以上医院开具的证明，病假期间发放基本工资的80%。婚假为3天。"),
    ("probation", "试用期为三个月，试用期工资为转正工资的70%。"),
    ("code", "员工不得将公司源代码上传至个人网盘。"),
]
MANUAL = [
    ("battery", "请勿在低于0℃或高于50℃的环境中充电。长期不用时，每3个月充一次电。"),
    ("errors", "错误码E1至E8的含义见下表。E1表示水箱缺水，E8表示电机过热。"),
]
ALL = [*MEDICAL, *POLICY, *MANUAL]


@pytest.mark.parametrize(
    ("part", "sentence"),
    [
        # 80% is the sick-pay rate too; the probation clause is what speaks of 试用期工资
        ("试用期工资是转正工资的80%，转正后能涨多少", "试用期为三个月，试用期工资为转正工资的70%。"),
        # 13.9 is the high threshold: a low one stated with it is the 3.9 one's subject
        ("血糖低于13.9 mmol/L就是低血糖吗", "空腹血糖低于3.9 mmol/L为低血糖，应立即处理。"),
        # the low threshold's value with the direction reversed
        ("血糖高于3.9 mmol/L就是低血糖吗", "空腹血糖低于3.9 mmol/L为低血糖，应立即处理。"),
        ("试用期六个月结束后怎么转正", "试用期为三个月，试用期工资为转正工资的70%。"),  # 个月: a duration, not a count
    ],
)
def test_a_figure_about_the_same_subject_given_otherwise_is_denied(part: str, sentence: str) -> None:
    found = premises.figure_premise(part, ALL, get_tokenizer())
    assert found is not None and found.sentence == sentence


@pytest.mark.parametrize(
    "part",
    [
        "试用期工资是转正工资的70%吗",  # what the documents say
        "病假期间发放基本工资的80%吗",  # 80% said of 病假, not of 试用期
        "血糖低于3.9 mmol/L就是低血糖吗",  # the threshold and its direction as stated
        "主刷多少钱一个",  # 一个 is a count, no amount
        "环境温度低于5℃时充电要多久",  # a supposed condition, not a claim
        "婚假为3天对吗",
    ],
)
def test_a_figure_the_documents_give_or_do_not_speak_of_is_no_premise(part: str) -> None:
    assert premises.figure_premise(part, ALL, get_tokenizer()) is None


def test_units_are_read_as_units() -> None:
    """mmol/L is a concentration, not millimetres; 个月 a duration; 一个 a count."""
    units = [f.unit for f in figures_of(Quote("", "", "", "血糖5.6mmol/L，滤网5mm，试用期三个月，主刷一个"))]
    assert units == ["mmol/L", "mm", "个月", "个"]


@pytest.mark.parametrize(
    ("part", "sentence", "leave"),
    [
        ("胰岛素开封后放冷冻室能保存多久", "胰岛素开封后可在室温下保存28天，切勿放入冷冻室。", False),
        ("我爸昏迷了，喂糖水应该喂多少", "如患者意识不清或昏迷，切勿给昏迷者喂食物或糖水，应立即拨打120。", False),
        ("我爸昏迷了，能喂糖水吗", "如患者意识不清或昏迷，切勿给昏迷者喂食物或糖水，应立即拨打120。", True),
        ("把源代码上传到个人网盘后要通知谁", "员工不得将公司源代码上传至个人网盘。", False),
    ],
)
def test_an_act_the_documents_forbid_is_caught_in_any_phrasing(part: str, sentence: str, leave: bool) -> None:
    found = premises.forbidden_premise(part, ALL, get_tokenizer())
    assert found is not None and found.sentence == sentence and found.asks_leave == leave


@pytest.mark.parametrize(
    "part",
    [
        "昏迷的人喂了糖水会怎样",  # asks the consequence
        "源代码不小心上传到网盘了怎么办",  # asks a remedy
        "胰岛素开封后能在室温下放多久",  # nothing forbidden proposed
        "为什么不得上传源代码",  # asks about the prohibition itself
    ],
)
def test_a_part_that_proposes_nothing_forbidden_is_no_premise(part: str) -> None:
    assert premises.forbidden_premise(part, ALL, get_tokenizer()) is None


def test_a_code_the_base_never_mentions_is_unknown() -> None:
    assert premises.unknown_codes("错误码E9是什么意思", ["错误码", "e9"]) == ["E9"]
    assert premises.unknown_codes("错误码E8是什么意思", ["错误码"]) == []  # the base holds e8
    assert premises.codes_of("X200 的电压是5V，内存3GB") == ["X200"]  # units are no codes
    part = extractive.PartAnswer(
        part="错误码E9是什么意思", extracts=[], answered=False, best_similarity=0.9, coverage=1.0, strangers=["E9"]
    )
    assert extractive.lacks(part) == "资料中没有提到E9"


@pytest.mark.parametrize(
    ("part", "quote", "held"),
    [
        ("充电要多久", "长期不用时，每3个月充一次电。", False),  # a frequency, not a duration
        ("充电要多久", "充满电约需3小时。", True),
        ("年会几月举行", "本办法自2024年1月1日起施行。", False),  # the document's own date
        ("年会几月举行", "年会于每年12月举行。", True),
    ],
)
def test_an_answer_kind_takes_only_its_own_figures(part: str, quote: str, held: bool) -> None:
    kind = asked_kind(part)
    assert kind is not None and holds(kind, [quote]) == held


@pytest.mark.parametrize(
    ("part", "kind"),
    [("培训费用由谁承担", None), ("温度过高怎么办", None), ("培训费用是多少", "金额"), ("体温多少度算发烧", "温度")],
)
def test_a_kind_named_by_a_noun_is_not_asked_by_a_who_or_how_question(part: str, kind: str | None) -> None:
    found = asked_kind(part)
    assert (found.name if found else None) == kind


@pytest.mark.parametrize(
    ("quote", "held"),
    [("他积劳成疾，病逝于军中。", True), ("他辅佐幼主，六出祁山，鞠躬尽瘁。", False)],
)
def test_how_someone_died_is_answered_only_by_a_quote_saying_so(quote: str, held: bool) -> None:
    """「诸葛亮是怎么死的？」 was marked enough while quoting nothing about his death (issue 61)."""
    kind = asked_kind("陈恪是怎么死的？")
    assert kind is not None and kind.name == "死因" and holds(kind, [quote]) == held


def _part(answered: bool, *texts: tuple[str, float]) -> extractive.PartAnswer:
    extracts = [
        extractive.Extract(text=text, source_id="a", order=(0, 0, 0, 0, i), similarity=0.8, coverage=0.5, score=score)
        for i, (text, score) in enumerate(texts)
    ]
    return extractive.PartAnswer(
        part="滤网多少钱", extracts=extracts, answered=answered, best_similarity=0.8, coverage=0.5
    )


def test_a_refusal_says_so_first_then_one_closest_quote_never_a_heading() -> None:
    part = _part(False, ("三、滤网的更换", 0.9), ("滤网寿命约为3000小时，到期请更换。", 0.7), ("请勿水洗滤网。", 0.6))
    lines = extractive.compose([part], {"a": extractive.Quoted(1)}, []).split("\n")
    assert lines[1].startswith(f"{extractive.UNCONFIRMED}：滤网多少钱（")
    assert lines[2:] == [extractive.CLOSEST, "「滤网寿命约为3000小时，到期请更换。」[1]"]


def test_an_answer_quotes_all_but_its_headings() -> None:
    part = _part(True, ("三、滤网的更换\n滤网寿命约为3000小时。", 0.9), ("请勿水洗滤网。", 0.8))
    lines = extractive.compose([part], {"a": extractive.Quoted(1)}, []).split("\n")
    assert lines[1:] == ["「滤网寿命约为3000小时。」[1]", "「请勿水洗滤网。」[1]"]
    assert extractive.is_heading("三、滤网的更换") and not extractive.is_heading("滤网寿命约为3000小时。")


def test_a_question_asking_leave_for_a_forbidden_act_is_answered_by_the_prohibition() -> None:
    asked = extractive.PartAnswer(
        part="我爸昏迷了，能喂糖水吗", extracts=[], answered=False, best_similarity=0.8, coverage=0.5
    )
    sources = [extractive.Source(source_id, text) for source_id, text in MEDICAL]
    answer = extractive.deny_premise(asked, sources, {}, get_tokenizer())
    assert answer.answered and answer.forbidden and answer.extracts[0].source_id == "coma"
    text = extractive.compose([answer], {"coma": extractive.Quoted(1)}, [])
    assert extractive.FORBIDDEN in text and extractive.UNCONFIRMED not in text


@pytest.mark.parametrize(
    ("first", "second", "values"),
    [
        ("年假最多可顺延至次年3月31日。", "年假最多可顺延至次年6月30日。", [[(3.0, 31.0), (6.0, 30.0)]]),  # no year
        (
            "请勿在低于0℃或高于50℃的环境中充电。",
            "请勿在低于5℃或高于45℃的环境中充电。",
            [[(0.0,), (5.0,)], [(50.0,), (45.0,)]],
        ),
        ("试用期工资为转正工资的70%。", "试用期工资为转正工资的80%。", [[(70.0,), (80.0,)]]),
        ("请勿在低于0℃或高于50℃的环境中充电。", "请勿在低于0℃或高于50℃的环境中充电。", []),  # the same range
    ],
)
def test_versions_disagree_on_a_day_a_range_bound_or_a_percentage(first: str, second: str, values: list) -> None:
    quotes = [
        Quote("年假、充电温度、试用期工资", "1", "v1", first),
        Quote("年假、充电温度、试用期工资", "2", "v2", second),
    ]
    found = figure_conflicts(quotes, get_tokenizer())
    assert [[figure.value for figure in conflict.figures] for conflict in found] == values


def test_the_newer_dated_version_is_said_to_supersede_the_older() -> None:
    old = document_date("员工手册（2022年版）", "本办法自2022年1月1日起施行")
    new = document_date("员工手册.txt", "本办法自2024年3月1日起施行。年假最多可顺延至次年6月30日。")
    assert old is not None and new is not None and new[1] == "2024年3月1日起施行"
    assert newest_side([(1, old), (2, new)]) == (2, "2024年3月1日起施行")
    assert newest_side([(1, old), (2, None)]) is None  # one side does not date itself: nothing is chosen
    assert newest_side([(1, new), (2, new)]) is None  # the same date: neither supersedes
    sides = [
        ConflictSource(number=n, kind="local", title="手册", says=says) for n, says in ((1, "3月31日"), (2, "6月30日"))
    ]
    dated = describe([Conflict(claim="年假顺延", sources=sides, newest=2, newest_date="2024年3月1日起施行")])
    assert "[2]（2024年3月1日起施行）是较新的版本，取代较早的版本" in dated
    assert "取代" not in describe([Conflict(claim="年假顺延", sources=sides)])


# Claims asked to be confirmed (…对吧, …是吗): retrieval/claims.py, and the figure's companion in its clause.
CLAIM_SOURCES = [
    *ALL,
    ("annual", "## 带薪年假\n试用期内不享受年假，转正后按剩余天数折算。"),
    ("late", "迟到或早退30分钟以内，每次扣发50元；迟到超过30分钟不满2小时的，按旷工半天计。"),
    ("feet", "新鞋第一次穿不超过半小时。"),
    ("stranger", "## 陌生人徘徊\n门锁检测到有人停留超过30秒会拍照。该功能默认关闭，开启后续航时间会缩短约30%。"),
    ("spec", "| 工作温度 | -25℃～60℃ |"),
    ("checkup", "年度体检：入职满半年的员工每年一次。"),
    ("fridge", "未开封的胰岛素应冷藏保存。"),
]


@pytest.mark.parametrize(
    ("part", "sentence"),
    [
        ("试用期内也能休年假吧？", "试用期内不享受年假，转正后按剩余天数折算。"),  # polarity (policy)
        ("如果意识不清，给昏迷者喂糖水就行，对吧？", "如患者意识不清或昏迷，切勿给昏迷者喂食物或糖水，应立即拨打120。"),
        ("陌生人徘徊功能开启后续航会变长，是吗？", "该功能默认关闭，开启后续航时间会缩短约30%。"),  # change (manual)
    ],
)
def test_a_claim_the_documents_say_the_other_way_is_denied(part: str, sentence: str) -> None:
    found = claims.contradicted(part, CLAIM_SOURCES)
    assert found is not None and found.sentence == sentence


@pytest.mark.parametrize(
    "part",
    [
        "试用期内不享受年假，对吗？",  # the same polarity
        "未开封的胰岛素应冷藏保存，对吧？",  # 未 of a modifier, said alike
        "开启陌生人徘徊功能后续航会缩短，是吗？",  # the same change, another word order
        "试用期内能休年假吗？",  # a plain question: the quote answers it, nothing presumed
    ],
)
def test_a_claim_said_the_same_way_or_a_plain_question_is_not_denied(part: str) -> None:
    assert claims.contradicted(part, CLAIM_SOURCES) is None


@pytest.mark.parametrize(
    ("part", "stated"),
    [
        ("门锁的工作温度最低只能到零下10℃，对吗？", False),  # a bound of the range said otherwise (manual)
        ("门锁的工作温度是-25℃～60℃，对吗？", True),
        ("入职满三个月就能参加年度体检吧？", False),  # a figure no sentence gives (policy)
        ("入职满半年才能参加年度体检吧？", True),
        ("新鞋第一次可以连续穿一整天来磨合吧？", False),  # most of the claim unsaid (medical)
        ("昏迷的病人不能喂糖水，对吧？", True),  # paraphrased, still said
    ],
)
def test_a_claim_is_confirmed_only_when_a_source_states_it(part: str, stated: bool) -> None:
    assert (claims.unstated(part, CLAIM_SOURCES) is None) == stated


def test_only_a_request_for_confirmation_states_a_claim() -> None:
    assert claims.claim_of("试用期内也能休年假吧？") == "试用期内也能休年假"
    assert claims.claim_of("密码最长可以设置20位，对吧？") == "密码最长可以设置20位"
    assert claims.claim_of("试用期内能休年假吗？") is None and claims.claim_of("对吗？") is None


@pytest.mark.parametrize(
    ("part", "denied"),
    [
        ("迟到超过30分钟才扣50元，对吗？", True),  # 50元 is said with 30分钟以内 (policy)
        ("迟到30分钟以内扣50元吗？", False),
        ("血糖高于3.9 mmol/L要吃15克葡萄糖，对吗？", True),  # 15克 is said with 低于3.9 (medical)
        ("血糖低于3.9 mmol/L要吃15克葡萄糖吗？", False),
    ],
)
def test_a_figures_direction_is_judged_by_the_sentence_saying_its_companion(part: str, denied: bool) -> None:
    sources = [
        *CLAIM_SOURCES,
        ("treat", "血糖低于3.9 mmol/L时，立即进食含15克葡萄糖的食物。血糖高于3.9 mmol/L的，按时进餐即可。"),
    ]
    assert (premises.figure_premise(part, sources, get_tokenizer()) is not None) == denied


def test_a_quoted_name_no_hit_holds_is_not_mentioned() -> None:
    assert premises.unquoted_names("手册里说的“30-30法则”具体怎么做？", MEDICAL) == ["30-30法则"]
    assert premises.unquoted_names("《员工 守则》第三条说什么？", [("rules", "见《员工守则》第三条。")]) == []
    asked = extractive.PartAnswer(
        part="说明书里的“极速模式”怎么开？", extracts=[], answered=True, best_similarity=0.9, coverage=1.0
    )
    answer = extractive.deny_premise(asked, [extractive.Source(i, t) for i, t in MANUAL], {}, get_tokenizer())
    assert not answer.answered and extractive.lacks(answer) == "资料中没有提到极速模式"


def test_an_unstated_claim_is_refused_first_with_why() -> None:
    asked = extractive.PartAnswer(
        part="试用期工资是转正工资的80%，对吧？", extracts=[], answered=True, best_similarity=0.9, coverage=1.0
    )
    answer = extractive.deny_premise(asked, [extractive.Source("p", "试用期工资另行约定。")], {}, get_tokenizer())
    assert not answer.answered and answer.unstated_claim == "试用期工资是转正工资的80%"
    lines = extractive.compose([answer], {}, []).split("\n")
    assert lines[1].startswith(f"{extractive.UNCONFIRMED}：") and "资料原文没有这样说" in lines[1]


@pytest.mark.parametrize(
    ("part", "denied"),
    [
        ("赵鹏2012年与建业续约5年之后去了哪里", True),  # a year of the calendar bounds no range (encyclopedia)
        ("赵鹏2012年与建业续约3年之后去了哪里", False),
        ("2024年入职的员工试用期是六个月吗", True),  # (policy)
        ("2024年入职的员工试用期是三个月吗", False),
        ("大沙地站是广州地铁三号线的哪一站", True),  # a label number (encyclopedia)
        ("大沙地站是广州地铁五号线的哪一站", False),
        ("研发中心在3号楼的几层", True),  # (policy)
        ("研发中心在5号楼的几层", False),
    ],
)
def test_a_span_beside_a_calendar_year_and_a_label_number_are_checked(part: str, denied: bool) -> None:
    sources = [
        *POLICY,
        ("zhao", "但最后在2012年1月12日，建业成功与赵鹏续约3年。"),
        ("metro", "大沙地站是广州地铁五号线的车站，位于黄埔区。"),
        ("office", "研发中心位于园区5号楼三层。"),
    ]
    assert (premises.figure_premise(part, sources, get_tokenizer()) is not None) == denied


@pytest.mark.parametrize(
    ("part", "denied"),
    [
        ("门锁的工作温度最低只能到零下10℃，对吗", True),  # a bound claimed otherwise (manual)
        ("冬天零下二十度门锁还能用吗", False),  # a value inside the range
        ("门锁的工作温度最低是零下25℃吗", False),
        ("出差补助最低只有50元吗", True),  # (policy)
        ("出差补助一天120元够吃饭吗", False),
    ],
)
def test_a_one_sided_claim_about_a_range_is_checked_against_its_bounds(part: str, denied: bool) -> None:
    sources = [("spec", "| 工作温度 | -25℃～60℃ |"), ("trip", "出差补助标准为每天80元～150元，按城市分档。")]
    assert (premises.figure_premise(part, sources, get_tokenizer()) is not None) == denied


@pytest.mark.parametrize(
    ("part", "denied"),
    [
        ("选举中领先的两位候选人分别是谁", False),  # 7000名 counts observers, not candidates (encyclopedia)
        ("以仁王为什么没当上六条天皇的太子", False),  # 八条院 is a name, not eight of anything
        ("前台有3名接待员吗", True),  # the same thing counted (policy)
        ("门锁最多能存50个指纹吗", True),  # nothing follows the stated count: a table's cell (manual)
    ],
)
def test_a_count_is_denied_only_by_a_count_of_the_same_thing(part: str, denied: bool) -> None:
    sources = [
        ("vote", "在这次选举中，大约7000名马其顿和500名外国选举观察员监督这次投票。"),
        ("prince", "此后以仁王成为八条院暲子内亲王的养子，未能当上太子。"),
        ("desk", "前台设2名接待员，负责访客登记。"),
        ("spec", "| 指纹容量 | 门锁最多存100个 |"),
    ]
    assert (premises.figure_premise(part, sources, get_tokenizer()) is not None) == denied
