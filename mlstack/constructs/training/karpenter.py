"""`Karpenter`: the Karpenter controller of a `TrainingCluster` and the pools it launches nodes for.

- The CRDs (chart `versions.KARPENTER_CRD`, so a version bump upgrades them), then the controller (Helm chart
  `versions.KARPENTER`, without its own copy of the CRDs) on the system nodes (the chart's default affinity keeps it
  off the nodes it manages), with its own EKS Pod Identity role holding the documented controller policy, scoped to
  this cluster (`karpenter_policy`).
- The interruption queue (SQS, five minutes' retention, TLS only) and the EventBridge rules that feed it (Spot
  interruption, rebalance, instance state change, AWS Health scheduled changes, capacity-reservation interruption),
  so a node is drained before EC2 takes it away (Karpenter docs, "Interruption").
- The node role (kubelet, image pulls; the same two policies as the managed node groups) and its EKS access entry of
  type EC2_LINUX, through which Karpenter's nodes join the cluster.
- `add_pool` adds one EC2NodeClass and NodePool (`mlstack.k8s.karpenter`), with the EFA networking the cluster keeps
  for node groups (a self-referencing security group, a cluster placement group unless a reservation fixes it).

Props (keyword; defaults in parentheses): `cluster` (a `TrainingCluster`), `cluster_name` (its fixed name, used in
the policy's conditions), `key` (the root volumes' key), `host_agent` (None: the node role gets the CloudWatch
agent's statements, for the pools whose EC2NodeClass `userData` installs it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from mlstack.constructs.common import pascal_id
from mlstack.constructs.scanners import skip_checkov, skip_guard, skip_iam_lint
from mlstack.constructs.training import versions
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.constructs.training.host_agent import acknowledge_host_agent, host_agent_statements
from mlstack.constructs.training.karpenter_policy import controller_statements
from mlstack.constructs.training.metric_names import HostAgent
from mlstack.constructs.training.node_group import NODE_ROLE_POLICIES

SERVICE_ACCOUNT = "karpenter"
"""The chart's service account (its default fullname) in `versions.KARPENTER.namespace`."""

INTERRUPTION_EVENTS: dict[str, tuple[str, str]] = {
    "ScheduledChange": ("aws.health", "AWS Health Event"),
    "SpotInterruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "Rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "InstanceStateChange": ("aws.ec2", "EC2 Instance State-change Notification"),
    "CapacityReservationInterruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}
"""The rules of Karpenter's getting-started template: rule ID -> (source, detail-type)."""


_REGIONAL = "arn:<AWS::Partition>:ec2:<AWS::Region>"
_CREATED = (
    "created at run time with an ID unknown at deploy; only with the cluster's ownership tag and "
    "karpenter.sh/nodepool in the request (Karpenter's documented controller policy)"
)
WILDCARDS: dict[str, str] = {
    **{
        f"{_REGIONAL}:*:{kind}/*": _CREATED
        for kind in ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
    },
    f"{_REGIONAL}::image/*": "the AL2023 AMI that Karpenter resolves from the public SSM parameter changes with "
    "each release",
    f"{_REGIONAL}::snapshot/*": "the snapshots behind that AMI",
    f"{_REGIONAL}:*:security-group/*": "launch inputs selected by ID in the EC2NodeClass, read at launch",
    f"{_REGIONAL}:*:subnet/*": "launch inputs selected by ID in the EC2NodeClass, read at launch",
    f"{_REGIONAL}:*:capacity-reservation/*": "the ODCR or Capacity Block the EC2NodeClass selects (the user's)",
    f"{_REGIONAL}:*:placement-group/*": "the EFA cluster placement group the EC2NodeClass selects",
    "arn:<AWS::Partition>:iam::<AWS::AccountId>:instance-profile/*": "Karpenter creates one instance profile per "
    "EC2NodeClass with a generated name, tagged with the cluster and region the conditions require",
    "arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/*": "the public EKS AMI parameters (read only)",
    "*": "Describe calls, pricing:GetProducts and iam:ListInstanceProfiles support no resource-level permissions "
    "(Service Authorization Reference); the EC2 ones are held to this Region",
}
"""cdk-nag IAM5 findings on the controller policy, each with why the wildcard is needed."""


class Karpenter(Construct):
    """Karpenter for one training cluster (see the module docstring)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: TrainingCluster,
        cluster_name: str,
        key: kms.IKey,
        host_agent: HostAgent | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.cluster = cluster
        self.key = key
        self.node_role = iam.Role(
            self,
            "NodeRole",
            description="Role of the nodes Karpenter launches (kubelet, image pulls)",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_ROLE_POLICIES],
        )
        for managed, reason in NODE_ROLE_POLICIES.items():
            nag = f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{managed}]"
            Validations.of(self.node_role).acknowledge(Acknowledgment(id=nag, reason=reason))
        if host_agent is not None:
            for statement in host_agent_statements(host_agent):
                self.node_role.add_to_principal_policy(statement)
            acknowledge_host_agent(self.node_role, host_agent)
        # Nodes authenticate with the node role; an EC2_LINUX access entry maps it to system:nodes (EKS User Guide,
        # "Create access entries": type EC2_LINUX, no access policy).
        self.access_entry = eks.AccessEntry(
            self,
            "NodeAccess",
            cluster=cluster.cluster_ref,
            principal=self.node_role.role_arn,
            access_entry_type=eks.AccessEntryType.EC2_LINUX,
            access_policies=[],
        )
        self.queue = sqs.Queue(
            self,
            "InterruptionQueue",
            retention_period=Duration.minutes(5),
            # SQS-managed encryption: EventBridge can deliver to it without a grant on a customer key (Karpenter's
            # template does the same); the messages are EC2 and AWS Health notifications, stale after minutes.
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        sse = (
            "encrypted at rest with SQS-managed SSE (SqsManagedSseEnabled); a customer key would need a key-policy "
            "grant to events.amazonaws.com, for messages that hold only EC2/Health event notices"
        )
        skip_checkov(self.queue, {"CKV_AWS_27": sse})
        skip_guard(self.queue, {"CT.SQS.PR.1": sse})
        Validations.of(self.queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SQS3",
                reason="interruption notices are useful only within minutes (retention 5 min, as Karpenter "
                "documents); a dead-letter queue would keep notices nobody can act on",
            )
        )
        for rule_id, (source, detail_type) in INTERRUPTION_EVENTS.items():
            event_rule = events.Rule(
                self,
                f"{rule_id}Rule",
                event_pattern=events.EventPattern(source=[source], detail_type=[detail_type]),
            )
            event_rule.add_target(targets.SqsQueue(self.queue))
        self.controller_role = iam.Role(
            self,
            "ControllerRole",
            description="EKS Pod Identity role of the Karpenter controller (kube-system/karpenter)",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
        )
        policy = iam.Policy(
            self,
            "ControllerPolicy",
            statements=controller_statements(
                cluster_name=cluster_name,
                node_role_arn=self.node_role.role_arn,
                queue_arn=self.queue.queue_arn,
                volume_key_arn=key.key_arn,
            ),
        )
        policy.attach_to_role(self.controller_role)
        for resource, reason in WILDCARDS.items():
            Validations.of(policy).acknowledge(
                Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{resource}]", reason=reason)
            )
        split = (
            "Karpenter's documented policy splits RunInstances/CreateFleet over several statements by resource type "
            "(launch inputs unconditioned, created resources only with the cluster's tags); each statement lists the "
            "types its condition applies to, so no single one holds every type the action touches"
        )
        skip_iam_lint(
            policy,
            {f"RESOURCE_MISMATCH {action}": split for action in ("ec2:CreateFleet", "ec2:RunInstances")}
            | {
                "RESOURCE_MISMATCH ssm:GetParameter": "public AWS parameters have no account: "
                "arn:...:ssm:region::parameter/aws/service/*"
            },
        )
        association = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster.cluster_name,
            namespace=versions.KARPENTER.namespace,
            service_account=SERVICE_ACCOUNT,
            role_arn=self.controller_role.role_arn,
        )
        association.node.add_dependency(cluster.addons["eks-pod-identity-agent"])
        # The CRDs from their own chart, whose templates Helm upgrades with each version bump; the controller chart
        # skips its `crds/`, which Helm installs once and never upgrades (Karpenter docs v1.14, Upgrade Guide, "CRD
        # Upgrades"). On delete the controller goes first, then the CRDs.
        self.crd_chart = cluster.add_chart(versions.KARPENTER_CRD, {})
        self.chart = cluster.add_chart(
            versions.KARPENTER,
            {
                "settings": {
                    "clusterName": cluster_name,
                    "interruptionQueue": self.queue.queue_name,
                    # NodeOverlays: the pools declare their nodes' huge pages (mlstack.k8s.karpenter.hugepages_overlay).
                    "featureGates": {"nodeOverlay": True},
                },
                "serviceAccount": {"name": SERVICE_ACCOUNT},
                "controller": {
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
                },
            },
            skip_crds=True,
        )
        self.chart.node.add_dependency(self.crd_chart)
        # Credentials at the controller's first start, and its policy before its first call.
        self.chart.node.add_dependency(association)
        self.chart.node.add_dependency(policy)
        self.chart.node.add_dependency(self.access_entry)
        self.pools: dict[str, eks.KubernetesManifest] = {}

    def add_pool(
        self,
        name: str,
        *,
        instance_types: Sequence[str],
        efa: bool,
        placement_group: bool,
        subnet: ec2.ISubnet,
        render: Callable[..., list[dict[str, Any]]],
        scope: Construct | None = None,
    ) -> eks.KubernetesManifest:
        """One EC2NodeClass + NodePool named `name`, registered with the cluster (device plugins, tolerations, EFA
        networking under `scope`, construct `<Name>Efa`). `render` builds the two manifests from what the deploy
        creates, as keywords: `node_role`, `subnet_ids`, `security_group_ids`, `kms_key_arn`, `placement_group`."""
        registered = self.cluster.add_accelerator_pool(
            name, instance_types=instance_types, subnet=subnet, efa=efa, placement_group=placement_group, scope=scope
        )
        groups = [self.cluster.cluster.cluster_security_group_id]
        placement = None
        if registered.efa is not None:
            # EFA needs its self-referencing group on every interface (EC2 User Guide, EFA security group).
            groups.insert(0, registered.efa.security_group.security_group_id)
            if registered.efa.placement_group is not None:
                placement = registered.efa.placement_group.placement_group_name
        manifests = render(
            node_role=self.node_role.role_name,
            subnet_ids=(subnet.subnet_id,),
            security_group_ids=tuple(groups),
            kms_key_arn=self.key.key_arn,
            placement_group=placement,
        )
        manifest = self.cluster.add_manifest(f"{pascal_id(name)}Pool", *manifests)
        # The CRDs come with the CRD chart; on delete the pool goes first, so Karpenter still terminates its nodes.
        manifest.node.add_dependency(self.chart, self.crd_chart)
        self.pools[name] = manifest
        return manifest
