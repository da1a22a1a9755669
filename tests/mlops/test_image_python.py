"""Every example script runs on the Python of the image that runs it (mlstack/catalog/data/sagemaker_images.yaml).

No CPython 3.9 interpreter comes from the package registries here (Debian has 3.11 only, PyPI has no CPython), so
the check is static: `vermin` reports the minimum Python each file needs (syntax, standard-library calls such as
zip(strict=...), and annotations evaluated at run time).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlstack.catalog.sagemaker_images import image_python, image_table
from mlstack.config import BLUEPRINTS_DIR, load
from mlstack.constructs.sagemaker.mlops_pipeline import EXAMPLE_SCRIPTS

MLOPS = sorted(p.stem for p in BLUEPRINTS_DIR.glob("mlops-*.yaml"))


def _vermin(target: str, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("vermin")),
            "--no-tips",
            "--violations",
            "--eval-annotations",
            f"-t={target}-",
            *files,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def _steps(name: str) -> list[tuple[str, str, str]]:
    """(script, image repository, tag) for each script of the blueprint, as the pipeline and the endpoint run it."""
    mlops = load(BLUEPRINTS_DIR / f"{name}.yaml").mlops
    assert mlops is not None
    images = mlops.images
    serving = images.serving or images.training
    return [
        ("preprocess.py", images.processing.repository, images.processing.tag),
        ("evaluate.py", images.processing.repository, images.processing.tag),
        ("train.py", images.training.repository, images.training.tag),
        # train.py copies itself into the model as code/inference.py: model_fn, input_fn, predict_fn serve from it.
        ("train.py", serving.repository, serving.tag),
    ]


@pytest.mark.parametrize("name", MLOPS)
def test_each_script_runs_on_the_python_of_its_image(name: str) -> None:
    for script, repository, tag in _steps(name):
        python = image_python(repository, tag)
        assert python is not None, f"{repository}:{tag} is not in sagemaker_images.yaml: add its Python version"
        result = _vermin(python, EXAMPLE_SCRIPTS / script)
        assert result.returncode == 0, f"{script} on {repository}:{tag} (Python {python}):\n{result.stdout}"


def test_the_check_sees_what_failed_on_the_scikit_learn_image(tmp_path: Path) -> None:
    script = tmp_path / "old.py"
    script.write_text("total = sum(w * v for w, v in zip([1.0], [2.0], strict=True))\n")
    result = _vermin("3.9", script)
    assert result.returncode != 0
    assert "zip(strict)" in result.stdout


def test_the_table_names_a_source_for_every_image() -> None:
    table = image_table()
    assert image_python("sagemaker-scikit-learn", "1.2-1-cpu-py3") == "3.9"
    assert all(image.source for image in table.images)
    assert len({(i.repository, i.tag) for i in table.images}) == len(table.images)
