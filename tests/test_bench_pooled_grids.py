"""bench/pooled_grids.py keeps a page's earlier comparisons as they were computed: a comparison asked for again
replaces its row in place, a new one is added after them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from pooled_grids import merged_rows

COLUMNS = ["task", "A", "B", "grids", "n", "BLEU_A"]
PAGE = """# Configurations compared

| task | A | B | grids | n | BLEU_A |
|---|---|---|---|---|---|
| translate | old,old-grid-1 | x,x-grid-1 | 2 | 20 | 15.000 |
| translate | old,old-grid-1 | y,y-grid-1 | 2 | 20 | 15.000 |

## Reading

| translate | not | a row | 2 | 20 | 1.000 |
"""


def _row(a: str, b: str, bleu: float) -> dict[str, object]:
    return {"task": "translate", "A": a, "B": b, "grids": 2, "n": 20, "BLEU_A": bleu}


def test_earlier_rows_are_kept_a_row_asked_again_replaced_a_new_one_added() -> None:
    rows = [_row("new,new-grid-1", "z,z-grid-1", 16.0), _row("old,old-grid-1", "y,y-grid-1", 17.0)]
    assert merged_rows(PAGE, "task", rows, COLUMNS) == [
        "| translate | old,old-grid-1 | x,x-grid-1 | 2 | 20 | 15.000 |",  # kept as computed then
        "| translate | old,old-grid-1 | y,y-grid-1 | 2 | 20 | 17.000 |",  # asked again: replaced in place
        "| translate | new,new-grid-1 | z,z-grid-1 | 2 | 20 | 16.000 |",  # new: after the earlier rows
    ]


def test_a_page_without_that_table_gets_the_rows_alone() -> None:
    rows = [_row("a", "b", 1.0)]
    assert merged_rows("", "task", rows, COLUMNS) == ["| translate | a | b | 2 | 20 | 1.000 |"]
    assert merged_rows(PAGE, "set", [], ["set", *COLUMNS[1:]]) == []


def test_the_key_may_end_at_another_column() -> None:
    # (bench/translate_agreement.py keys its rows by data set and config: the columns before its count "n")
    rows = [{"task": "translate", "A": "old,old-grid-1", "B": "other", "grids": 2, "n": 20, "BLEU_A": 9.0}]
    merged = merged_rows(PAGE, "task", rows, COLUMNS, key_until="B")
    assert merged == ["| translate | old,old-grid-1 | other | 2 | 20 | 9.000 |",  # both earlier rows share the key
                      "| translate | old,old-grid-1 | y,y-grid-1 | 2 | 20 | 15.000 |"]
