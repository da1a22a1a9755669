"""Stateful resources: their logical IDs never change, and they survive deletion of their stack."""

from __future__ import annotations

from mlstack.config import BLUEPRINTS_DIR, BlueprintConfig
from mlstack.config.training_hyperpod_rules import hyperpod_autoscaling
from mlstack.design.host_metrics import has_host_agent
from tests.synth import Session

STATEFUL_TYPES = frozenset(
    {
        "AWS::KMS::Key",
        "AWS::Logs::LogGroup",
        "AWS::S3::Bucket",
        "AWS::FSx::FileSystem",
        "AWS::EFS::FileSystem",
        "AWS::ECR::Repository",
        "AWS::SageMaker::ModelPackageGroup",
        "AWS::SageMaker::Domain",
        "AWS::SecretsManager::Secret",
        "AWS::DynamoDB::Table",
    }
)

# Stack construct ID -> logical ID -> type. A changed logical ID makes CloudFormation create a new resource
# and drop the old one: the data goes with it (or is orphaned). Add new resources here; never rename.
PINNED_LOGICAL_IDS: dict[str, dict[str, str]] = {
    "NetworkStack": {
        "ProjectKeyFDD03260": "AWS::KMS::Key",
        "NetworkFlowLogGroup4F8CEEEF": "AWS::Logs::LogGroup",
        # Log group of CDK's restrict-default-security-group function (created so it is encrypted and expires).
        "NetworkRestrictDefaultSgLogGroup2644C920": "AWS::Logs::LogGroup",
    },
    # The model bucket moved here from the InferenceStack (it must be filled before the endpoints deploy): same
    # logical ID, new stack. A deployed InferenceStack keeps its old bucket (retained); the README says how to
    # keep using it (`artifact.existing_bucket`).
    "DataStack": {
        "AccessLogs8B620ECA": "AWS::S3::Bucket",
        "ModelBucketB33D855B": "AWS::S3::Bucket",
        "ImageRepositoryBBCBC9DF": "AWS::ECR::Repository",
    },
    "InferenceStack": {
        "AccessLogs8B620ECA": "AWS::S3::Bucket",
        "DataBucketE3889A50": "AWS::S3::Bucket",
        "InvokeApiLogGroupC8B745FF": "AWS::Logs::LogGroup",
    },
    "MlopsStack": {
        "AccessLogs8B620ECA": "AWS::S3::Bucket",
        "ArtifactsBucket2AAC5544": "AWS::S3::Bucket",
        "ModelPackageGroup": "AWS::SageMaker::ModelPackageGroup",
        "ApprovalDeployLogGroupE2AEB061": "AWS::Logs::LogGroup",
        "StudioDomain20F5E462": "AWS::SageMaker::Domain",
    },
    "AiServicesStack": {
        "AccessLogs8B620ECA": "AWS::S3::Bucket",
        "DocumentPipelineBucket26175D8C": "AWS::S3::Bucket",
        "DocumentPipelineIndex6F4BD2D5": "AWS::DynamoDB::Table",
        "DocumentPipelineStartAnalysisLogsC7A40224": "AWS::Logs::LogGroup",
        "DocumentPipelineCheckAnalysisLogsD5884336": "AWS::Logs::LogGroup",
        "DocumentPipelineExtractEntitiesLogsE8EC7F1E": "AWS::Logs::LogGroup",
        "DocumentPipelineWriteResultLogsD170CF66": "AWS::Logs::LogGroup",
        "DocumentPipelineRecordFailureLogs1025FC29": "AWS::Logs::LogGroup",
        "DocumentPipelineStateMachineLogsBE973400": "AWS::Logs::LogGroup",
        "ApiFunctionLogs4B382957": "AWS::Logs::LogGroup",
        "ApiAccessLogs50B185DB": "AWS::Logs::LogGroup",
    },
}

FSX = {"FsxFileSystem7053E557": "AWS::FSx::FileSystem"}
EKS = {
    # EKS control-plane logs (/aws/eks/<cluster>/cluster), created before the cluster so the stack owns them.
    "TrainingControlPlaneLogGroupD70220C2": "AWS::Logs::LogGroup",
    # Log groups of CDK's kubectl-provider functions (aws_eks_v2 creates and retains them).
    "TrainingClusterKubectlProviderHandlerLogGroupF5270D71": "AWS::Logs::LogGroup",
    "TrainingClusterKubectlProviderframeworkonEventLogGroup2BA49C21": "AWS::Logs::LogGroup",
    # Fluent Bit's /aws/containerinsights/<cluster>/application is no AWS::Logs::LogGroup of the stack (Fluent Bit
    # may create it first): `SharedLogGroup` creates or takes it over and keeps it on delete. Its handler's log
    # group is the stack's.
    "ObservabilityStepLogGroupHandlerLogs8B57128D": "AWS::Logs::LogGroup",
}
HYPERPOD = {
    # The lifecycle-script bucket and the log group of its upload function.
    "HyperPodLifecycleScriptsC0D9EEA1": "AWS::S3::Bucket",
    "HyperPodUploadLogs1FDC617C": "AWS::Logs::LogGroup",
}
HYPERPOD_CHART = {
    # hyperpod-eks: log groups of the HyperPod chart installer and of its custom-resource provider.
    "HyperPodChartLogs03F56B64": "AWS::Logs::LogGroup",
    "HyperPodChartProviderLogs70117152": "AWS::Logs::LogGroup",
}
HYPERPOD_AUTOSCALING = {
    # hyperpod-eks with capacity_manager karpenter: log groups of the autoscaling wait and of its provider.
    "HyperPodAutoscalingReadyHandlerLogs6F45D5B6": "AWS::Logs::LogGroup",
    "HyperPodAutoscalingReadyProviderLogsAF11AFFC": "AWS::Logs::LogGroup",
}
TRAINING_PINS_BY_ENGINE: dict[str, dict[str, str]] = {
    "eks": {**FSX, **EKS},
    "hyperpod-slurm": {**FSX, **HYPERPOD},
    "hyperpod-eks": {**FSX, **EKS, **HYPERPOD, **HYPERPOD_CHART},
    "batch": {**FSX, "BatchJobLogsF59D7852": "AWS::Logs::LogGroup"},
}
"""`TrainingClusterStack` pins by `training.engine`: the stack ID is the same for every engine, its resources are
not. A blueprint's pins are `training_pins(config)`."""
HOST_AGENT = {
    # Every engine with NVIDIA GPUs: the kernel log the hosts' CloudWatch agent uploads (Xid lines).
    "ObservabilityHostKernelLog6C471978": "AWS::Logs::LogGroup",
}


EKS_SERVING = {
    # inference engine eks: the serving cluster's control-plane and kubectl-provider log groups, the model bucket
    # and its access logs, and the API key.
    "ServingControlPlaneLogGroup5741E880": "AWS::Logs::LogGroup",
    "ServingClusterKubectlProviderHandlerLogGroup2FAF4137": "AWS::Logs::LogGroup",
    "ServingClusterKubectlProviderframeworkonEventLogGroup8D80BF17": "AWS::Logs::LogGroup",
    "AccessLogs8B620ECA": "AWS::S3::Bucket",
    "ModelBucketB33D855B": "AWS::S3::Bucket",
    "ApiKeyF9DDEE66": "AWS::SecretsManager::Secret",
}
"""`InferenceStack` pins of `inference: {engine: eks}` (the stack ID is the SageMaker one's, its resources not)."""


def pins(stack_id: str, config: BlueprintConfig) -> dict[str, str]:
    """Logical ID -> type of the stateful resources `stack_id` may hold for this blueprint."""
    if stack_id == "InferenceStack" and config.inference_eks is not None:
        return EKS_SERVING
    if stack_id != "TrainingClusterStack":
        return PINNED_LOGICAL_IDS.get(stack_id, {})
    assert config.training is not None
    found = dict(TRAINING_PINS_BY_ENGINE[config.training.engine])
    if has_host_agent(config.training):
        found.update(HOST_AGENT)
    if hyperpod_autoscaling(config.training):
        found.update(HYPERPOD_AUTOSCALING)
    return found


def training_pins(config: BlueprintConfig) -> dict[str, str]:
    """The TrainingClusterStack pins this blueprint must synthesize: its engine's, less what it leaves out (no FSx)."""
    training = config.training
    assert training is not None
    expected = dict(TRAINING_PINS_BY_ENGINE[training.engine])
    if training.fsx is None:
        expected = {k: v for k, v in expected.items() if k not in FSX}
    if has_host_agent(training):
        expected.update(HOST_AGENT)
    if hyperpod_autoscaling(training):
        expected.update(HYPERPOD_AUTOSCALING)
    return expected


def _stateful(session: Session) -> list[tuple[str, str, str, str, dict[str, object]]]:
    return [
        (name, stack_id, logical_id, resource["Type"], resource)
        for name, bp in session.blueprints.items()
        for stack_id, template in bp.templates.items()
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] in STATEFUL_TYPES
    ]


def test_stateful_logical_ids_are_pinned(session: Session) -> None:
    unpinned = [
        f"{name}/{stack_id}: {logical_id} ({kind})"
        for name, stack_id, logical_id, kind, _ in _stateful(session)
        if pins(stack_id, session.blueprints[name].config).get(logical_id) != kind
    ]
    assert unpinned == [], "stateful resource with an unpinned logical ID: a rename would replace its data"


def test_every_pinned_logical_id_is_still_synthesized(session: Session) -> None:
    seen = {(stack_id, logical_id) for _, stack_id, logical_id, _, _ in _stateful(session)}
    # The full session (make test, CI) checks every pin; MLSTACK_TEST_BLUEPRINTS may leave out whole stacks.
    partial = sorted(session.blueprints) != sorted(p.stem for p in BLUEPRINTS_DIR.glob("*.yaml"))
    stacks = {
        stack_id
        for bp in session.blueprints.values()
        for stack_id in bp.templates
        if pins(stack_id, bp.config) is PINNED_LOGICAL_IDS.get(stack_id)  # not engine eks's InferenceStack
    }
    missing = [
        f"{stack_id}/{logical_id}"
        for stack_id, ids in PINNED_LOGICAL_IDS.items()
        if not partial or stack_id in stacks
        for logical_id in ids
        if (stack_id, logical_id) not in seen
    ]
    assert missing == []


def test_every_training_pin_is_synthesized_by_its_blueprint(session: Session) -> None:
    """Per blueprint, so that it holds under any MLSTACK_TEST_BLUEPRINTS selection: each training blueprint
    synthesizes every pin of its engine (less what it leaves out, `training_pins`)."""
    missing = [
        f"{name}: {logical_id}"
        for name, bp in session.blueprints.items()
        if "TrainingClusterStack" in bp.templates
        for logical_id in training_pins(bp.config)
        if logical_id not in bp.templates["TrainingClusterStack"]["Resources"]
    ]
    assert missing == []


def test_every_eks_serving_pin_is_synthesized_by_its_blueprint(session: Session) -> None:
    missing = [
        f"{name}: {logical_id}"
        for name, bp in session.blueprints.items()
        if bp.config.inference_eks is not None
        for logical_id in EKS_SERVING
        if logical_id not in bp.templates["InferenceStack"]["Resources"]
    ]
    assert missing == []


def test_stateful_resources_are_retained_unless_the_blueprint_opts_out(session: Session) -> None:
    for name, stack_id, logical_id, _, resource in _stateful(session):
        retain = session.blueprints[name].config.retain
        expected = ("RetainExceptOnCreate", "Retain") if retain else ("Delete", "Delete")
        where = f"{name}/{stack_id}/{logical_id}"
        assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == expected, where
