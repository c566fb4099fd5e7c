"""PII redaction: true positives per type and context, look-alikes left alone, stats, and the synthetic crawl."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpupipe.stages.base import RunContext
from gpupipe.stages.text.pii import (PII_BY_NAME, PII_TYPES, PiiConfig, PiiRedactor, card_valid, cn_id_valid,
                                luhn_valid, redact_text)

EMAIL, PHONE, ID, CARD, IP = "[EMAIL_REDACTED]", "[PHONE_REDACTED]", "[ID_REDACTED]", "[CARD_REDACTED]", "[IP_REDACTED]"
VALID_ID = "11010519491231002X"      # the textbook example: Beijing, 1949-12-31, check digit X
VALID_ID_2 = "440306199003071232"


def _stage(**params) -> PiiRedactor:
    stage = PiiRedactor(PiiConfig(**params), RunContext())
    stage.setup()
    return stage


def _run(texts: list[str], **params):
    df = pd.DataFrame({"id": [str(i) for i in range(len(texts))], "doc_index": range(len(texts)), "text": texts})
    return _stage(**params).run_partition(df)


def red(text: str, **kw) -> str:
    return redact_text(text, **kw)[0]


# ---------------------------------------------------------------------------- true positives
@pytest.mark.parametrize("text, expected", [
    # e-mail
    ("jane.doe@example.com", EMAIL),
    ("Write to <john_smith+news@mail.example.org>.", f"Write to <{EMAIL}>."),
    ("请发送邮件至wang.fang@qq.com。", f"请发送邮件至{EMAIL}。"),
    ("邮箱：li.wei@163.com，电话：13812345678。", f"邮箱：{EMAIL}，电话：{PHONE}。"),
    ("13812345678@qq.com", EMAIL),   # e-mail runs first: the phone inside it does not split it
    # Chinese mobile
    ("电话：13812345678。", f"电话：{PHONE}。"),
    ("13812345678", PHONE),
    ("拨打 158 1234 5678 联系我们", f"拨打 {PHONE} 联系我们"),
    ("call +86 138-1234-5678!", f"call {PHONE}!"),
    ("（手机18612345678）", f"（手机{PHONE}）"),
    # US / international
    ("Call +1 415-555-0134.", f"Call {PHONE}."),
    ("(415) 555-0134", PHONE),
    ("office: 415.555.0134; fax 1-800-555-0199", f"office: {PHONE}; fax {PHONE}"),
    ("London +44 20 7946 0958, Paris +33 1 23 45 67 89", f"London {PHONE}, Paris {PHONE}"),
    ("+49 30 1234567 / +34 600 123 456 / +7 912 345-67-89", f"{PHONE} / {PHONE} / {PHONE}"),
    ("+44 (0)20 7946 0958", PHONE),
    # Chinese resident ID
    (f"身份证号：{VALID_ID}。", f"身份证号：{ID}。"),
    (f"ID {VALID_ID.lower()}", f"ID {ID}"),
    (f"{VALID_ID_2},", f"{ID},"),
    # bank cards
    ("Visa 4111 1111 1111 1111.", f"Visa {CARD}."),
    ("4111-1111-1111-1111", CARD),
    ("卡号：6212260000123456，", f"卡号：{CARD}，"),
    ("Amex 3782 822463 10005", f"Amex {CARD}"),
    ("MC 2221 0000 0000 0009", f"MC {CARD}"),
    ("银联卡621226000012345675", f"银联卡{CARD}"),   # 18 digits, not an ID: region 62 ok, date 0000 is not
    # IP addresses
    ("from 192.168.1.1, then 8.8.8.8.", f"from {IP}, then {IP}."),
    ("服务器地址：10.0.0.255。", f"服务器地址：{IP}。"),
    ("0.0.0.0", IP),
    ("v6 2001:db8::8a2e:370:7334 or fe80::1", f"v6 {IP} or {IP}"),
])
def test_redacts(text, expected):
    assert red(text) == expected


# ---------------------------------------------------------------------------- look-alikes
@pytest.mark.parametrize("text", [
    "4111 1111 1111 1112",                  # Luhn fails
    "4111111111111112",
    "11010519491231002Y",                   # not a check character
    "110105194912310021",                   # wrong check digit
    "110105199902300027",                   # 1999-02-30 is not a date (check digit is right)
    "990105194912310024",                   # province 99 does not exist (check digit is right)
    "999.1.1.1", "1.2.3.4.5", "256.1.1.1", "01.02.03.04", "version 10.0.19041.1",
    "order no. 12345678901234567890",       # 20 digits: too long for a card or an ID, no phone inside
    "years 2019-2023", "price $1,234.56", "¥13,812,345,678",
    "2023-11-14 22:13:20", "ts=1700000000000", "web.archive.org/web/20131030132228/http://x.fr",
    "at 12:30:45", "a[1::2]", "std::vector",
    "3.13812345678", "x13812345678", "12812345678", "138123456789",
    "+1 234", "+15% in 2019", "123-456-7890",   # NANP: no area code starts with 1
    "0000 0000 0000 0000", "user@localhost", "a@b.c",
])
def test_leaves_look_alikes(text):
    assert red(text) == text


def test_validators():
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")
    assert card_valid("4111 1111 1111 1111") and not card_valid("1700000000000")   # MII 1: not a payment card
    assert cn_id_valid(VALID_ID) and cn_id_valid(VALID_ID_2) and not cn_id_valid("31011520500229456X")  # future


def test_validated_checks_pass_only_on_the_right_digit():
    body = VALID_ID[:17]
    ok = [c for c in "0123456789X" if red(body + c) == ID]
    assert ok == ["X"]
    ok = [d for d in "0123456789" if red("4111 1111 1111 111" + d) == CARD]
    assert ok == ["1"]


def test_overlap_order_is_fixed():
    # An 18-digit valid ID that is also Luhn-valid would be both: the ID type runs first.
    assert [t.name for t in PII_TYPES][:3] == ["email", "ipv6", "ip_address"]
    text = f"{VALID_ID_2} 4111111111111111 13812345678 jane@example.com 1.2.3.4"
    assert red(text) == f"{ID} {CARD} {PHONE} {EMAIL} {IP}"
    # the order of `types` in the config does not change anything
    assert red(text, types=["phone_cn", "email"]) == red(text, types=["email", "phone_cn"])


def test_types_and_placeholders_are_configurable():
    text = "jane@example.com 13812345678"
    assert red(text, types=["phone_cn"]) == f"jane@example.com {PHONE}"
    assert red(text, placeholders={"phone_cn": "[PHONE_CN_REDACTED]"}) == f"{EMAIL} [PHONE_CN_REDACTED]"
    with pytest.raises(ValidationError):
        PiiConfig(types=["passport"])
    with pytest.raises(ValidationError):
        PiiConfig(drop_if_more_than=-1)
    with pytest.raises(ValidationError):
        PiiConfig(bogus=1)
    with pytest.raises(ValidationError):
        PiiConfig(placeholders={"email": "[MAIL_1]"})   # a phone or card pattern could bite into it


# ---------------------------------------------------------------------------- the stage
def test_stage_counts_per_type_and_never_drops_by_default():
    texts = ["no pii here, 2019-2023", f"jane@example.com and john@example.org, {VALID_ID}",
             "电话：13812345678。IP 10.1.2.3", None, ""]
    kept, rejects, stats = _run(texts)
    assert len(kept) == 5 and len(rejects) == 0 and stats.docs_out == 5
    assert kept["text"].tolist()[:3] == ["no pii here, 2019-2023", f"{EMAIL} and {EMAIL}, {ID}",
                                         f"电话：{PHONE}。IP {IP}"]
    assert pd.isna(kept["text"].iloc[3])
    assert kept["pii_email"].tolist() == [0, 2, 0, 0, 0]
    extra = dict(stats.extra)
    assert extra["redacted_email"] == 2 and extra["redacted_id_card_cn"] == 1
    assert extra["redacted_phone_cn"] == 1 and extra["redacted_ip_address"] == 1
    assert extra["redacted_credit_card"] == 0 and extra["docs_with_pii"] == 2


def test_stage_drops_excess_pii():
    texts = ["a@example.com", "a@example.com b@example.com c@example.com", "clean"]
    kept, rejects, stats = _run(texts, drop_if_more_than=2)
    assert kept["id"].tolist() == ["0", "2"] and rejects["reason"].tolist() == ["pii_excess"]
    assert dict(stats.removed) == {"pii_excess": 1} and stats.extra["redacted_email"] == 1


def test_stage_with_no_types_is_identity():
    kept, _, stats = _run(["jane@example.com"], types=[])
    assert kept["text"].tolist() == ["jane@example.com"] and stats.extra["docs_with_pii"] == 0


def test_prefilters_find_every_true_positive():
    # A prefilter must be a superset of its regex, or the stage would miss what the reference redacts.
    samples = {"email": "x@example.com", "ipv6": "2001:db8::1", "ip_address": "1.2.3.4", "id_card_cn": VALID_ID,
               "credit_card": "3782 822463 10005", "phone_us": "(415) 555-0134", "phone_cn": "138 1234 5678"}
    for name, s in samples.items():
        assert red(s, types=[name]) != s, name
        assert pc.match_substring_regex(pa.array([s]), PII_BY_NAME[name].prefilter)[0].as_py(), name


PIECES = st.sampled_from([" ", "-", ".", ",", ":", "::", "(", ")", "+", "@", "x", "中", "。", "1", "13", "86", "0",
                          "4111", "1111", "138", "1234", "5678", "415", "555", "0134", "192", "168", "255",
                          "example.com", "jane", "db8", "2001", VALID_ID, "4111111111111111", "13812345678"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(PIECES, max_size=25).map("".join), min_size=1, max_size=6))
def test_stage_equals_reference(texts):
    kept, _, _ = _run(texts)
    assert kept["text"].tolist() == [red(t) for t in texts]


# ---------------------------------------------------------------------------- the synthetic crawl
@pytest.fixture(scope="module")
def truth_pages(tmp_path_factory):
    from gpupipe.synth import write_synthetic_crawl

    info = write_synthetic_crawl(tmp_path_factory.mktemp("pii") / "crawl.warc.gz", docs=400, seed=11)
    with open(info["truth"], encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    return [r for r in rows if r["main_text"]]


def test_synthetic_crawl_pii_is_redacted_and_nothing_else(truth_pages):
    pii = [p for p in truth_pages if p["kind"] == "pii"]
    assert len(pii) >= 20
    kept, _, stats = _run([p["main_text"] for p in pii])
    for page, got in zip(pii, kept["text"]):
        expected = page["main_text"]
        for s in page["pii"]:
            expected = expected.replace(s, EMAIL if "@" in s else PHONE)
        assert got == expected, (page["pii"], got)
    planted = [s for p in pii for s in p["pii"]]
    assert stats.extra["docs_with_pii"] == len(pii)
    assert stats.extra["redacted_email"] == sum("@" in s for s in planted)
    assert sum(v for k, v in stats.extra.items() if k.startswith("redacted_phone")) == \
        sum("@" not in s for s in planted)


def test_synthetic_crawl_other_pages_keep_their_text(truth_pages):
    others = [p for p in truth_pages if p["kind"] != "pii"]
    assert sum(p["kind"] == "clean" for p in others) >= 200
    kept, _, stats = _run([p["main_text"] for p in others])
    assert kept["text"].tolist() == [p["main_text"] for p in others]
    assert stats.extra["docs_with_pii"] == 0
