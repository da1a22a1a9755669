"""The committed pictures under docs/ are the ones the current blueprints draw (`make diagrams` refreshes them).

Compared as DOT text from this session's synthesized templates (no second synth, no Graphviz needed); the
SVG carries the hash of the DOT it was drawn from, so a picture left behind by a changed DOT fails too.
"""

from __future__ import annotations

import pytest

from mlstack.config import BLUEPRINTS_DIR
from mlstack.diagram.__main__ import dot_sources, markdown, stamp
from tests.synth import ROOT, Session

DOCS = ROOT / "docs"
FIX = "run `make diagrams` and commit docs/"


def test_committed_dot_svg_and_png_match_each_blueprint(session: Session) -> None:
    for name, source in dot_sources(session).items():
        committed = DOCS / "diagrams" / f"{name}.dot"
        assert committed.exists(), f"{committed} missing: {FIX}"
        assert committed.read_text() == source, f"{committed} no longer matches blueprints/{name}.yaml: {FIX}"
        svg = (DOCS / "diagrams" / f"{name}.svg").read_text()
        assert stamp(source).replace("-", "&#45;") in svg, f"{name}.svg was not drawn from {name}.dot: {FIX}"
        assert (DOCS / "diagrams" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_blueprints_page_shows_each_blueprint_picture(session: Session) -> None:
    page = (DOCS / "blueprints.md").read_text()
    for name in session.blueprints:
        assert f"## {name}\n" in page and f"![{name}](diagrams/{name}.svg)" in page, f"{name}: {FIX}"
    if set(session.blueprints) == {p.stem for p in BLUEPRINTS_DIR.glob("*.yaml")}:
        assert page == markdown(session), FIX


@pytest.mark.parametrize(
    ("blueprint", "expected"),
    [
        # The labels come from the blueprint through the template: instance types, counts, EFA, FSx, paths.
        (
            "eks-gpu-training",
            [
                "node group p5\\np5.48xlarge\\n0 nodes (0-4)",
                "EFA: 32 interfaces per node",
                'label="EFA 3200 Gbps"',
                "FSx for Lustre\\nPERSISTENT_2 4800 GiB\\n250 MB/s/TiB",
                "node group system\\nm7i.xlarge\\n2 nodes (2-4)",
                'label="tcp 988, 1018-1023 (both ways)"',
                'label="use1-az4"',
                "Private 10.0.64.0/18",
            ],
        ),
        (
            "inference-serverless",
            [
                "variant AllTraffic\\nserverless 4096 MB, 20 concurrent\\n2 provisioned",
                # Serverless hosts run outside the VPC: the blueprint asks for no interface endpoint at all.
                "Gateway endpoints\\ns3",
            ],
        ),
    ],
)
def test_diagram_labels_read_the_blueprint(session: Session, blueprint: str, expected: list[str]) -> None:
    if blueprint not in session.blueprints:
        pytest.skip(f"{blueprint} not in MLSTACK_TEST_BLUEPRINTS")
    source = dot_sources(session)[blueprint]
    for text in expected:
        assert text in source
