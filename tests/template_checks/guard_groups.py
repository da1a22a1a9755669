"""cfn-guard over a set of templates, each with the Guard rule files that can apply to it, as one process.

Every Control Tower rule file selects the resources it checks by type (`Resources.*[ Type == %X_TYPE ]`) and
applies only `when ... %selection not empty`, so a rule file that names none of a template's resource types
reports SKIP for it. cfn-guard's time grows with template size times the number of rule files (each rule walks
every resource), and a template here has about 32 of the 237 files applicable: running only those takes the
session's run from about 35 s to 14 s of CPU with the same findings (`tests/template_checks/test_guard.py` checks
that on the full rule set). A rule file that names no resource type runs on every template.

    python -m tests.template_checks.guard_groups GUARD RULES_DIR DATA.json [DATA.json ...]

Prints one JSON list of results (cfn-guard's `--structured` report, one entry per data file) and exits 19 when
a rule failed, 0 when none did, or with cfn-guard's own status (and its output) when a run itself failed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FAILED = 19
"""cfn-guard's exit status when a rule reports a resource not compliant."""

_TYPE = re.compile(r"""["'](AWS::[A-Za-z0-9]+::[A-Za-z0-9]+)["']""")


def rule_types(rules_dir: Path) -> dict[Path, frozenset[str]]:
    """Each rule file under `rules_dir` -> the resource types it names."""
    return {
        path: frozenset(_TYPE.findall(path.read_text(encoding="utf-8"))) for path in sorted(rules_dir.rglob("*.guard"))
    }


_RULE = re.compile(r"^rule\s+(\w+)(\s*\([^)]*\))?\s*(?:when\s+(.*?))?\{", re.M | re.S)
_LET = re.compile(r"^let\s+(\w+)\s*=\s*(.*?)(?=^\S|\Z)", re.M | re.S)
_TYPE_SELECTION = re.compile(r"Resources(\.\*)?\s*\[\s*Type\s*(==|in)\s")


def ungated_rules(text: str) -> list[str]:
    """The rules of a rule file that could report on a template holding none of the types the file names: every
    rule that is not parameterised (those run only when another calls them) must apply only to hook input
    (`is_cfn_hook(...)`) or `when` a type selection (`let x = Resources.*[ Type == ... ]`) is `not empty`."""
    text = re.sub(r"#.*", "", text)
    lets = dict(_LET.findall(text))
    found = []
    for name, parameters, condition in _RULE.findall(text):
        if parameters or re.search(r"is_cfn_hook\(%INPUT_DOCUMENT,\s*%\w+\)", condition):
            continue
        selections = [lets.get(v, "") for v in re.findall(r"%(\w+)\s+not\s+empty", condition)]
        if not any(_TYPE_SELECTION.search(selection) for selection in selections):
            when = " ".join(condition.split())[:100]
            found.append(f"rule {name} when {when}" if when else f"rule {name}")
    return found


def applicable(types: set[str], rules: dict[Path, frozenset[str]]) -> tuple[Path, ...]:
    """The rule files that can report on a template of these resource types (those naming none: always)."""
    return tuple(path for path, named in rules.items() if not named or named & types)


def template_types(data: Path) -> set[str]:
    resources: dict[str, Any] = json.loads(data.read_text(encoding="utf-8")).get("Resources", {})
    return {str(r.get("Type")) for r in resources.values()}


def groups(rules_dir: Path, data: list[Path]) -> dict[tuple[Path, ...], list[Path]]:
    """The data files by the rule files that apply to them (one cfn-guard run each)."""
    rules = rule_types(rules_dir)
    by_rules: dict[tuple[Path, ...], list[Path]] = defaultdict(list)
    for path in data:
        by_rules[applicable(template_types(path), rules)].append(path)
    return dict(by_rules)


def validate_args(guard: str, rules: Iterable[Path], data: Iterable[Path]) -> list[str]:
    """cfn-guard's command line for `rules` (files or directories) over `data`, reporting as JSON."""
    args = [guard, "validate", *(a for r in rules for a in ("--rules", str(r)))]
    args += [*(a for f in data for a in ("--data", str(f))), "--output-format", "json"]
    return [*args, "--show-summary", "none", "--structured"]


def main(argv: list[str]) -> int:
    guard, rules_dir, data = argv[0], Path(argv[1]), [Path(a) for a in argv[2:]]
    report: list[Any] = []
    status = 0
    for rules, files in groups(rules_dir, data).items():
        # Where no rule file names a type of the template, the whole directory runs (cfn-guard's own SKIP report).
        run = subprocess.run(validate_args(guard, rules or (rules_dir,), files), capture_output=True, text=True)
        if run.returncode not in (0, FAILED):
            print(run.stdout + run.stderr)
            return run.returncode
        report += json.loads(run.stdout)
        status = max(status, run.returncode)
    json.dump(report, sys.stdout, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
