"""`StudioDomain`: a SageMaker Studio domain in VPC-only mode, IAM auth, one user profile per name."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnResource, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from mlstack.constructs.removal import RETAINED
from mlstack.constructs.sagemaker.grants import acknowledge_wildcards
from mlstack.constructs.security.groups import closed_security_group


class StudioDomain(Construct):
    """`AppNetworkAccessType: VpcOnly`: Studio traffic goes through the VPC (and its endpoints), never the
    SageMaker-managed internet path; the home EFS is encrypted with `key`. Users share one execution role that may
    read the artifacts bucket and describe/start this project's pipeline and, given `model_package_group_name`,
    review and approve or reject the group's versions (UpdateModelPackage: the approval that deploys). The domain keeps
    users' home directories (EFS), so it follows `removal_policy` (default `RETAINED`).

    Props (keyword): `domain_name`, `vpc`, `subnets`, `key`, `user_names` (default none), `artifacts_bucket`,
    `pipeline_name`, `model_package_group_name` (default None: users cannot approve), `removal_policy`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        domain_name: str,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        key: kms.IKey,
        artifacts_bucket: s3.IBucket,
        pipeline_name: str,
        user_names: Sequence[str] = (),
        model_package_group_name: str | None = None,
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = closed_security_group(
            self, "SecurityGroup", vpc=vpc, description=f"{domain_name} Studio apps: HTTPS to VPC endpoints only"
        )
        # HTTPS to anywhere, not only the VPC CIDR: S3 is reached through the gateway endpoint, whose route sends
        # the traffic to S3's public prefix list, so an egress rule must allow those addresses (VPC User Guide,
        # "Gateway endpoints for Amazon S3": security group outbound rules). The interface endpoints sit in the
        # VPC CIDR, which this rule covers too; with a NAT gateway it also reaches public HTTPS (package indexes).
        # The group's description stays as it was: a new GroupDescription replaces the group the domain uses.
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS: VPC endpoints, S3 gateway endpoint, NAT"
        )
        # Studio apps of one domain talk to each other (Jupyter kernel gateway, NFS to the home EFS).
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_tcp(), "apps of this domain")
        self.security_group.add_egress_rule(self.security_group, ec2.Port.all_tcp(), "apps of this domain")
        self.role = iam.Role(
            self,
            "UserRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{domain_name} Studio users",
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[artifacts_bucket.arn_for_objects("runs/*")])
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[artifacts_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": ["runs/*"]}},
            )
        )
        key.grant_decrypt(self.role)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "sagemaker:DescribePipeline",
                    "sagemaker:StartPipelineExecution",
                    "sagemaker:ListPipelineExecutions",
                    "sagemaker:ListPipelineExecutionSteps",
                    "sagemaker:DescribePipelineExecution",
                ],
                resources=[_pipeline_arn(self, pipeline_name), _pipeline_arn(self, f"{pipeline_name}/execution/*")],
            )
        )
        if model_package_group_name is not None:
            self._grant_approval(model_package_group_name)
        acknowledge_wildcards(
            self.role,
            "reads pipeline run outputs under runs/ and executions of this project's pipeline only; reviews and "
            "approves versions of this project's model package group only (ListModelPackages takes no resource ARN)",
        )
        self.domain = sagemaker.CfnDomain(
            self,
            "Domain",
            domain_name=domain_name,
            auth_mode="IAM",
            app_network_access_type="VpcOnly",
            vpc_id=vpc.vpc_id,
            subnet_ids=[s.subnet_id for s in subnets],
            kms_key_id=key.key_arn,
            default_user_settings=sagemaker.CfnDomain.UserSettingsProperty(
                execution_role=self.role.role_arn, security_groups=[self.security_group.security_group_id]
            ),
        )
        self.domain.apply_removal_policy(removal_policy)
        # A retained domain still uses its security group (and its rules): deleting them would fail with
        # DependencyViolation and leave the stack DELETE_FAILED. They follow the domain.
        for child in self.security_group.node.find_all():
            if isinstance(child, CfnResource):
                child.apply_removal_policy(removal_policy)
        self.users: dict[str, sagemaker.CfnUserProfile] = {}
        for name in user_names:
            # The construct ID is the profile name itself (names differing only in "-" would collide: the
            # blueprint model rejects them).
            self.users[name] = sagemaker.CfnUserProfile(
                self, f"User-{name}", domain_id=self.domain.attr_domain_id, user_profile_name=name
            )

    def _grant_approval(self, group: str) -> None:
        """Studio's model registry view lists and describes the versions; approving one calls UpdateModelPackage
        (SageMaker Developer Guide, "Update the Approval Status of a Model")."""
        stack = Stack.of(self)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReviewAndApproveVersions",
                actions=[
                    "sagemaker:DescribeModelPackageGroup",
                    "sagemaker:DescribeModelPackage",
                    "sagemaker:UpdateModelPackage",
                ],
                resources=[
                    stack.format_arn(service="sagemaker", resource="model-package-group", resource_name=group),
                    stack.format_arn(service="sagemaker", resource="model-package", resource_name=f"{group}/*"),
                ],
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListVersions",
                actions=["sagemaker:ListModelPackages", "sagemaker:ListModelPackageGroups"],
                resources=["*"],
            )
        )


def _pipeline_arn(scope: Construct, name: str) -> str:
    return Stack.of(scope).format_arn(service="sagemaker", resource="pipeline", resource_name=name)
