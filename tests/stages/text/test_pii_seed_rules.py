"""PII as the seeds write it (issue #35, item 3): SSNs redacted (seed 001 §2.3.5), and seed 002's placeholder names
by one switch."""

import pandas as pd
import pytest

from gpupipe.stages.base import RunContext
from gpupipe.stages.text.pii import PiiConfig, PiiRedactor, redact_text, ssn_valid


def _redact(texts: list[str], **params) -> tuple[list[str], dict]:
    stage = PiiRedactor(PiiConfig(**params), RunContext())
    stage.setup()
    df = pd.DataFrame({"id": [str(i) for i in range(len(texts))], "doc_index": range(len(texts)), "text": texts})
    kept, _, stats = stage.run_partition(df)
    return kept["text"].tolist(), stats.extra


@pytest.mark.parametrize("text, expected", [
    ("SSN: 078-05-1120.", "SSN: [SSN_REDACTED]."),
    ("my social security number is 219-09-9999, not yours", "my social security number is [SSN_REDACTED], not yours"),
    ("社会安全号 123-45-6789。", "社会安全号 [SSN_REDACTED]。"),
])
def test_ssn_redacted(text, expected):
    assert redact_text(text)[0] == expected


@pytest.mark.parametrize("text", [
    "000-12-3456", "666-12-3456", "912-34-5678", "123-00-4567", "123-45-0000",   # never issued
    "2023-01-1234", "123-45-67890", "1.123-45-6789", "123-45-6789-1", "123 45 6789", "123456789",   # other numbers
])
def test_ssn_look_alikes_stay(text):
    assert redact_text(text)[0] == text


def test_ssn_valid():
    assert ssn_valid("078-05-1120") and not ssn_valid("900-05-1120") and not ssn_valid("078-00-1120")


def test_stage_counts_ssn_and_can_leave_it_out():
    text = "Employee 078-05-1120, phone 13812345678"
    got, extra = _redact([text])
    assert got == ["Employee [SSN_REDACTED], phone [PHONE_REDACTED]"] and extra["redacted_ssn"] == 1
    assert _redact([text], types=["phone_cn"])[0] == ["Employee 078-05-1120, phone [PHONE_REDACTED]"]


def test_seed_placeholder_names_by_one_switch():
    text = ("13812345678 11010519491231002X 4111 1111 1111 1111 8.8.8.8 fe80::1:2:3 jane@example.com "
            "+1 415-555-0134 078-05-1120")
    got, _ = _redact([text], placeholder_names="seed")
    assert got == ["[PHONE_CN_REDACTED] [ID_CARD_CN_REDACTED] [CREDIT_CARD_REDACTED] [IP_ADDRESS_REDACTED] "
                   "[IP_ADDRESS_REDACTED] [EMAIL_REDACTED] [PHONE_US_REDACTED] [SSN_REDACTED]"]
    default, _ = _redact([text])
    assert default == ["[PHONE_REDACTED] [ID_REDACTED] [CARD_REDACTED] [IP_REDACTED] [IP_REDACTED] [EMAIL_REDACTED] "
                       "[PHONE_REDACTED] [SSN_REDACTED]"]
    # an explicit placeholder still wins over the switch
    got, _ = _redact([text], placeholder_names="seed", placeholders={"phone_cn": "[MOBILE]"})
    assert got[0].startswith("[MOBILE] [ID_CARD_CN_REDACTED]")
    with pytest.raises(ValueError):
        PiiConfig(placeholder_names="spec")
