"""The removal policy every stateful resource gets by default (keys, buckets, file systems, repositories, logs).

`RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE` synthesizes `DeletionPolicy: RetainExceptOnCreate` and
`UpdateReplacePolicy: Retain`: the resource survives a stack deletion and a replacement, like `Retain`, except when
the stack operation that created it rolls back. Then CloudFormation deletes it, so a failed first deploy leaves no
bucket or repository whose fixed name blocks the retry and no file system that keeps billing ("DeletionPolicy
attribute", AWS CloudFormation Template Reference: RetainExceptOnCreate "can be specified for any resource that
supports the DeletionPolicy attribute"). A resource created in an update of an existing stack is deleted the same way
if that update rolls back: it held no data before the update began.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy

RETAINED = RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
"""Default `removal_policy` of every mlstack construct that holds data; `MlStack.removal_policy` unless the
blueprint says `removal: destroy`."""
