"""One botocore data loader per test process, shared by every botocore session it creates.

A botocore session reads a service's model (JSON: SageMaker's is about 1.5 MB), its endpoint rules and the partition
data from disk once, through its loader, which keeps them for that session's later clients (botocore.loaders,
`instance_cache`). moto's `mock_aws` replaces boto3's default session with a new one each time it starts, so every
test that starts it and creates a client read them again: 24 tests of `tests/runtime/test_approval_deploy.py` spent
4.6 of their 7.4 s of CPU in `boto3.client`. With the loader shared (one per data path, `create_loader`'s only
input), each session still has its own credentials, configuration and event handlers (moto's included); only the
read-only model data is shared, as two clients of one session share it already. Measured: that module 7.4 -> 4.2 s
of CPU, `tests/runtime/test_scale_to_zero.py` 4.8 -> 3.4 s.
"""

from __future__ import annotations

import functools

import botocore.loaders
import botocore.session

shared_loader = functools.cache(botocore.loaders.create_loader)
"""botocore's `create_loader(search_path_string)`, one loader per argument."""


def share() -> None:
    """Make every botocore session this process creates from now on use `shared_loader` (idempotent)."""
    botocore.session.create_loader = shared_loader
