"""Python's cycle collector in the processes that run tests (tests/conftest.py): what collecting the tests imported
is frozen, and young-generation passes are rare, so that full passes do not walk aws_cdk's modules again and again."""

from __future__ import annotations

import gc


def test_this_test_process_froze_what_it_imported_and_collects_rarely() -> None:
    # pytest and this module alone are tens of thousands of objects (a full run: about a million); unfrozen, 0.
    assert gc.get_freeze_count() > 10_000
    assert gc.get_threshold()[0] == 20_000
