"""`EksInferenceStack` (construct ID `InferenceStack`): vLLM servers on an EKS cluster of their own.

Built from the training layer's constructs (`TrainingCluster`, its GPU node groups or its `Karpenter` pools,
`ClusterAdminHost`), without the Kubeflow Trainer; adds the model bucket, the API key secret, the Mountpoint for
Amazon S3 CSI driver, KEDA and per endpoint the manifests of `mlstack.k8s.vllm` (a LeaderWorkerSet,
`mlstack.k8s.vllm_multinode`, for a server over several nodes, with the LWS chart and EFA on its nodes; the Neuron
image on inf2/trn1 nodes). Sizing comes from `mlstack.design.serving_eks` (pools: `mlstack.design.serving_pools`);
its part of
`mlstack plan` is `mlstack.plan.inference_eks`.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, CfnOutput, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from mlstack.catalog import efa_layout, get_instance
from mlstack.catalog.memory import GIB, precision_bytes
from mlstack.config import BlueprintConfig
from mlstack.config.inference_eks import EksInferenceConfig
from mlstack.constructs.scanners import acknowledge_nag, nag_id, skip_guard
from mlstack.constructs.storage.buckets import access_log_bucket, kms_bucket
from mlstack.constructs.training import versions
from mlstack.constructs.training.admin_host import ClusterAdminHost
from mlstack.constructs.training.cluster import TrainingCluster
from mlstack.design.karpenter import Pool
from mlstack.design.serving_eks import PORT, SERVICE_ACCOUNT, ServerDesign, server_designs, serving_cluster_name
from mlstack.design.serving_pools import blocks_drift, server_startup_seconds, serving_pools
from mlstack.k8s.serving_pools import disruption_budget, serving_triggers
from mlstack.k8s.vllm import namespace_manifests, scaled_object, server_deployment, server_service, weights_volume
from mlstack.k8s.vllm_multinode import leader_worker_set
from mlstack.stacks.base import MlStack
from mlstack.stacks.inference_eks_pools import add_endpoint_pool, add_serving_karpenter
from mlstack.stacks.network import NetworkStack
from mlstack.stacks.training import eks_cluster_props

ADMIN_HOST_TYPE = "m7i.large"
API_KEY_OUTPUT = "ApiKeySecretArn"
MODEL_BUCKET_OUTPUT = "ModelBucketName"


class EksInferenceStack(MlStack):
    """The serving cluster, one GPU node group and vLLM fleet per endpoint, the model bucket and the API key."""

    def __init__(
        self, scope: Construct, construct_id: str, *, blueprint: BlueprintConfig, network: NetworkStack, **kwargs: Any
    ) -> None:
        config = blueprint.inference_eks
        if config is None:
            raise ValueError(f"blueprint {blueprint.name!r} has no `inference: {{engine: eks}}` section")
        super().__init__(
            scope,
            construct_id,
            blueprint=blueprint,
            description=f"mlstack {blueprint.name}: vLLM on EKS ({', '.join(e.name for e in config.endpoints)})",
            **kwargs,
        )
        self.add_stack_dependency(network)
        key = network.key
        self.key_arn = key.key_arn
        region = blueprint.env.region
        designs = server_designs(config)
        self.cluster = TrainingCluster(
            self, "Serving", **_cluster_props(blueprint, config, network), removal_policy=self.removal_policy
        )
        cluster_name = self.cluster.cluster.cluster_name
        # Karpenter pools instead of fixed GPU node groups (inference.capacity_manager: karpenter).
        self.karpenter = add_serving_karpenter(
            self, blueprint, network, self.cluster, serving_cluster_name(blueprint.name)
        )
        self.pools = {p.name: p for p in serving_pools(config, blueprint.zones)}
        self.access_logs = access_log_bucket(self, removal_policy=self.removal_policy)
        self.model_bucket = kms_bucket(
            self, "ModelBucket", key=key, access_logs=self.access_logs, removal_policy=self.removal_policy
        )
        CfnOutput(self, MODEL_BUCKET_OUTPUT, value=self.model_bucket.bucket_name)
        CfnOutput(self, "WeightsUri", value=self.model_bucket.s3_url_for_object(config.model.weights_prefix))

        # The API key every request carries (vLLM VLLM_API_KEY); the servers read it at start through Pod Identity.
        self.api_key = secretsmanager.Secret(
            self,
            "ApiKey",
            description=f"mlstack {blueprint.name}: API key of the vLLM endpoints (Authorization: Bearer <key>)",
            encryption_key=key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=48, exclude_punctuation=True, include_space=False
            ),
            removal_policy=self.removal_policy,
        )
        rotate = (
            "a static bearer key the servers read at start: rotate with `aws secretsmanager put-secret-value` and "
            "`kubectl rollout restart` (a rotation Lambda cannot restart the servers)"
        )
        Validations.of(self.api_key).acknowledge(Acknowledgment(id="AwsSolutions-SMG4", reason=rotate))
        skip_guard(self.api_key, {"CT.SECRETSMANAGER.PR.1": rotate})
        CfnOutput(self, API_KEY_OUTPUT, value=self.api_key.secret_arn)

        # Mountpoint for S3: the driver reads the weights prefix with its own Pod Identity role (read-only).
        mountpoint = eks.Addon(
            self.cluster,
            "MountpointS3CsiDriverAddon",
            cluster=self.cluster.cluster_ref,
            addon_name=versions.MOUNTPOINT_S3_CSI,
            # The node plugin must run on the tainted GPU nodes, where the servers mount the volume.
            configuration_values={"node": {"tolerateAllTaints": True}},
        )
        mountpoint.node.add_dependency(self.cluster.system_nodes)
        driver_role = _pod_role(self, "MountpointRole", "Mountpoint for S3 CSI driver: reads the model weights")
        self._read_weights(driver_role, config.model.weights_prefix)
        driver_identity = _associate(
            self, "MountpointPodIdentity", cluster_name, "kube-system", versions.MOUNTPOINT_SERVICE_ACCOUNT, driver_role
        )
        # EKS Pod Identity gives credentials to pods admitted after the association exists (its webhook mutates pods
        # at creation): the driver's pods start with the add-on, so the association (and its role's policy) first.
        mountpoint.node.add_dependency(driver_identity)
        mountpoint.node.add_dependency(driver_role)
        server_role = _pod_role(self, "ServerRole", "vLLM servers: read the API key at start")
        self._read_key(server_role)
        self.server_identity = _associate(
            self, "ServerPodIdentity", cluster_name, config.namespace, SERVICE_ACCOUNT, server_role
        )
        self.server_role = server_role

        # No admission webhooks: the ScaledObjects are applied right after the chart (installed without waiting),
        # before a webhook pod could answer; KEDA's controller still validates them when it reconciles.
        keda = self.cluster.add_chart(versions.KEDA, {"webhooks": {"enabled": False}})
        # LeaderWorkerSet for multi-node servers; `wait` holds until its controller pod is ready, which does not cover
        # the webhooks (fail closed on every LeaderWorkerSet): LWS v0.10.0's readiness check is a ping that passes
        # before the controller has written its webhook certificates (kubernetes-sigs/lws cmd/main.go). The margin
        # that covers them is the ordering below (the LeaderWorkerSet after the GPU node group: minutes).
        self.lws = None
        if any(d.pipeline_parallel > 1 for d in designs):
            self.lws = self.cluster.add_chart(versions.LWS, {}, wait=True)
        self.admin_host: ClusterAdminHost | None = None
        if config.cluster.admin_host:
            self.admin_host = ClusterAdminHost(
                self,
                "AdminHost",
                vpc=network.vpc,
                subnet=network.network.private_subnets[0],
                key=key,
                cluster=self.cluster.cluster,
                kubernetes_version=config.cluster.kubernetes_version,
                instance_type=ADMIN_HOST_TYPE,
            )
            # The first request (README) is sent from the admin host, inside the VPC: it reads the key there and
            # reaches the internal NLB (no security group of its own: the VPC CIDR on the server port).
            self._read_key(self.admin_host.role)
            self.admin_host.security_group.add_egress_rule(
                ec2.Peer.ipv4(str(blueprint.network.cidr)), ec2.Port.tcp(PORT), "the endpoints' internal NLBs"
            )

        base = self.cluster.add_manifest("ServingNamespace", *namespace_manifests(config.namespace))
        weights_gib = config.model.parameters_billion * 1e9 * precision_bytes(config.model.precision) / GIB
        for design in designs:
            image = config.image.reference(region, neuron=design.accelerator == "neuron")
            self._endpoint(
                design, config, network, base, keda, mountpoint, weights_gib, image, region, str(blueprint.network.cidr)
            )

    def _read_weights(self, role: iam.IRole, prefix: str) -> None:
        """List and read the weights prefix only (Mountpoint's read-only needs: ListBucket, GetObject; Mountpoint
        docs, "IAM permissions"), and decrypt through S3 only. Not grant_read: that adds s3:GetBucket*/List* on
        the whole bucket and writes the role into the NetworkStack's key policy."""
        objects = self.model_bucket.arn_for_objects(f"{prefix}*")
        role.add_to_principal_policy(
            iam.PolicyStatement(sid="ReadWeights", actions=["s3:GetObject"], resources=[objects])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListWeights",
                actions=["s3:ListBucket"],
                resources=[self.model_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="DecryptWeights",
                actions=["kms:Decrypt"],
                resources=[self.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{self.region}.amazonaws.com"}},
            )
        )
        acknowledge_nag(
            role,
            {
                f"AwsSolutions-IAM5[Resource::{nag_id(self, objects)}]": (
                    "Mountpoint reads every file of the model (config, tokenizer, safetensors shards) under the "
                    "weights prefix, and only those"
                )
            },
        )

    def _read_key(self, role: iam.IRole) -> None:
        """GetSecretValue on the API key, and kms:Decrypt of the project key through Secrets Manager only. An
        identity policy (the key trusts the account's IAM policies): `Secret.grant_read` would also write the role
        into the key policy, which lives in the NetworkStack and would then depend on this stack."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadApiKey",
                actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                resources=[self.api_key.secret_arn],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="DecryptApiKey",
                actions=["kms:Decrypt"],
                resources=[self.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"secretsmanager.{self.region}.amazonaws.com"}},
            )
        )

    def _endpoint(
        self,
        design: ServerDesign,
        config: EksInferenceConfig,
        network: NetworkStack,
        base: eks.KubernetesManifest,
        keda: eks.HelmChart,
        mountpoint: eks.Addon,
        weights_gib: float,
        image: str,
        region: str,
        vpc_cidr: str,
    ) -> None:
        spec = next(e for e in config.endpoints if e.name == design.endpoint)
        cid = spec.construct_id
        it = get_instance(design.instance_type)
        multinode = design.pipeline_parallel > 1
        neuron = design.accelerator == "neuron"
        pool: Pool | None = self.pools.get(design.endpoint)
        nodes: eks.KubernetesManifest | None = None
        group = None
        if self.karpenter is not None and pool is not None:
            # Single-node servers only: the config rejects a multi-node endpoint with Karpenter.
            nodes = add_endpoint_pool(
                self,
                self.karpenter,
                pool,
                network,
                serving_cluster_name(self.blueprint.name),
                block_drift=blocks_drift(design),
            )
        else:
            group = self.cluster.add_accelerated_node_group(
                design.endpoint,
                scope=self,
                instance_type=design.instance_type,
                # EFA does not cross subnets: a multi-node group stays in the first private subnet's AZ
                subnets=network.network.private_subnets[:1] if multinode else network.network.private_subnets,
                efa=multinode,  # a multi-node server's stages exchange activations over EFA
                desired_size=design.min_nodes,
                min_size=design.min_nodes,
                max_size=design.max_nodes,
                root_volume_gib=spec.root_volume_gib,
            )
        pair = weights_volume(
            namespace=config.namespace,
            bucket=self.model_bucket.bucket_name,
            # The bucket's name is a deploy-time value; its logical ID stands for it in the names' hash (a new
            # logical ID is a new bucket, and test_stateful holds this one).
            bucket_key=self.get_logical_id(self.model_bucket.node.default_child),  # type: ignore[arg-type]
            prefix=config.model.weights_prefix,
            region=region,
            cache_gib=int(weights_gib * 1.2) + 1,
            endpoint=design.endpoint,
        )
        volume = self.cluster.add_manifest(f"{cid}Weights", *pair)
        volume.node.add_dependency(base)
        volume.node.add_dependency(mountpoint)
        servers = design.servers_per_node
        server: dict[str, Any] = server_deployment(
            design,
            namespace=config.namespace,
            model_name=config.model.name,
            image=image,
            secret_arn=self.api_key.secret_arn,
            region=region,
            # + the Neuron compilation; + the workers' image pull and Ray start, which the leader waits for
            startup_seconds=server_startup_seconds(design, weights_gib),
            cpu_per_server=max(1, it.vcpus // (2 * servers)),
            # Neuron compiles the model and loads the checkpoint in host memory first: a larger share of the node.
            memory_gib_per_server=max(4, int(it.memory_gib * (0.8 if neuron else 0.6) / servers)),
            weights_claim=pair[1]["metadata"]["name"],
            compile_cache_gib=int(weights_gib * 1.2) + 8 if neuron else 0,
        )
        if multinode:
            efa = sum(1 for nic in efa_layout(it.name) if nic.is_efa)
            server = leader_worker_set(server, design, efa_interfaces=efa)
        deployment = self.cluster.add_manifest(
            f"{cid}Server",
            server,
            disruption_budget(server),
            server_service(design, namespace=config.namespace, vpc_cidr=vpc_cidr),
        )
        if nodes is not None:
            # Deleted before the pool, so Karpenter still drains and terminates the nodes the servers ran on.
            deployment.node.add_dependency(nodes)
        if multinode:
            assert self.lws is not None and group is not None
            deployment.node.add_dependency(self.lws)
            # LWS's webhook certificates are made by its controller after its pod is ready; the group's nodes take
            # minutes to join, so applying after them also gives the webhook that time. A time margin, not a check:
            # an update that changes the LWS chart and this manifest together can still meet "failed calling
            # webhook" (the update fails and rolls back; deploy again).
            deployment.node.add_dependency(group.nodegroup)
        deployment.node.add_dependency(volume)
        deployment.node.add_dependency(self.server_identity)  # the init container needs credentials at admission
        deployment.node.add_dependency(self.server_role)
        scaler = self.cluster.add_manifest(
            f"{cid}Scaler",
            serving_triggers(
                scaled_object(design, namespace=config.namespace, model_name=config.model.name),
                design,
                model_name=config.model.name,
                active_hours=spec.autoscaling.active_hours,
            ),
        )
        scaler.node.add_dependency(deployment)
        scaler.node.add_dependency(keda)


def _pod_role(scope: Construct, construct_id: str, description: str) -> iam.Role:
    return iam.Role(
        scope,
        construct_id,
        description=description,
        assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
    )


def _associate(
    scope: Construct, construct_id: str, cluster_name: str, namespace: str, account: str, role: iam.IRole
) -> eks.CfnPodIdentityAssociation:
    return eks.CfnPodIdentityAssociation(
        scope,
        construct_id,
        cluster_name=cluster_name,
        namespace=namespace,
        service_account=account,
        role_arn=role.role_arn,
    )


def _cluster_props(blueprint: BlueprintConfig, config: EksInferenceConfig, network: NetworkStack) -> dict[str, Any]:
    return eks_cluster_props(
        network,
        config.cluster,
        config.system_node_group,
        name=serving_cluster_name(blueprint.name),
        trainer_operator=False,
    )
