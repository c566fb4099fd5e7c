"""HTML charset sniffing and detection (gpupipe/io/charset.py): pages in the encodings the web uses, encoded here
with Python's codecs, decode to the text a browser shows, with and without declarations, mislabelled or with BOMs.

Detection runs with each detector the install can have: uchardet (resiliparse, the fast-extract/dev extras) and
charset-normalizer (the base install).
"""
from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from gpupipe.stages.read import InputConfig
from gpupipe.io import charset
from gpupipe.io.charset import (
    DecodeError,
    decode_html,
    mojibake_suspect,
    prescan,
    web_codec,
)
from gpupipe.io.readers import iter_records
from gpupipe.io.records import Rejected
from gpupipe.stages.read import read_file_task
from tests.helpers import stage_dir

ZH = ["国家统计局今天发布数据显示，今年前三季度国内生产总值同比增长百分之五点二，增速比上半年略有回落。",
      "专家表示，随着一系列稳增长政策落地见效，第四季度经济有望继续保持平稳运行。",
      "与此同时，居民消费价格温和上涨，就业形势总体稳定，城镇调查失业率为百分之五点零。",
      "在北京、上海、广州等大城市，新能源汽车的销量持续攀升，充电设施的建设也在加快推进。",
      "记者在采访中了解到，不少企业正在加大研发投入，努力提高产品的技术含量和市场竞争力。"]
ZH_GBK_ONLY = "前国务院总理朱镕基曾多次到访该市，市民王喆和李堃在街头接受了记者采访。"  # 镕喆堃: GBK, not GB2312
ZH_GB18030_ONLY = "汉字“䶮”和“𠀀”只能用四字节的国标编码表示，在网页上并不多见。"  # not in GBK
ZH_TW = ["臺北市政府今天宣布，明年起將擴大公共運輸補助，鼓勵市民多搭乘捷運與公車。",
         "交通局表示，這項政策預計每年可以減少數萬噸的碳排放，並改善市區的空氣品質。",
         "許多通勤族對此表示歡迎，但也有民眾希望政府同時增加班次，縮短等車的時間。",
         "市議員則提醒，補助經費必須妥善規劃，避免對市府財政造成過大的負擔。"]
JA = ["東京都は今日、新しい防災計画を発表しました。地震や台風に備えて、避難所の数を増やす方針です。",
      "計画では、住民への情報提供を強化するため、スマートフォン向けのアプリも開発されます。",
      "専門家は、日頃から家族で避難の方法を話し合っておくことが大切だと指摘しています。",
      "都の担当者は、来年の春までに全ての区で訓練を実施したいと話しています。"]
KO = ["서울시는 오늘 대중교통 요금을 내년부터 인상한다고 발표했습니다.",
      "시민들의 부담을 줄이기 위해 환승 할인 제도는 그대로 유지됩니다.",
      "시 관계자는 운영 적자가 계속 늘어나고 있어 요금 조정이 불가피하다고 설명했습니다.",
      "일부 시민 단체는 요금 인상에 앞서 서비스 개선이 먼저 이루어져야 한다고 주장했습니다."]
RU = ["Правительство объявило о новой программе поддержки малого и среднего бизнеса.",
      "Предприниматели смогут получить льготные кредиты и налоговые каникулы на два года.",
      "По словам министра, программа поможет создать тысячи новых рабочих мест в регионах.",
      "Эксперты считают, что реальный эффект станет заметен не раньше следующего года."]
FR = ["Le conseil municipal a voté mercredi le budget de l’année prochaine.",
      "Les élus ont débattu pendant près de trois heures des dépenses prévues pour les écoles.",
      "« C’est un budget équilibré », a déclaré le maire à l’issue de la séance."]


def page(paras: list[str], meta: str = "", title: str | None = None) -> str:
    """A realistic page: head with scripts and styles, navigation, paragraphs, footer."""
    title = title or paras[0][:16]
    body = "\n".join(f"<p>{p}</p>" for p in paras)
    return (f"<!DOCTYPE html>\n<html>\n<head>\n{meta}<title>{title}</title>\n"
            '<link rel="stylesheet" href="/static/css/main.css">\n'
            '<script src="/static/js/jquery.min.js"></script>\n</head>\n<body>\n'
            '<div id="nav"><a href="/">home</a> | <a href="/news/">news</a></div>\n'
            f'<div class="content">\n{body}\n</div>\n<div id="footer">Copyright 2015 example.com</div>\n'
            "</body>\n</html>\n")


# (name, text paragraphs, Python codec to write the page in, codec the decoder must report)
PAGES = [
    ("gbk", ZH + [ZH_GBK_ONLY], "gbk", "gb18030"),
    ("gb18030", ZH + [ZH_GB18030_ONLY], "gb18030", "gb18030"),
    ("big5", ZH_TW, "big5", "big5hkscs"),
    ("shift_jis", JA, "shift_jis", "cp932"),
    ("euc_jp", JA, "euc_jp", "euc_jp"),
    ("euc_kr", KO, "euc_kr", "cp949"),
    ("cp1251", RU, "cp1251", "cp1251"),
    ("utf-8", ZH + JA + KO, "utf-8", "utf-8"),
]


@pytest.fixture(params=["uchardet", "charset-normalizer"])
def detector(request, monkeypatch):
    """Run the test with each detector (uchardet only where resiliparse is installed)."""
    charset.detector.cache_clear()
    if request.param == "uchardet":
        pytest.importorskip("resiliparse.parse.encoding")
    else:
        from charset_normalizer import from_bytes

        def normalizer(body):
            best = from_bytes(body).best()
            return best.encoding if best else None
        monkeypatch.setattr(charset, "detector", lambda: ("charset-normalizer", normalizer))
    assert charset.detector()[0] == request.param
    return request.param


# ----------------------------------------------------------------------------- declared, undeclared, mislabelled


@pytest.mark.parametrize("name,paras,encoding,codec", PAGES, ids=[p[0] for p in PAGES])
def test_undeclared_pages_are_detected(detector, name, paras, encoding, codec):
    html = page(paras)
    d = decode_html(html.encode(encoding))
    assert d.text == html  # exactly the text a browser shows
    assert (d.charset, d.source, d.suspect) == (codec, "detected", None)


@pytest.mark.parametrize("name,paras,encoding,codec", PAGES, ids=[p[0] for p in PAGES])
def test_declared_pages(name, paras, encoding, codec):
    label = {"gbk": "gb2312", "euc_jp": "EUC-JP", "euc_kr": "euc-kr", "cp1251": "windows-1251"}.get(name, name)
    meta = page(paras, f'<meta charset="{label}">\n')
    assert decode_html(meta.encode(encoding)) == (meta, codec, "meta", None)
    http_equiv = page(paras, f'<meta http-equiv="Content-Type" content="text/html; charset={label}">\n')
    assert decode_html(http_equiv.encode(encoding)) == (http_equiv, codec, "meta", None)
    plain = page(paras)
    assert decode_html(plain.encode(encoding), f"  {label.upper()} ") == (plain, codec, "http", None)


def test_gb2312_declared_with_gbk_and_gb18030_characters():
    # WHATWG reads gb2312 and gbk as gb18030: characters outside GB2312 are no decode error, € as 0x80 neither
    html = page(ZH + [ZH_GBK_ONLY, ZH_GB18030_ONLY], '<meta charset="gb2312">')
    assert decode_html(html.encode("gb18030")) == (html, "gb18030", "meta", None)
    euro = "价格：100€".encode("gb18030").replace("€".encode("gb18030"), b"\x80")
    assert decode_html(euro, "gb2312").text == "价格：100€"


def test_utf8_declared_but_gbk_bytes(detector):
    html = page(ZH + [ZH_GBK_ONLY], '<meta charset="utf-8">')
    d = decode_html(html.encode("gbk"))
    assert (d.text, d.charset, d.source) == (html, "gb18030", "detected")
    d = decode_html(page(ZH).encode("gbk"), "utf-8")  # the HTTP header lies the same way
    assert (d.text, d.source) == (page(ZH), "detected")


def test_latin1_declared_means_windows_1252():
    html = page(FR, '<meta charset="iso-8859-1">')
    assert decode_html(html.encode("cp1252")) == (html, "cp1252", "meta", None)
    # bytes windows-1252 leaves undefined read as C1 controls (WHATWG), not as a decode error
    assert decode_html(b"<p>\x81\x8d caf\xe9</p>", "latin1").text == "<p>\x81\x8d café</p>"


def test_undeclared_latin_and_cp1252(detector):
    html = page(FR)
    d = decode_html(html.encode("cp1252"))
    assert (d.text, d.charset, d.suspect) == (html, "cp1252", None)


def test_boms_win_over_declarations():
    html = page(ZH, '<meta charset="gbk">')
    assert decode_html(b"\xef\xbb\xbf" + html.encode(), "iso-8859-1") == (html, "utf-8", "bom", None)
    assert decode_html(b"\xff\xfe" + html.encode("utf-16-le")) == (html, "utf-16-le", "bom", None)
    assert decode_html(b"\xfe\xff" + html.encode("utf-16-be")) == (html, "utf-16-be", "bom", None)


# ----------------------------------------------------------------------------- fitting nothing


def test_few_unreadable_bytes_are_replaced_many_are_a_decode_error():
    html = page(ZH * 4)
    damaged = html.encode() + b"\xff"  # one stray byte in a UTF-8 page: read, with one U+FFFD
    d = decode_html(damaged, "utf-8")
    assert (d.text, d.charset, d.source) == (html + "\ufffd", "utf-8", "fallback")
    # half UTF-8, half GBK: no encoding reads it, and either leaves far more than 1 % unreadable
    mixed = page(ZH[:2]).encode() + page(ZH[2:]).encode("gbk")
    with pytest.raises(DecodeError, match="fit none of"):
        decode_html(mixed, "utf-8")
    assert decode_html(mixed, "utf-8", max_replaced=0.5).source == "fallback"
    # what the read stage sets from input.max_replaced_share
    with charset.replaced_limit(0.0), pytest.raises(DecodeError):
        decode_html(damaged, "utf-8")


def test_max_replaced_share_is_validated():
    assert InputConfig(path="x").max_replaced_share == 0.01
    with pytest.raises(ValidationError):
        InputConfig(path="x", max_replaced_share=1.5)


# ----------------------------------------------------------------------------- mojibake check


def test_mojibake_is_flagged():
    # a page that declares latin-1 and holds GBK / UTF-8 bytes reads as the browser shows it, but is flagged
    gbk = decode_html(page(ZH, '<meta charset="iso-8859-1">').encode("gbk"))
    assert (gbk.charset, gbk.source, gbk.suspect) == ("cp1252", "meta", "gb18030")
    utf8 = decode_html(page(FR + ZH[:1], '<meta charset="windows-1252">').encode())
    assert (utf8.charset, utf8.suspect) == ("cp1252", "utf-8")
    # real Latin, Cyrillic text in its single-byte encoding is not
    assert decode_html(page(FR, '<meta charset="windows-1252">').encode("cp1252")).suspect is None
    assert decode_html(page(RU).encode("cp1251"), "windows-1251").suspect is None
    assert mojibake_suspect("Übersicht über Höhepunkte".encode("cp1252"), "Übersicht über Höhepunkte", "cp1252") \
        is None


# ----------------------------------------------------------------------------- <meta> prescan and labels


@pytest.mark.parametrize("head,codec", [
    ('<meta charset="gbk">', "gb18030"),
    ("<META CHARSET=Shift_JIS>", "cp932"),
    ('<meta http-equiv="Content-Type" content="text/html; charset=x-sjis">', "cp932"),
    ("<meta content='text/html;charset=\"big5\"' http-equiv=content-type>", "big5hkscs"),
    ('<meta content="text/html; charset=gbk">', None),  # content= without http-equiv: not a declaration
    ('<!-- <meta charset="gbk"> --><meta charset="euc-kr">', "cp949"),
    ('<div title="a > b"><meta charset="koi8-r">', "koi8-r"),
    ('<meta charset="utf-16le">', "utf-8"),  # a <meta> read as ASCII cannot mean UTF-16
    ('<meta charset="x-user-defined">', "cp1252"),
    ('<meta charset="no-such-charset"><meta charset="gbk">', "gb18030"),
    ('<meta charset="iso-2022-kr">', None),  # WHATWG's "replacement": detect instead
    ("<p>" + "x" * 2000 + '</p><meta charset="gb2312">', "gb18030"),  # a later <meta> counts (browsers reparse)
])
def test_prescan(head, codec):
    assert prescan(f"<html><head>{head}</head><body>text</body>".encode()) == codec


def test_whatwg_labels():
    assert [web_codec(x) for x in ("GB2312", "gbk", "x-gbk", "iso-8859-1", "ascii", "x-sjis", "windows-31j",
                                   "ks_c_5601-1987", "tis-620", "iso-8859-9", "big5", " utf8 ", "latin-1")] == \
        ["gb18030", "gb18030", "gb18030", "cp1252", "cp1252", "cp932", "cp932", "cp949", "cp874", "cp1254",
         "big5hkscs", "utf-8", None]


# ----------------------------------------------------------------------------- readers and the read stage


def _warc(records: list[tuple[str, bytes]]) -> bytes:
    out = b""
    for n, (content_type, body) in enumerate(records):
        block = (f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body)
        head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{n:08d}-0000-4000-8000-"
                f"000000000000>\r\nWARC-Target-URI: http://example.cn/{n}\r\nWARC-Date: 2024-05-18T01:58:10Z\r\n"
                f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n")
        out += gzip.compress(head.encode() + block + b"\r\n\r\n")
    return out


def test_warc_http_header_and_meta_disagree(tmp_path):
    gbk_meta = page(ZH, '<meta charset="gbk">')
    latin_meta = page(ZH, '<meta charset="iso-8859-1">')
    path = tmp_path / "cn.warc.gz"
    path.write_bytes(_warc([
        ("text/html; charset=GBK", latin_meta.encode("gbk")),    # HTTP right, <meta> wrong: HTTP wins
        ("text/html; charset=utf-8", gbk_meta.encode("gbk")),    # HTTP wrong (does not fit), <meta> right
        ("text/html; charset=iso-8859-1", gbk_meta.encode("gbk")),  # HTTP fits but is wrong: browsers follow it
    ]))
    items = list(iter_records(path))
    assert [(d["html"], d["charset"], d["charset_source"], d["mojibake_suspect"]) for d in items[:2]] == \
        [(latin_meta, "gb18030", "http", None), (gbk_meta, "gb18030", "meta", None)]
    assert (items[2]["charset"], items[2]["charset_source"], items[2]["mojibake_suspect"]) == \
        ("cp1252", "http", "gb18030")


def test_folder_of_undeclared_chinese_pages(tmp_path, detector):
    """The issue's case: a folder of real-looking Chinese pages that declare nothing; every one reads exactly."""
    root = tmp_path / "site"
    root.mkdir()
    want = {}
    for i in range(len(ZH)):  # each page its own selection of sentences, in GBK, GB18030, Big5 and UTF-8
        paras = ZH[i:] + ZH[:i] + [ZH_GBK_ONLY]
        for enc in ("gbk", "gb18030", "utf-8"):
            want[f"{enc}-{i}.html"] = page(paras), enc
        want[f"big5-{i}.html"] = page(ZH_TW[i % 4:] + ZH_TW[:i % 4]), "big5"
    want["gb18030-ext.html"] = page(ZH + [ZH_GB18030_ONLY]), "gb18030"
    want["mixed.html"] = None, None
    for name, (html, enc) in want.items():
        if html is not None:
            (root / name).write_bytes(html.encode(enc))
    (root / "mixed.html").write_bytes(page(ZH[:2]).encode() + page(ZH[2:]).encode("gbk"))

    items = list(iter_records(root))
    by_id = {d["id"]: d for d in items if isinstance(d, dict)}
    for name, (html, enc) in want.items():
        if html is not None:
            assert by_id[name]["html"] == html, name
            assert by_id[name]["charset_source"] == "detected"
            assert by_id[name]["charset"] == {"gbk": "gb18030", "big5": "big5hkscs"}.get(enc, enc)
    assert [(r.reason, r.detail.split(" (file")[0].rsplit("/", 1)[1]) for r in items if isinstance(r, Rejected)] \
        == [("decode_error", "mixed.html")]  # only bytes that fit nothing

    out = tmp_path / "out"
    stats = read_file_task(0, str(root), "html_dir", "text", "web", (1000, 1 << 30), stage_dir(out))
    n = len(want) - 1
    assert stats["removed"] == {"decode_error": 1}
    assert {k: v for k, v in stats["extra"].items() if k.startswith(("charset", "mojibake"))} == {
        "charset_source_detected": n, "charset_gb18030": 2 * len(ZH) + 1, "charset_utf-8": len(ZH),
        "charset_big5hkscs": len(ZH), "mojibake_suspect": 0}
    table = pq.read_table(next(out.glob("part-*.parquet")), columns=["id", "charset", "charset_source"])
    assert set(table.column("charset_source").to_pylist()) == {"detected"}
    rejects = [json.loads(line) for line in next((out / "rejects").glob("*.jsonl")).read_text().splitlines()]
    assert [r["reason"] for r in rejects] == ["decode_error"]


def test_flagged_pages_reach_the_audit_sample(tmp_path):
    """Pages the decoder suspects of mojibake are counted and some of them are added to the stage's audit sample,
    with the encoding they look like."""
    from gpupipe.report.audit import draw_sample

    root = tmp_path / "site"
    root.mkdir()
    for i in range(6):
        (root / f"ok-{i}.html").write_bytes(page(FR[i % len(FR):] + FR[:i % len(FR)]).encode())
    for i in range(3):   # declared latin-1, holding GBK bytes: read as the browser shows them, flagged
        (root / f"bad-{i}.html").write_bytes(page(ZH[i:] + ZH[:i], '<meta charset="iso-8859-1">').encode("gbk"))
    out = tmp_path / "00-read"
    stats = read_file_task(0, str(root), "html_dir", "text", "web", (1000, 1 << 30), stage_dir(out))
    assert stats["extra"]["mojibake_suspect"] == 3
    samples, info = draw_sample(out, size=4, seed=1)
    flagged = [s for s in samples if s["sample_id"].split(":")[1].startswith("m")]
    assert info["mojibake_suspect"] == 3 and len(flagged) == 3 and len(samples) == 4 + 3
    assert {s["id"] for s in flagged} == {f"bad-{i}.html" for i in range(3)}
    assert {s["mojibake_suspect"] for s in flagged} == {"gb18030"} and all(s["status"] == "kept" for s in flagged)
