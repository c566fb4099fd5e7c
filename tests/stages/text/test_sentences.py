from gpupipe.stages.text.sentences import split_sentences


def test_sentences_end_at_terminators_and_join_back():
    text = "第一句。第二句！“引号”？ Mr. Smith said so. Next one; and\nnew line 3.14 stays"
    parts = split_sentences(text)
    assert "".join(parts) == text
    assert parts[:3] == ["第一句。", "第二句！", "“引号”？ "]
    assert "3.14 stays" in parts[-1] and "new line " in parts[-1]
    assert split_sentences("") == []
