"""The project's two kinds of bucket, made in one place: `kms_bucket` (data: versioned, TLS-only, encrypted with a
customer-managed key, logging its access) and `access_log_bucket` (the SSE-S3 target of S3 server access logs).

Every stack's and construct's bucket is one of these, with its own construct ID and removal policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlstack.constructs.removal import RETAINED
from mlstack.constructs.scanners import acknowledge_nag, skip_checkov, skip_guard

NONCURRENT = s3.LifecycleRule(
    id="ExpireOldVersions",
    noncurrent_version_expiration=Duration.days(90),
    abort_incomplete_multipart_upload_after=Duration.days(7),
)
"""Versioning keeps overwritten artifacts and results recoverable for 90 days, not forever."""

GUARD_BUCKET_SKIPS = {
    "CT.S3.PR.4": "nothing consumes this bucket's object events (no function, queue or rule reads them); a "
    "notification configuration without a consumer would only add a target to secure",
    "CT.S3.PR.9": "Object Lock would keep every version undeletable for its retention period, while noncurrent "
    "versions here expire after 90 days (ExpireOldVersions); immutable records belong in a bucket made for them",
}
"""The Control Tower controls every data bucket skips, with the reason (AWS Guard rules, tests/template_checks)."""


def access_log_bucket(
    scope: Construct, construct_id: str = "AccessLogs", *, removal_policy: RemovalPolicy = RETAINED
) -> s3.Bucket:
    """An SSE-S3 bucket for S3 server access logs (the only encryption S3 delivers logs to), versioned, TLS-only."""
    bucket = s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        removal_policy=removal_policy,
        lifecycle_rules=[NONCURRENT],
    )
    recurse = "this is the access-log target bucket; logging it would recurse"
    acknowledge_nag(bucket, {"AwsSolutions-S1": recurse})
    skip_checkov(bucket, {"CKV_AWS_18": recurse})
    skip_guard(
        bucket,
        {
            "CT.S3.PR.2": recurse,
            # S3 User Guide, "Enabling Amazon S3 server access logging": the target bucket must use SSE-S3.
            "CT.S3.PR.10": "S3 delivers server access logs only to a bucket encrypted with SSE-S3, not SSE-KMS",
            **GUARD_BUCKET_SKIPS,
        },
    )
    return bucket


def kms_bucket(
    scope: Construct,
    construct_id: str,
    *,
    key: kms.IKey,
    access_logs: s3.IBucket | None,
    log_prefix: str | None = None,
    removal_policy: RemovalPolicy = RETAINED,
    lifecycle_rules: Sequence[s3.LifecycleRule] = (NONCURRENT,),
    guard_skips: Mapping[str, str] | None = GUARD_BUCKET_SKIPS,
    bucket_name: str | None = None,
) -> s3.Bucket:
    """A versioned, TLS-only bucket encrypted with `key` (bucket keys on), logging to `access_logs` under
    `log_prefix` (default `<construct_id>/`; no logging when `access_logs` is None).

    `lifecycle_rules` default: noncurrent versions expire after 90 days. `guard_skips`: the Guard controls skipped
    with their reasons (None: the caller records its own). `bucket_name`: default generated (a fixed name only where
    a service requires its form)."""
    bucket = s3.Bucket(
        scope,
        construct_id,
        bucket_name=bucket_name,
        encryption=s3.BucketEncryption.KMS,
        encryption_key=key,
        bucket_key_enabled=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=None
        if access_logs is None
        else (log_prefix if log_prefix is not None else f"{construct_id}/"),
        removal_policy=removal_policy,
        lifecycle_rules=list(lifecycle_rules) or None,
    )
    if guard_skips is not None:
        skip_guard(bucket, guard_skips)
    return bucket
