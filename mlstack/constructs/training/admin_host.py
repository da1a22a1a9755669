"""`ClusterAdminHost`: the out-of-the-box way into a private EKS API endpoint (Session Manager, no inbound ports)."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnOutput, Names, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.constructs.scanners import skip_guard
from mlstack.constructs.security.groups import closed_security_group

KUBECONFIG = "/etc/mlstack/kubeconfig"
KUBECTL_BINARY = "/usr/local/lib/mlstack/kubectl"
"""The real kubectl; `/usr/local/bin/kubectl` is a wrapper around it."""
ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
"""EKS access policy of the cluster's admin principals (the creator role and the admin host)."""

KUBECTL_WRAPPER = f"""#!/bin/sh
# mlstack: kubectl with the cluster's kubeconfig when KUBECONFIG is unset (Session Manager's sh reads no profile).
KUBECONFIG="${{KUBECONFIG:-{KUBECONFIG}}}"
export KUBECONFIG
exec {KUBECTL_BINARY} "$@"
"""
"""`/usr/local/bin/kubectl`. `aws ssm start-session` without a document opens `sh` as ssm-user, not a login shell,
so /etc/profile.d is never read (aws/amazon-ssm-agent#171): the kubeconfig must not depend on the shell."""


def admin_host_commands(*, cluster_name: str, region: str, kubernetes_version: str) -> list[str]:
    """User-data commands: kubectl of the cluster's minor version, checksum-verified, and the cluster's kubeconfig.

    kubectl comes from the Kubernetes release site (dl.k8s.io, `stable-<minor>.txt` names the newest patch) and is
    checked against the `.sha256` file published beside it ("Install and Set Up kubectl on Linux",
    https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/). The kubeconfig calls `aws eks get-token` with
    the instance role, so any Session Manager user of the host is admin; `kubectl` (a wrapper, `KUBECTL_WRAPPER`)
    uses it in any shell, and login shells also get `KUBECONFIG` from /etc/profile.d.
    """
    url = "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl"
    return [
        "set -euo pipefail",
        f"KUBECTL_VERSION=$(curl -fsSL https://dl.k8s.io/release/stable-{kubernetes_version}.txt)",
        f"install -d -m 755 {KUBECTL_BINARY.rsplit('/', 1)[0]}",
        f'KUBECTL_SHA256=$(curl -fsSL "{url}.sha256")',
        f'curl -fsSLo {KUBECTL_BINARY} "{url}"',
        f'echo "${{KUBECTL_SHA256}}  {KUBECTL_BINARY}" | sha256sum --check --strict',
        f"chmod 755 {KUBECTL_BINARY}",
        f"cat > /usr/local/bin/kubectl <<'MLSTACK_KUBECTL'\n{KUBECTL_WRAPPER}MLSTACK_KUBECTL",
        "chmod 755 /usr/local/bin/kubectl",
        "mkdir -p /etc/mlstack",
        f"aws eks update-kubeconfig --region {region} --name {cluster_name} --kubeconfig {KUBECONFIG}",
        f"chmod 644 {KUBECONFIG}",
        f"echo 'export KUBECONFIG={KUBECONFIG}' > /etc/profile.d/mlstack-kubeconfig.sh",
    ]


class ClusterAdminHost(Construct):
    """A small EC2 instance in a private subnet from which admins run kubectl against the cluster.

    - Reached only through SSM Session Manager: no inbound rule, no SSH key, in a private subnet (no public IP).
      Outbound HTTPS only (the API endpoint, SSM, STS and dl.k8s.io through the NAT gateway).
    - Its role carries AmazonSSMManagedInstanceCore and eks:DescribeCluster on this cluster (for the kubeconfig);
      an EKS access entry gives it AmazonEKSClusterAdminPolicy, and the cluster security group admits HTTPS from
      the host's group.
    - IMDSv2 required, encrypted gp3 root volume with `key`, detailed monitoring. Stateless: replace it at will.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        key: kms.IKey,
        cluster: eks.Cluster,
        kubernetes_version: str,
        instance_type: str = "m7i.large",
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = closed_security_group(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="EKS admin host: no inbound; HTTPS out to the API endpoint, SSM and kubectl downloads",
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS: EKS, SSM, STS, dl.k8s.io")
        cluster.connections.allow_from(self.security_group, ec2.Port.tcp(443), "kubectl from the admin host")
        self.role = iam.Role(
            self,
            "Role",
            description="EKS admin host: Session Manager only; cluster access comes from its EKS access entry",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
        )
        # `aws eks update-kubeconfig` (user data) reads the endpoint and CA; `aws eks get-token` needs no permission.
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])
        )
        user_data = ec2.UserData.for_linux()
        user_data.add_commands(
            *admin_host_commands(
                cluster_name=cluster.cluster_name,
                region=Stack.of(self).region,
                kubernetes_version=kubernetes_version,
            )
        )
        self.instance = ec2.Instance(
            self,
            "Instance",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=[subnet]),
            instance_type=ec2.InstanceType(instance_type),
            # Resolved from the public SSM parameter at deploy time (no synth-time lookup).
            machine_image=ec2.MachineImage.latest_amazon_linux2023(),
            security_group=self.security_group,
            role=self.role,
            user_data=user_data,
            detailed_monitoring=True,
            ebs_optimized=True,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        20, encrypted=True, kms_key=key, volume_type=ec2.EbsDeviceVolumeType.GP3
                    ),
                )
            ],
        )
        # The subnet fixes the AZ. CDK would also write the subnet's zone, which is an AZ ID (use1-az4) when the
        # network pins subnets by ID, and AvailabilityZone takes only names.
        cfn_instance = self.instance.node.default_child
        assert isinstance(cfn_instance, ec2.CfnInstance)
        cfn_instance.add_property_deletion_override("AvailabilityZone")
        # IMDSv2 required through a launch template, as `require_imdsv2=True` writes it (same construct ID, name and
        # data, so the template is unchanged), built here rather than by CDK's aspect so that it exists while this
        # construct can acknowledge the Guard control on it.
        launch_template = ec2.CfnLaunchTemplate(
            self.instance,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(http_tokens="required")
            ),
        )
        launch_template.launch_template_name = Names.unique_id(launch_template)
        cfn_instance.launch_template = ec2.CfnInstance.LaunchTemplateSpecificationProperty(
            launch_template_name=launch_template.launch_template_name,
            version=launch_template.attr_latest_version_number,
        )
        skip_guard(
            launch_template,
            {
                "CT.EC2.PR.10": "it carries only the IMDSv2 requirement; the instance itself has detailed monitoring "
                "(Monitoring: true)",
            },
        )
        private = "the host runs in a private subnet of MlVpc (MapPublicIpOnLaunch false) and is reached through SSM"
        skip_guard(cfn_instance, {"CT.EC2.PR.8": private})
        self.access_entry = eks.AccessEntry(
            self,
            "AccessEntry",
            cluster=cluster,  # type: ignore[arg-type]  # jsii stubs: Cluster lacks an ICluster member in typing only
            principal=self.role.role_arn,
            access_policies=[
                eks.AccessPolicy.from_access_policy_name(ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER)
            ],
        )
        CfnOutput(
            self,
            "SessionCommand",
            description="Open a shell with kubectl on the cluster admin host (Session Manager plugin required)",
            value=f"aws ssm start-session --region {Stack.of(self).region} --target {self.instance.instance_id}",
        )
        Validations.of(self.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
                reason="the managed policy Session Manager requires on an instance it manages (Systems Manager User "
                "Guide, instance profile); the host's only access path",
            )
        )
        Validations.of(self.instance).acknowledge(
            Acknowledgment(
                id="AwsSolutions-EC29",
                reason="stateless admin host (kubectl and a kubeconfig from user data): replacing it loses nothing, "
                "and termination protection would block stack deletion",
            )
        )
