"""No Service of any synthesized manifest takes the name of a LeaderWorkerSet: LWS (subdomainPolicy Shared, the
default) creates a headless Service named after the set and adopts an existing Service of that name without
checking that it is headless (kubernetes-sigs/lws v0.10.0, pkg/utils/controller/controller_utils.go,
CreateHeadlessServiceIfNotExists). A LoadBalancer Service of that name either fails the stack's `kubectl create`
(AlreadyExists) or takes the place of the headless Service, and the workers never resolve the leader."""

from __future__ import annotations

import json
from typing import Any

from mlstack.access.cli import stacks_of
from mlstack.design.serving_eks import api_service_name
from tests.synth import Session


def _manifests(session: Session) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for bp in session.blueprints.values():
        stacks = stacks_of(bp)
        for name in stacks.templates:
            for resource in stacks.resources(name).values():
                if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
                    found += json.loads(stacks.text(name, resource["Properties"]["Manifest"]))
    return found


def test_no_service_is_named_after_a_leader_worker_set(session: Session) -> None:
    manifests = _manifests(session)
    sets = {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests if m["kind"] == "LeaderWorkerSet"}
    services = {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests if m["kind"] == "Service"}
    assert not sets & services
    if "eks-llm-serving-multinode" in session.blueprints:
        assert ("serving", "vllm-chat-pp") in sets and ("serving", api_service_name("chat-pp")) in services


def test_the_api_service_name_is_not_the_server_name() -> None:
    assert api_service_name("chat-pp") == "vllm-chat-pp-api"
