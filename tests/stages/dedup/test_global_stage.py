"""gpupipe/stages/dedup/global_stage.py: all_but_first, the resolve() exact dedup and URL dedup share."""

import pandas as pd

from gpupipe.stages.base import RunContext
from gpupipe.stages.dedup.exact import ExactDedup
from gpupipe.stages.dedup.global_stage import all_but_first
from gpupipe.stages.filters.url_filter import UrlDedup

KEYS = pd.DataFrame({"h0": [7, 1, 7, 1, 7, 2, 1], "h1": [0, 5, 0, 6, 0, 9, 5],
                     "doc_index": [40, 31, 12, 8, 3, 77, 30], "part": [4, 3, 1, 0, 0, 7, 2]})


def test_first_in_input_order_stays_whatever_the_row_order():
    removals, counters = all_but_first(KEYS, "dup", "groups")
    # (7, 0): 3 stays, 12 and 40 go; (1, 5): 30 stays, 31 goes; (1, 6) and (2, 9) are alone
    assert sorted(removals["doc_index"]) == [12, 31, 40]
    assert dict(zip(removals["doc_index"], removals["part"])) == {12: 1, 31: 3, 40: 4}
    assert set(removals["reason"]) == {"dup"} and counters == {"groups": 2}
    shuffled, _ = all_but_first(KEYS.sample(frac=1, random_state=0), "dup", "groups")
    assert sorted(shuffled["doc_index"]) == [12, 31, 40]


def test_no_duplicates_and_no_rows():
    removals, counters = all_but_first(KEYS.iloc[[0, 1, 3, 5]], "dup", "groups")
    assert len(removals) == 0 and counters == {"groups": 0}
    removals, counters = all_but_first(KEYS.iloc[:0], "dup", "groups")
    assert len(removals) == 0 and list(removals.columns) == ["doc_index", "part", "reason"]


def test_exact_and_url_dedup_resolve_through_it():
    for stage, reason, counter in ((ExactDedup(ExactDedup.Config(), RunContext()), "exact_duplicate",
                                    "duplicate_groups"),
                                   (UrlDedup(UrlDedup.Config(), RunContext()), "duplicate_url", "duplicate_url_groups")):
        removals, counters = stage.resolve(KEYS)
        want, want_counters = all_but_first(KEYS, reason, counter)
        assert removals.equals(want) and counters == want_counters == {counter: 2}
