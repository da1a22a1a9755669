"""`FsxLustre`: FSx for Lustre for a training cluster, in the training AZ, encrypted, linked to S3, retained."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsii
from aws_cdk import CfnResource, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlstack.constructs.removal import RETAINED
from mlstack.constructs.security.groups import closed_security_group

LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))
"""LNET traffic between clients and servers and among servers (FSx for Lustre User Guide, "File system access
control with Amazon VPC")."""

LUSTRE_VERSION = "2.15"
"""Required for PERSISTENT_2 with a metadata configuration (FSx API Reference, CreateFileSystemLustreConfiguration
MetadataConfiguration); the version FSx recommends for new file systems."""

LustreDeployment = Literal["PERSISTENT_2", "SCRATCH_2"]
"""PERSISTENT_2: replicated storage that survives a file-server failure, with backups. SCRATCH_2: unreplicated,
cheaper, for data that can be rebuilt (FSx for Lustre User Guide, "Deployment options")."""

RepositoryEvent = Literal["NEW", "CHANGED", "DELETED"]
ALL_EVENTS: tuple[RepositoryEvent, ...] = ("NEW", "CHANGED", "DELETED")


@dataclass(frozen=True)
class DataRepository:
    """An S3 prefix linked to the file system (a data repository association: lazy import, export of changes).

    - `s3_path`: `s3://bucket/prefix/` (the bucket exists; it is not created here).
    - `file_system_path`: where the prefix appears in the file system; default `/data`.
    - `import_events` / `export_events`: the changes imported from S3 / exported to S3; default all three.
    """

    s3_path: str
    file_system_path: str = "/data"
    import_events: Sequence[RepositoryEvent] = ALL_EVENTS
    export_events: Sequence[RepositoryEvent] = ALL_EVENTS


@jsii.implements(ec2.IConnectable)
class FsxLustre(Construct):
    """A Lustre file system (PERSISTENT_2 by default) and its security group.

    Props (keyword; defaults in parentheses): `vpc`, `subnet`, `key`, `clients` (required);
    `deployment_type` (PERSISTENT_2), `storage_capacity_gib` (1200, the smallest SSD size),
    `per_unit_storage_throughput` (250 MB/s per TiB; PERSISTENT_2 only, None for SCRATCH_2), `data_compression`
    (LZ4), `automatic_backup_retention_days` (0: none; FSx does not back up a file system linked to S3),
    `data_repository` (None), `removal_policy` (`RETAINED`).

    - One subnet (Lustre is single-AZ): the training AZ's, so clients reach it without crossing AZs.
    - The security group admits Lustre ports from itself and from `clients`; clients accept them back.
    - Encrypted with `key` (customer-managed), LZ4 compression, metadata mode AUTOMATIC (PERSISTENT_2).
    - An optional data repository association links an S3 prefix (lazy import + export of changes).
    - `removal_policy` applies to the file system (`RETAINED` keeps the data when the stack goes), to its security
      group (the retained file system's interfaces still use it) and to the group's self-referencing rules.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        key: kms.IKey,
        clients: ec2.IConnectable,
        deployment_type: LustreDeployment = "PERSISTENT_2",
        storage_capacity_gib: int = 1200,
        per_unit_storage_throughput: int | None = 250,
        data_compression: Literal["LZ4", "NONE"] = "LZ4",
        automatic_backup_retention_days: int = 0,
        data_repository: DataRepository | None = None,
        removal_policy: RemovalPolicy = RETAINED,
    ) -> None:
        super().__init__(scope, construct_id)
        if deployment_type == "SCRATCH_2" and per_unit_storage_throughput is not None:
            raise ValueError("per_unit_storage_throughput is a PERSISTENT_2 setting; pass None for SCRATCH_2")
        self.storage_capacity_gib = storage_capacity_gib
        self.subnet = subnet
        self.security_group = closed_security_group(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="FSx for Lustre: LNET ports from the file system itself and its clients",
        )
        for port in LUSTRE_PORTS:
            self.security_group.connections.allow_internally(port, "Lustre between file servers")
            self.security_group.connections.allow_from(clients, port, "Lustre from training nodes")
            self.security_group.connections.allow_to(clients, port, "Lustre to training nodes")

        lustre: dict[str, Any] = {
            "deployment_type": deployment_type,
            "data_compression_type": data_compression,
        }
        if deployment_type == "PERSISTENT_2":
            lustre["per_unit_storage_throughput"] = per_unit_storage_throughput
            lustre["metadata_configuration"] = fsx.CfnFileSystem.MetadataConfigurationProperty(mode="AUTOMATIC")
            lustre["automatic_backup_retention_days"] = automatic_backup_retention_days
            if automatic_backup_retention_days:
                lustre["copy_tags_to_backups"] = True
        self.file_system = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=LUSTRE_VERSION,
            storage_capacity=storage_capacity_gib,
            storage_type="SSD",
            subnet_ids=[subnet.subnet_id],
            security_group_ids=[self.security_group.security_group_id],
            kms_key_id=key.key_arn,
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(**lustre),
        )
        self.file_system.apply_removal_policy(removal_policy)
        # CreateFileSystem checks that the group admits Lustre traffic from itself; the rules are resources of their
        # own, so without a dependency CloudFormation may create the file system first and fail
        # (aws/aws-parallelcluster #6181).
        for child in self.security_group.node.children:
            if isinstance(child, ec2.CfnSecurityGroupIngress | ec2.CfnSecurityGroupEgress):
                self.file_system.node.add_dependency(child)
        # A retained file system keeps its network interfaces, and they keep this group: deleting the group would
        # fail (DependencyViolation) and leave the stack in DELETE_FAILED. The group and its self-referencing rules
        # (LNET between the file servers) go, or stay, with the file system; rules naming the clients' groups go.
        self.security_group.apply_removal_policy(removal_policy)
        own_id = self.security_group.security_group_id
        for child in self.security_group.node.children:
            peer = None
            if isinstance(child, ec2.CfnSecurityGroupIngress):
                peer = child.source_security_group_id
            elif isinstance(child, ec2.CfnSecurityGroupEgress):
                peer = child.destination_security_group_id
            if peer is not None and peer == own_id:
                assert isinstance(child, CfnResource)
                child.apply_removal_policy(removal_policy)

        self.data_repository: fsx.CfnDataRepositoryAssociation | None = None
        repo = data_repository
        if repo is not None:
            self.data_repository = fsx.CfnDataRepositoryAssociation(
                self,
                "DataRepository",
                file_system_id=self.file_system.ref,
                file_system_path=repo.file_system_path,
                data_repository_path=repo.s3_path,
                batch_import_meta_data_on_create=True,
                s3=fsx.CfnDataRepositoryAssociation.S3Property(
                    auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                        events=list(repo.import_events)
                    ),
                    auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(
                        events=list(repo.export_events)
                    ),
                ),
            )

    @property
    def connections(self) -> ec2.Connections:
        return self.security_group.connections

    @property
    def file_system_id(self) -> str:
        return self.file_system.ref

    @property
    def dns_name(self) -> str:
        return self.file_system.attr_dns_name

    @property
    def mount_name(self) -> str:
        return self.file_system.attr_lustre_mount_name

    def kubernetes_manifests(self, *, namespace: str, claim_name: str = "fsx") -> list[dict[str, Any]]:
        """StorageClass, PersistentVolume and PersistentVolumeClaim that mount this file system through the FSx CSI
        driver (static provisioning: the file system exists, nothing is created or deleted by Kubernetes)."""
        storage_class = "fsx-lustre-static"
        capacity = f"{self.storage_capacity_gib}Gi"
        return [
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": storage_class},
                "provisioner": "fsx.csi.aws.com",
                "reclaimPolicy": "Retain",
                "volumeBindingMode": "Immediate",
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{namespace}-{claim_name}"},
                "spec": {
                    "capacity": {"storage": capacity},
                    "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": storage_class,
                    "mountOptions": ["flock"],
                    "csi": {
                        "driver": "fsx.csi.aws.com",
                        "volumeHandle": self.file_system_id,
                        "volumeAttributes": {"dnsname": self.dns_name, "mountname": self.mount_name},
                    },
                    "claimRef": {"namespace": namespace, "name": claim_name},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim_name, "namespace": namespace},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": storage_class,
                    "resources": {"requests": {"storage": capacity}},
                    "volumeName": f"{namespace}-{claim_name}",
                },
            },
        ]
