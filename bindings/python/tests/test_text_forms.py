"""format_id and parse_id: CosId's text forms with their options, as the core reads them."""

from __future__ import annotations

import pytest

import cosid

# The id of CosId's friendly converter test, and its text in each setting.
ID = 295913926632165376
CASES = [
    ("dec", "295913926632165376"),
    ("hex", "41b4c2601005000"),
    ("base62", "0LrHucXALbs"),
    ("radix62,pad-start=false", "LrHucXALbs"),
    ("radix36", "028XOQD7HM874"),
    ("radix36,pad-start=false,char-size=12", "28XOQD7HM874"),
    ("friendly", "20220320053617924-5-0"),
    ("friendly,zone=Asia/Shanghai", "20220320133617924-5-0"),
    ("friendly,zone=+08:00,pad-start=true", "20220320133617924-0005-0000"),
    ("radix62,prefix=ORD%2C,suffix=.x", "ORD,0LrHucXALbs.x"),
    ("dec,pad-start=true,char-size=19", "0295913926632165376"),
]


@pytest.mark.parametrize(("spec", "text"), CASES)
def test_each_setting_writes_and_reads_cosid_text(spec: str, text: str) -> None:
    assert cosid.format_id(ID, spec) == text
    assert cosid.parse_id(text, spec) == ID
    assert cosid.parse_id(text, spec, layout="millis") == ID


def test_second_layouts_write_14_digits() -> None:
    text = cosid.format_id(ID, "friendly", layout="seconds")
    assert len(text.split("-")[0]) == 14
    assert cosid.parse_id(text, "friendly", layout="seconds") == ID
    with pytest.raises(cosid.InvalidArgumentError, match="not exactly 17 digits"):
        cosid.parse_id(text, "friendly")


def test_a_runtime_layout_is_taken(rt: cosid.Runtime) -> None:
    id = rt.next()
    spec = "friendly,zone=America/New_York,pad-start=true"
    text = cosid.format_id(id, spec, layout=rt.layout)
    assert cosid.parse_id(text, spec, layout=rt.layout) == id
    assert int(text.split("-")[1]) == rt.slot


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: cosid.format_id(ID, "radix16"), "is not an id format; expected dec, hex"),
        (lambda: cosid.format_id(ID, "friendly,zone=Mars/Base"), "is not a time zone"),
        (lambda: cosid.format_id(ID, "radix62,char-size=5"), "does not fit 5 radix-62 characters"),
        (lambda: cosid.format_id(ID, "dec", layout="minutes"), "is not a preset layout"),
        (lambda: cosid.parse_id("LrHucXALbs", "base62"), "exactly 11 characters"),
        (lambda: cosid.parse_id("20220320133617924-5-0", "friendly,pad-start=true"), "4 digits"),
        (lambda: cosid.parse_id("20210314023000000-1-0", "friendly,zone=America/New_York"),
         "does not exist in America/New_York"),
    ],
)
def test_bad_input_is_refused_with_what_is_expected(call, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(cosid.InvalidArgumentError, match=needle):
        call()


def test_wrong_argument_types_are_type_errors() -> None:
    with pytest.raises(TypeError, match="format must be a str"):
        cosid.format_id(ID, 62)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="id text must be a str"):
        cosid.parse_id(ID, "dec")  # type: ignore[arg-type]


def test_a_date_prefix_is_today_in_its_zone() -> None:
    import datetime

    spec = "dec,prefix=P,date-prefix=yyyy-MM-dd,date-delimiter=_"
    days = {datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
    text = cosid.format_id(42, spec)
    days.add(datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    assert text[0] == "P" and text[1:11] in days and text[11:] == "_42"
    assert cosid.parse_id(text, spec) == 42
    with pytest.raises(cosid.InvalidArgumentError, match="no date of the pattern"):
        cosid.parse_id("P2024-02-30_42", spec)
    with pytest.raises(cosid.InvalidArgumentError, match="without date-prefix"):
        cosid.format_id(42, "dec,date-delimiter=_")
