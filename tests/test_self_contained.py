"""The repository stands on its own: no text points at documents that are not in it.

Comments and docs give their reason and, for an outside fact, a public source (an AWS documentation page, a GitHub
issue, a paper). Pointers to files that only existed next to the repository while it was written (a design file,
a domain reference with numbered pitfalls and sections, toolchain notes, review notes, a style guide) tell a reader
nothing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

OUTSIDE_REFERENCES = re.compile(
    "|".join(
        [
            r"\b(?:domain|design|toolchain|style|deploy-review)\.md\b",  # the documents by name
            r"\bdeploy-review\b",
            r"shared/reference",
            r"\bpitfall\s+P?\d+",  # "pitfall P5"
            r"\bP\d{1,2}\)",  # "(P2)", "components, P13)"
            r"\(§\s?\d",  # a bare section pointer "(§2.3)" with no document named
            r"§\s?\d+(?:\.\d+)*\s+item\s+\d",  # "§10 item 2"
        ]
    ),
    re.IGNORECASE,
)

KNOWN_OFFENDERS: set[str] = set()


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
        ).stdout
        return out.splitlines()
    except (OSError, subprocess.SubprocessError):  # not a git checkout (e.g. an unpacked sdist)
        skip = {".git", ".venv", ".venv-checkov", ".tools", "node_modules", "cdk.out", ".stamps"}
        return [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]


def _offences() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name in _tracked_files():
        if name == THIS:
            continue  # the pattern list above
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the work tree
        lines = [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)]
        hits = [line for line in lines if OUTSIDE_REFERENCES.search(line.split(": ", 1)[1])]
        if hits:
            found[name] = hits
    return found


def test_no_text_refers_to_a_document_outside_the_repository() -> None:
    offences = _offences()
    new = [line for name, hits in sorted(offences.items()) if name not in KNOWN_OFFENDERS for line in hits]
    assert not new, "references to documents outside the repository:\n" + "\n".join(new)


def test_known_offenders_still_offend() -> None:
    # An entry whose file is clean must leave the list, so the list only ever shrinks.
    assert sorted(KNOWN_OFFENDERS - set(_offences())) == []


def test_the_patterns_catch_what_they_are_meant_to() -> None:
    for text in [
        "see domain.md §2.3",
        "(DESIGN.md decision)",
        "toolchain.md §4",
        "shared/reference/domain.md",
        "Pitfall P5: a device plugin",
        "never a public IP (P2).",
        "add FI_EFA_USE_HUGE_PAGE=0 (§2.3).",
        "(domain §10 item 2)",
        "from the deploy-review notes",
    ]:
        assert OUTSIDE_REFERENCES.search(text), text
    for text in [
        "p5.48xlarge",
        "P4/P5 on-demand price cut",
        "All P4, P3 and P2 Spot Instance Requests",
        "P6-B300 card 0",
        "arXiv:2407.21783 §3.3.4",
        "Rajbhandari et al. 2020, §3/§5",
        "README.md",
    ]:
        assert not OUTSIDE_REFERENCES.search(text), text
