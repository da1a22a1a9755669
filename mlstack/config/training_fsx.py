"""FSx for Lustre of the `training:` section: the file system and its S3 data repository association.

Rules checked here (FSx for Lustre User Guide; botocore fsx model): SSD capacity steps, per-unit throughput of
PERSISTENT_2, no backups on SCRATCH_2 or with a data repository, bucket, prefix and path forms.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from mlstack.config.base import StrictModel

RepositoryEvent = Literal["NEW", "CHANGED", "DELETED"]
ALL_REPOSITORY_EVENTS: tuple[RepositoryEvent, ...] = ("NEW", "CHANGED", "DELETED")

FsxDeployment = Literal["PERSISTENT_2", "SCRATCH_2"]
PERSISTENT_2_THROUGHPUT = (125, 250, 500, 1000)
"""MB/s per TiB allowed for PERSISTENT_2 SSD ([BOTO] fsx CreateFileSystemLustreConfiguration)."""

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class DataRepositoryConfig(StrictModel):
    """S3 prefix linked to the file system by a data repository association (lazy import + export)."""

    bucket: str
    """Existing bucket name (not created here)."""
    prefix: str = ""
    """Key prefix inside the bucket, e.g. `datasets/` (empty: the whole bucket)."""
    file_system_path: str = "/data"
    """Where the prefix appears inside the file system."""
    import_events: list[RepositoryEvent] = Field(default_factory=lambda: list(ALL_REPOSITORY_EVENTS))
    """S3 changes imported into the file system (AutoImportPolicy)."""
    export_events: list[RepositoryEvent] = Field(default_factory=lambda: list(ALL_REPOSITORY_EVENTS))
    """File-system changes exported to S3 (AutoExportPolicy)."""

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str) -> str:
        if not _BUCKET.match(value) or ".." in value:
            raise ValueError(f"{value!r} is not an S3 bucket name; use 3-63 lower-case letters, digits, dots, hyphens")
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if value.startswith("/"):
            raise ValueError(f"prefix {value!r} must not start with '/'; write e.g. datasets/")
        return value

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not re.match(r"^/[A-Za-z0-9_./-]*$", value) or value == "/":
            raise ValueError(f"file_system_path {value!r} must be an absolute path below /, e.g. /data")
        return value

    @property
    def s3_path(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


class FsxConfig(StrictModel):
    """FSx for Lustre shared by the training nodes (FSx for Lustre User Guide)."""

    deployment_type: FsxDeployment = "PERSISTENT_2"
    storage_capacity_gib: int = 1200
    """1200, 2400, then multiples of 2400 GiB (PERSISTENT_2 / SCRATCH_2 SSD)."""
    per_unit_storage_throughput: int | None = 250
    """MB/s per TiB for PERSISTENT_2: 125, 250, 500 or 1000 (default 250). Not used by SCRATCH_2: leave it out."""
    data_compression: Literal["LZ4", "NONE"] = "LZ4"
    availability_zone: str | None = None
    """Default: the AZ of the EFA node group (it must be the same AZ)."""
    automatic_backup_retention_days: int = Field(default=0, ge=0, le=90)
    data_repository: DataRepositoryConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _scratch_has_no_throughput(cls, data: Any) -> Any:
        # The 250 MB/s/TiB default is for PERSISTENT_2; SCRATCH_2 without the key means "none", not an error.
        if isinstance(data, dict) and data.get("deployment_type") == "SCRATCH_2":
            data = {"per_unit_storage_throughput": None, **data}
        return data

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, value: int) -> int:
        if value not in (1200, 2400) and (value <= 0 or value % 2400 != 0):
            raise ValueError(f"FSx for Lustre SSD capacity must be 1200, 2400 or a multiple of 2400 GiB, got {value}")
        return value

    @model_validator(mode="after")
    def _throughput(self) -> FsxConfig:
        if self.deployment_type == "PERSISTENT_2":
            if self.per_unit_storage_throughput not in PERSISTENT_2_THROUGHPUT:
                allowed = ", ".join(str(v) for v in PERSISTENT_2_THROUGHPUT)
                raise ValueError(
                    f"per_unit_storage_throughput for PERSISTENT_2 must be one of {allowed} MB/s/TiB, "
                    f"got {self.per_unit_storage_throughput}"
                )
        elif self.per_unit_storage_throughput is not None:
            raise ValueError(f"per_unit_storage_throughput is not used by {self.deployment_type}; remove it")
        if self.deployment_type == "SCRATCH_2" and self.automatic_backup_retention_days:
            raise ValueError("SCRATCH_2 file systems have no backups; set automatic_backup_retention_days: 0")
        if self.data_repository is not None and self.automatic_backup_retention_days:
            raise ValueError(
                "FSx for Lustre does not back up file systems linked to an S3 data repository (FSx Lustre User Guide, "
                "Using data repositories); set automatic_backup_retention_days: 0 (S3 holds the durable copy) or "
                "remove data_repository"
            )
        return self

    @property
    def capacity_tib(self) -> float:
        """Capacity in TiB as FSx counts it for throughput: 1000 GiB per TiB ([BOTO] PerUnitStorageThroughput: "For a
        2.4-TiB file system [2400 GiB], provisioning 50 MB/s/TiB ... yields 120 MB/s")."""
        return self.storage_capacity_gib / 1000

    @property
    def throughput_mbps(self) -> float:
        """Aggregate baseline disk throughput, MB/s (capacity in TiB x per-unit throughput; SCRATCH_2: 200/TiB)."""
        per_tib = self.per_unit_storage_throughput or 200
        return self.capacity_tib * per_tib
