"""`mlstack.console`: the one problem printer and the one table renderer every command uses."""

from __future__ import annotations

import io

import pytest

from mlstack.console import print_problems, render_table
from mlstack.errors import BlueprintError


def test_table_with_headers_aligns_columns_and_right_aligns_the_ones_asked() -> None:
    text = render_table(["name", "n", "note"], [["a", "1", "x"], ["bbb", "22", ""]], right=[1])
    assert text.split("\n") == [
        "name   n  note",
        "----  --  ----",
        "a      1  x",
        "bbb   22",
    ]


def test_table_without_headers_is_a_bare_aligned_list() -> None:
    assert render_table(None, [["eks", "one"], ["inference-x", "two"]]) == "eks          one\ninference-x  two"


def test_table_with_no_rows_keeps_its_header() -> None:
    assert render_table(["stack", "count"], []) == "stack  count\n-----  -----"


def test_every_problem_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    print_problems(BlueprintError("a.yaml: first", "a.yaml: second"))
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "error: a.yaml: first\nerror: a.yaml: second\n"
    buffer = io.StringIO()
    print_problems(BlueprintError("only"), file=buffer)
    assert buffer.getvalue() == "error: only\n"
