"""Generated Chinese PDF, DOCX and HTML documents with a known answer key (tests and bench).

One small guide, 《糖尿病防治指南》, laid out on four pages with headings, paragraphs long
enough to wrap over several lines, a table, and a header and footer repeated on every page.
`GUIDE` is the ground truth: every loader's output is compared with it, so the fixtures are
generated here (reportlab, python-docx, plain HTML), never downloaded.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")  # Debian fonts-wqy-microhei
TITLE = "糖尿病防治指南"
HEADER = "糖尿病防治指南（2026 年版） 内部资料"
FOOTER = "第 {page} 页 共 {pages} 页"


@dataclass(frozen=True)
class Block:
    """A heading (`level` 1-3), a paragraph (`level` 0) or a table (`rows`)."""

    text: str = ""
    level: int = 0
    rows: tuple[tuple[str, ...], ...] = ()


def _p(text: str) -> Block:
    return Block(text)


# Pages of the guide; each page's blocks in reading order.
GUIDE: list[list[Block]] = [
    [
        Block("第一章 总论", 1),
        Block("1.1 定义", 2),
        _p(
            "糖尿病是一组以慢性血糖水平升高为特征的代谢性疾病，由胰岛素分泌缺陷或胰岛素作用障碍引起。"
            "长期高血糖会损害眼、肾、神经、心脏和血管，因此早期发现和长期管理同样重要。"
            "本指南面向基层医生和患者家属，用通俗的语言说明诊断、饮食、运动和用药的要点。"
        ),
        Block("1.2 流行情况", 2),
        _p(
            "我国成人糖尿病患病率已超过百分之十，其中约一半患者并不知道自己患病。"
            "肥胖、缺乏运动、高盐高糖饮食和家族史是最主要的危险因素，四十岁以上人群应每年检查一次空腹血糖。"
        ),
    ],
    [
        Block("第二章 诊断", 1),
        Block("2.1 诊断标准", 2),
        _p(
            "典型症状为多饮、多尿、多食和不明原因的体重下降，即常说的“三多一少”。"
            "有典型症状且随机血糖不低于 11.1 毫摩尔每升，或空腹血糖不低于 7.0 毫摩尔每升，即可诊断为糖尿病。"
        ),
        Block(
            rows=(
                ("指标", "正常值", "糖尿病"),
                ("空腹血糖", "3.9 至 6.1", "不低于 7.0"),
                ("餐后两小时血糖", "低于 7.8", "不低于 11.1"),
                ("糖化血红蛋白", "低于 5.7%", "不低于 6.5%"),
            )
        ),
        _p("表中单位均为毫摩尔每升，糖化血红蛋白除外；一次结果异常时应在另一天复查确认。"),
    ],
    [
        Block("第三章 药物治疗", 1),
        Block("3.1 治疗原则", 2),
        _p(
            "药物治疗建立在饮食控制和规律运动的基础上，不能代替生活方式干预。"
            "用药方案应根据血糖水平、体重、肝肾功能和低血糖风险个体化制定，并定期复诊调整。"
        ),
        Block("3.2 用药", 2),
        _p(
            "二甲双胍（metformin）是 2 型糖尿病的首选用药，每日剂量一般不超过 2000 毫克，应随餐服用以减轻胃肠道反应。"
            "肾小球滤过率低于每分钟 30 毫升的患者禁用二甲双胍，造影检查前后应暂停服用。"
            "磺脲类药物促进胰岛素分泌，降糖作用强，但容易引起低血糖，老年患者应从小剂量开始。"
        ),
        Block("3.2.1 胰岛素", 3),
        _p(
            "口服药物联合治疗三个月后糖化血红蛋白仍高于 7% 时，应考虑起始基础胰岛素治疗。"
            "注射部位应轮换，常用腹部、大腿外侧和上臂，每次注射点之间至少间隔一厘米。"
        ),
    ],
    [
        Block("第四章 随访", 1),
        _p(
            "患者每三个月检查一次糖化血红蛋白，每年检查一次眼底、尿微量白蛋白和足部感觉。"
            "出现心慌、出汗、手抖等低血糖症状时，应立即进食含糖食物，十五分钟后复测血糖。"
        ),
    ],
]

# Sentences that locate themselves: (sentence, page, section path) for assertions.
KNOWN = [
    ("长期高血糖会损害眼、肾、神经、心脏和血管", 1, "第一章 总论 / 1.1 定义"),
    ("即可诊断为糖尿病", 2, "第二章 诊断 / 2.1 诊断标准"),
    ("二甲双胍（metformin）是 2 型糖尿病的首选用药", 3, "第三章 药物治疗 / 3.2 用药"),
    ("应考虑起始基础胰岛素治疗", 3, "第三章 药物治疗 / 3.2 用药 / 3.2.1 胰岛素"),
    ("十五分钟后复测血糖", 4, "第四章 随访"),
]


def paragraphs() -> list[str]:
    return [block.text for page in GUIDE for block in page if block.text and not block.level]


def table_rows() -> list[tuple[str, ...]]:
    return [row for page in GUIDE for block in page for row in block.rows]


# --- PDF -------------------------------------------------------------------------------


def write_pdf(
    path: Path, pages: list[list[Block]] = GUIDE, *, outline: bool = False, encrypt_password: str | None = None
) -> Path:
    """The guide (or `pages`) as a PDF (reportlab, embedded CJK font), header and footer on every page.

    A page break separates `pages`; a long one overflows onto further pages."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    if "WQY" not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(TTFont("WQY", str(CJK_FONT), subfontIndex=0))
    body = ParagraphStyle("body", fontName="WQY", fontSize=10.5, leading=16, wordWrap="CJK", firstLineIndent=21)
    headings = {
        level: ParagraphStyle(f"h{level}", fontName="WQY", fontSize=size, leading=size * 1.5, spaceBefore=6)
        for level, size in ((1, 18), (2, 14), (3, 12))
    }

    def decorate(canvas: Any, _doc: Any) -> None:
        canvas.saveState()
        canvas.setFont("WQY", 9)
        canvas.drawCentredString(A4[0] / 2, A4[1] - 40, HEADER)
        footer = FOOTER.format(page=canvas.getPageNumber(), pages=len(pages))
        canvas.drawCentredString(A4[0] / 2, 30, footer)
        canvas.restoreState()

    class Guide(SimpleDocTemplate):
        def afterFlowable(self, flowable: object) -> None:
            level = getattr(flowable, "outline_level", 0)
            if outline and level:
                text = flowable.getPlainText()  # type: ignore[attr-defined]
                key = f"h{id(flowable)}"
                self.canv.bookmarkPage(key)
                self.canv.addOutlineEntry(text, key, level=level - 1)

    story: list[object] = []
    for number, page in enumerate(pages):
        if number:
            story.append(PageBreak())
        for block in page:
            if block.rows:
                table = Table([list(row) for row in block.rows])
                table.setStyle(
                    TableStyle([("FONT", (0, 0), (-1, -1), "WQY", 10), ("GRID", (0, 0), (-1, -1), 0.5, colors.black)])
                )
                story += [Spacer(1, 6), table, Spacer(1, 6)]
            elif block.level:
                heading = Paragraph(block.text, headings[block.level])
                heading.outline_level = block.level
                story.append(heading)
            else:
                story.append(Paragraph(block.text, body))
    kwargs = {"encrypt": encrypt_password} if encrypt_password else {}
    Guide(str(path), pagesize=A4, title=TITLE, topMargin=72, bottomMargin=72, **kwargs).build(
        story, onFirstPage=decorate, onLaterPages=decorate
    )
    return path


LONG_PARAGRAPH = "".join(
    f"跨页段落第{n}句：糖尿病患者的随访记录应当完整保存，包括血糖、血压、体重和用药的每一次调整。" for n in range(1, 13)
)


def _filler(number: int) -> str:
    return f"第{number}段填充文字：" + "基层医生应当按时随访患者，记录每一次检查的结果并及时调整方案。" * 3


def write_long_pdf(path: Path) -> Path:
    """Two pages where `LONG_PARAGRAPH` starts on page 1 and ends on page 2."""
    return write_pdf(path, [[_p(_filler(n)) for n in range(1, 13)] + [_p(LONG_PARAGRAPH)]])


def write_scanned_pdf(path: Path) -> Path:
    """A PDF whose pages are pictures only (no text layer), like a scan."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4)
    for _ in range(2):
        for row in range(40):
            pdf.rect(60, 760 - row * 16, 400 - (row % 7) * 30, 8, fill=1)
        pdf.showPage()
    pdf.save()
    return path


# --- DOCX ------------------------------------------------------------------------------


def write_docx(path: Path, pages: list[list[Block]] = GUIDE, *, comment: bool = True) -> Path:
    """The guide (or `pages`) as Word: Heading 1-3, paragraphs, a table, a header, a footer, a comment."""
    import docx

    document = docx.Document()
    document.core_properties.title = TITLE
    section = document.sections[0]
    section.header.paragraphs[0].text = HEADER
    section.footer.paragraphs[0].text = "页脚：仅供内部培训使用"
    for page in pages:
        for block in page:
            if block.rows:
                table = document.add_table(rows=0, cols=len(block.rows[0]))
                for row in block.rows:
                    cells = table.add_row().cells
                    for cell, value in zip(cells, row, strict=True):
                        cell.text = value
            elif block.level:
                document.add_heading(block.text, level=block.level)
            else:
                paragraph = document.add_paragraph(block.text)
                if comment and "首选用药" in block.text:
                    document.add_comment(paragraph.runs, text="批注：请核对剂量上限", author="审校")
    document.save(str(path))
    return path


# --- HTML ------------------------------------------------------------------------------

NAV = "首页 | 疾病百科 | 在线问诊 | 登录注册"
AD = "限时特惠：进口血糖仪买一送一，点击立即抢购！"
SITE_FOOTER = "版权所有 2026 健康网 京ICP备12345678号 联系我们 隐私政策"
SIDEBAR = "热门文章："
BOILERPLATE = [*NAV.split(" | "), AD, SITE_FOOTER, SIDEBAR, "十种降糖水果排行榜", "血糖仪选购指南"]


RELATED = ["十种降糖水果排行榜", "专家在线答疑", "血糖仪选购指南", "糖尿病人能吃西瓜吗"]
LAYOUTS = ("semantic", "classes", "plain")


def guide_html(charset: str = "utf-8", *, layout: str = "semantic", pages: list[list[Block]] = GUIDE) -> str:
    """The guide as a saved web page with navigation, an ad, related links and a footer.

    `semantic` marks them with <nav>/<aside>/<footer>; `classes` only with telling class names
    (<div class="banner-ad">), as many older Chinese sites do; `plain` with neither (class
    names c1, c2...), so only the text and link density tell boilerplate from content.
    """
    parts: list[str] = []
    for page in pages:
        for block in page:
            if block.rows:
                cells = "".join("<tr>" + "".join(f"<td>{value}</td>" for value in row) + "</tr>" for row in block.rows)
                parts.append(f"<table>{cells}</table>")
            elif block.level:
                parts.append(f"<h{block.level}>{block.text}</h{block.level}>")
            else:
                parts.append(f"<p>{block.text}</p>")
    article = "\n".join(parts)
    links = "".join(f'<a href="/{i}">{item.strip()}</a> ' for i, item in enumerate(NAV.split("|")))
    related = "".join(f'<li><a href="/r{i}">{title}</a></li>' for i, title in enumerate(RELATED))
    wrap = {
        "semantic": ("nav", "div class='ad'", "main", "aside", "footer"),
        "classes": (
            "div id='menu'",
            "div class='banner-ad'",
            "div class='content'",
            "div class='sidebar'",
            "div id='copyright'",
        ),
        "plain": ("div class='c1'", "div class='c2'", "div class='c3'", "div class='c4'", "div class='c5'"),
    }[layout]
    nav, ad, main, side, foot = wrap
    close = [tag.split()[0] for tag in wrap]
    frame = (
        f"<{nav}>{links}</{close[0]}>\n<{ad}><a href='/buy'>{AD}</a></{close[1]}>\n"
        f"<{main}>\n{article}\n</{close[2]}>\n"
        f"<{side}><p>{SIDEBAR}</p><ul>{related}</ul></{close[3]}>\n<{foot}>{SITE_FOOTER}</{close[4]}>"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="{charset}"><title>{TITLE} - 健康网</title>'
        f"<script>var tracker = '统计代码';</script><style>p {{ color: #333; }}</style></head>\n"
        f"<body>\n{frame}\n</body></html>\n"
    )


def write_html(
    path: Path, charset: str = "utf-8", *, layout: str = "semantic", pages: list[list[Block]] = GUIDE
) -> Path:
    path.write_bytes(guide_html(charset, layout=layout, pages=pages).encode(charset))
    return path


# Short pages: a notice of one or two paragraphs inside site chrome, one kind of chrome per
# variant (and all of them at once), where trafilatura's extractor finds less than its minimum.
NOTICE_TITLE = "停诊通知"
NOTICE = [
    "因设备检修，本诊所于12月3日全天停诊，12月4日起恢复正常门诊，给您带来不便敬请谅解。",
    "如需急诊，请拨打120或前往市人民医院急诊科就诊。",
]
_MENU = ("首页", "科室介绍", "联系我们", "登录")
_LINKS = "".join(f'<li><a href="/{i}">{item}</a></li>' for i, item in enumerate(_MENU))
SHORT_CHROME = {
    "nav": "<nav>首页 | 科室介绍 | 联系我们 | 登录</nav>",
    "header": "<header><a href='/'>仁心诊所</a> 预约挂号 专家团队</header>",
    "footer": "<footer>版权所有 © 2026 仁心诊所 地址：人民路 8 号</footer>",
    "aside": "<aside><p>热门服务：</p><a href='/t'>体检套餐</a> <a href='/v'>疫苗接种</a></aside>",
    "role=navigation": f"<div role='navigation'><ul>{_LINKS}</ul></div>",
    "ul.menu": f"<ul class='menu main-menu'>{_LINKS}</ul>",
    "breadcrumb ol": "<ol class='breadcrumb'><li><a href='/'>首页</a></li><li><a href='/n'>通知公告</a></li><li>正文</li></ol>",
}
# Text of the chrome above: a line of a loaded page that holds any of these is boilerplate.
SHORT_BOILERPLATE = [*_MENU, "仁心诊所", "预约挂号", "版权所有", "人民路", "热门服务", "体检套餐", "通知公告", "正文"]


def short_page(variant: str, paragraphs: int = 1) -> str:
    """The notice with `paragraphs` of `NOTICE` in one kind of chrome (`all`: every kind), in UTF-8."""
    chrome = list(SHORT_CHROME.values()) if variant == "all" else [SHORT_CHROME[variant]]
    top, bottom = [c for c in chrome if not c.startswith("<footer")], [c for c in chrome if c.startswith("<footer")]
    body = "".join(f"<p>{text}</p>" for text in NOTICE[:paragraphs])
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{NOTICE_TITLE} - 仁心诊所</title></head>\n'
        f"<body>\n{''.join(top)}\n<h1>{NOTICE_TITLE}</h1>\n{body}\n{''.join(bottom)}\n</body></html>\n"
    )


SHORT_VARIANTS = (*SHORT_CHROME, "all")


# --- EPUB ------------------------------------------------------------------------------


def write_epub(path: Path, chapters: list[tuple[str, str]] | None = None) -> Path:
    """A small EPUB (ebooklib): a navigation page, then one XHTML document per (heading, body HTML)."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("test-book")
    book.set_title("测试之书")
    book.set_language("zh")
    items = []
    pairs = chapters or [("第一章 起", "天下大势，分久必合。"), ("第二章 承", "合久必分，<b>群雄</b>并起。")]
    for n, (heading, body) in enumerate(pairs, start=1):
        chapter = epub.EpubHtml(title=heading, file_name=f"c{n}.xhtml", lang="zh")
        chapter.content = f"<html><body><h1>{heading}</h1><p>{body}</p></body></html>"
        book.add_item(chapter)
        items.append(chapter)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    epub.write_epub(str(path), book)
    return path
