"""Generated spreadsheets, decks, scans and images with known answers (tests and bench/ocr_accuracy.py).

Made at run time with the ordinary libraries (XlsxWriter for formulas with their values, openpyxl,
xlwt, python-pptx, Pillow with the installed CJK font, reportlab), never committed as binaries.
"""

import csv
import datetime
import io
import random
import zipfile
from pathlib import Path

from bench.doc_fixtures import CJK_FONT

TRAVEL_TITLE = "2026 年差旅住宿标准"
TRAVEL_HEADER = ("城市", "城市等级", "住宿上限(元/晚)", "生效日期", "上浮比例", "含早餐上限")
_CITIES = "北上广深杭南苏成武西重天长郑济青厦福合昆贵南宁太石哈沈大连乌兰呼银西宁拉萨海口三亚珠佛东中温宁波"


def travel_rows(count: int = 60) -> list[tuple[str, str, int, datetime.date, float]]:
    """(city, tier, nightly cap, effective date, uplift) per row; row i's cap is 300 + 7 i."""
    return [
        (
            f"{_CITIES[i % len(_CITIES)]}{'州市' if i % 2 else '城'}{i:02d}",
            "一类" if i < 10 else "二类",
            300 + 7 * i,
            datetime.date(2026, 1 + i % 12, 1),
            0.1 if i % 3 else 0.15,
        )
        for i in range(count)
    ]


def write_xlsx(path: Path, count: int = 60) -> Path:
    """Sheet 住宿: a merged title row, the header on row 2, `count` rows from row 3 (an empty row and
    an empty column inside), dates, percentages and a formula with its stored value; sheet 餐补: small."""
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path))
    dates, percent = book.add_format({"num_format": "yyyy-mm-dd"}), book.add_format({"num_format": "0%"})
    sheet = book.add_worksheet("住宿")
    sheet.merge_range(0, 0, 0, 6, TRAVEL_TITLE)
    columns = [0, 1, 2, 4, 5, 6]  # column D (3) stays empty
    for column, name in zip(columns, TRAVEL_HEADER, strict=True):
        sheet.write(1, column, name)
    row = 2
    for number, (city, tier, cap, effective, uplift) in enumerate(travel_rows(count)):
        if number == count // 2:
            row += 1  # an empty row
        sheet.write(row, 0, city)
        sheet.write(row, 1, tier)
        sheet.write_number(row, 2, cap)
        sheet.write_datetime(row, 4, datetime.datetime.combine(effective, datetime.time()), dates)
        sheet.write_number(row, 5, uplift, percent)
        sheet.write_formula(row, 6, f"=C{row + 1}+50", None, cap + 50)
        row += 1
    meals = book.add_worksheet("餐补")
    for number, values in enumerate((("级别", "每日餐补(元)"), ("经理", 120), ("员工", 80))):
        meals.write_row(number, 0, values)
    book.close()
    return path


def write_wide_xlsx(path: Path, columns: int = 30, rows: int = 5) -> Path:
    """One sheet, a key column 工号 and `columns` more: cell (r, c) says 值r-c."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "宽表"
    sheet.append(["工号", *(f"第{c}项指标" for c in range(1, columns + 1))])
    for r in range(1, rows + 1):
        sheet.append([f"E{r:03d}", *(f"值{r}-{c}" for c in range(1, columns + 1))])
    book.save(path)
    return path


def write_xls(path: Path) -> Path:
    """An old binary workbook: a merged title, a header, a date and a number."""
    import xlwt

    book = xlwt.Workbook(encoding="utf-8")
    sheet = book.add_sheet("设备")
    sheet.write_merge(0, 0, 0, 2, "设备台账")
    for column, name in enumerate(("设备", "保修截止", "数量")):
        sheet.write(1, column, name)
    date_style = xlwt.easyxf(num_format_str="YYYY-MM-DD")
    sheet.write(2, 0, "投影仪")
    sheet.write(2, 1, datetime.date(2027, 6, 30), date_style)
    sheet.write(2, 2, 4)
    book.save(str(path))
    return path


def write_delimited(path: Path, delimiter: str, count: int = 40) -> Path:
    with path.open("w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream, delimiter=delimiter)
        writer.writerow(TRAVEL_HEADER[:3])
        writer.writerows(row[:3] for row in travel_rows(count))
    return path


def write_tall_xlsx(path: Path, rows: int) -> Path:
    """One column of `rows` rows (openpyxl's write-only mode: memory stays flat)."""
    import openpyxl

    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("长表")
    for number in range(rows):
        sheet.append([number])
    book.save(path)
    return path


def claim_rows(path: Path, dimension: str = "A1:XFD1048576") -> Path:
    """Rewrite the first sheet's stated dimension (its `<dimension ref=...>`) to claim a huge range."""
    members = {}
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            members[name] = archive.read(name)
    sheet = "xl/worksheets/sheet1.xml"
    text = members[sheet].decode()
    start = text.index("<dimension ref=")
    end = text.index("/>", start)
    members[sheet] = (text[:start] + f'<dimension ref="{dimension}"' + text[end:]).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def zip_bomb(path: Path, source: Path, inflated_mb: int = 60) -> Path:
    """`source` (an .xlsx or .pptx) with one more member of `inflated_mb` MB of zeros: a zip bomb."""
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr("xl/media/padding.bin", bytes(inflated_mb * 1024 * 1024))
    return path


LAUNCH_TABLE = (("阶段", "日期", "负责人"), ("内测", "4月1日", "产品部"), ("公测", "5月20日", "运营部"))
LAUNCH_NOTES = "公测日期可能推迟到六月，取决于支付牌照的审批进度。"


def write_pptx(path: Path) -> Path:
    """Three slides: a title slide, a bulleted slide with a table, a slide whose point is in its notes."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[0])
    first.shapes.title.text = "新产品发布计划"
    first.placeholders[1].text = "2026 年第二季度"
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "发布时间表"
    table = second.shapes.add_table(3, 3, Inches(1), Inches(2), Inches(7), Inches(2)).table
    for r, row in enumerate(LAUNCH_TABLE):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    third = deck.slides.add_slide(deck.slide_layouts[1])
    third.shapes.title.text = "风险"
    third.placeholders[1].text = "支付渠道\n服务器容量"
    third.notes_slide.notes_text_frame.text = LAUNCH_NOTES
    deck.save(str(path))
    return path


def write_deck(path: Path, slides: int) -> Path:
    """`slides` slides, each a title, two bullets, a 4-row table and notes (throughput)."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for number in range(1, slides + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"第{number}项议题"
        slide.placeholders[1].text = f"目标：完成第{number}阶段\n风险：进度与预算"
        table = slide.shapes.add_table(4, 3, Inches(1), Inches(4), Inches(7), Inches(1.5)).table
        for r, row in enumerate(
            [("事项", "负责人", "截止"), *((f"任务{r}", f"小组{r}", f"{r}月") for r in range(1, 4))]
        ):
            for c, value in enumerate(row):
                table.cell(r, c).text = value
        slide.notes_slide.notes_text_frame.text = f"讲到第{number}页时强调预算。"
    deck.save(str(path))
    return path


def text_image(lines: list[str], *, size: int = 36, dpi: int = 200, margin: int = 80) -> "object":
    """A white page with `lines` in the CJK font (PIL image), `size` pixels high at 200 dpi, scaled to `dpi`."""
    from PIL import Image, ImageDraw, ImageFont

    scale = dpi / 200
    font = ImageFont.truetype(str(CJK_FONT), max(8, round(size * scale)))
    width = round(margin * 2 * scale) + max(round(font.getlength(line)) for line in lines)
    height = round(margin * 2 * scale) + round(len(lines) * size * 1.8 * scale)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        draw.text((round(margin * scale), round((margin + number * size * 1.8) * scale)), line, font=font, fill=0)
    return image


def degrade(image: "object", condition: str, seed: int = 0) -> "object":
    """`clean`, `noise` (light salt and pepper and grey speckle), `rotated` (1 to 2 degrees)."""
    from PIL import Image

    assert isinstance(image, Image.Image)
    rng = random.Random(seed)
    if condition == "noise":
        pixels = image.load()
        assert pixels is not None
        for _ in range(image.width * image.height // 50):
            x, y = rng.randrange(image.width), rng.randrange(image.height)
            pixels[x, y] = rng.choice((0, 96, 160, 255))
        return image
    if condition == "rotated":
        return image.rotate(rng.choice((-1, 1)) * rng.uniform(1, 2), expand=True, fillcolor=255)
    return image


def png_bytes(image: "object", kind: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind)  # type: ignore[attr-defined]
    return buffer.getvalue()


def write_pdf_pages(path: Path, pages: list[str | bytes]) -> Path:
    """A PDF whose pages are text (a `str`: a text layer in the CJK font) or a picture (`bytes`: a scan)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas

    if "WQY" not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(TTFont("WQY", str(CJK_FONT), subfontIndex=0))
    pdf = canvas.Canvas(str(path), pagesize=A4)
    readers: dict[int, ImageReader] = {}
    for page in pages:
        if isinstance(page, str):
            pdf.setFont("WQY", 12)
            for number, line in enumerate(page.splitlines()):
                pdf.drawString(72, A4[1] - 90 - number * 20, line)
        else:
            reader = readers.setdefault(hash(page), ImageReader(io.BytesIO(page)))
            width, height = reader.getSize()
            shown = A4[0] - 100
            pdf.drawImage(reader, 50, A4[1] - 50 - shown * height / width, shown, shown * height / width)
        pdf.showPage()
    pdf.save()
    return path
