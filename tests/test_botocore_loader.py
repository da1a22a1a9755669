"""tests/botocore_loader.py: the test processes' botocore sessions share one loader per data path."""

from __future__ import annotations

from pathlib import Path

import boto3
import botocore.session
from moto import mock_aws

from tests import botocore_loader


def test_the_test_process_shares_the_loader() -> None:
    # conftest installed it, before any test created a session.
    assert botocore.session.create_loader is botocore_loader.shared_loader


def test_sessions_share_the_loader_and_keep_their_own_state() -> None:
    first, second = botocore.session.get_session(), botocore.session.get_session()
    assert first.get_component("data_loader") is second.get_component("data_loader")
    first.set_credentials("a", "b")
    assert second.get_credentials() is None or second.get_credentials().access_key != "a"
    model = first.get_service_model("sagemaker")
    assert second.get_service_model("sagemaker").service_name == model.service_name == "sagemaker"


def test_another_data_path_gets_its_own_loader(tmp_path: Path) -> None:
    other = botocore.session.get_session()
    other.set_config_variable("data_path", str(tmp_path))
    loader = other.get_component("data_loader")
    assert loader is not botocore.session.get_session().get_component("data_loader")
    assert str(tmp_path) in loader.search_paths


def test_a_client_under_moto_still_reaches_moto() -> None:
    # Each mock_aws start makes boto3 a new default session: its clients still go to moto, with the shared models.
    for _ in range(2):
        with mock_aws():
            client = boto3.client(
                "sagemaker", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
            )
            client.create_model_package_group(ModelPackageGroupName="g")
            groups = client.list_model_package_groups()["ModelPackageGroupSummaryList"]
            assert [group["ModelPackageGroupName"] for group in groups] == ["g"]  # a new backend each time
