"""The multi-node job definition's container command and retry strategy (AWS Batch), apart from the construct.

Pure functions of keyword values (no blueprint): `BatchMultiNodeTraining` calls them with its props.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from aws_cdk import aws_batch as batch

MAX_ATTEMPTS = 10
"""RetryStrategy.attempts ranges 1 to 10 (AWS Batch API Reference, "RetryStrategy")."""
HOST_TERMINATED = "Host EC2*"
"""Status reason of a job whose instance EC2 took away ("Host EC2 (instance i-...) terminated.", AWS Batch User
Guide, "Automated job retries", the example that retries only on it)."""


def shell_word(arg: str) -> str:
    """`arg` for `bash -c`: quoted; an argument naming one of Batch's `AWS_BATCH_*` variables is double-quoted so
    that the shell expands it (e.g. a checkpoint directory per job ID)."""
    if "${AWS_BATCH_" in arg and not any(c in arg for c in '"\\`'):
        return f'"{arg}"'
    return shlex.quote(arg)


def retry_strategy(attempts: int, exit_codes: Sequence[int]) -> batch.CfnJobDefinition.RetryStrategyProperty:
    """Up to `attempts` attempts. A container exit code in `exit_codes` (an application error: retrying cannot help)
    ends the job at once; a terminated host retries; so does any other failure, as Batch does when no condition
    matches (AWS Batch API Reference, "EvaluateOnExit": up to 5 conditions, patterns match from the start and may
    end with `*`). With one attempt there is nothing to evaluate."""
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise ValueError(f"attempts must be 1 to {MAX_ATTEMPTS} (the Batch API's range), got {attempts}")
    if attempts == 1:
        return batch.CfnJobDefinition.RetryStrategyProperty(attempts=1)
    rules = [batch.CfnJobDefinition.EvaluateOnExitProperty(on_exit_code=str(c), action="EXIT") for c in exit_codes]
    rules.append(batch.CfnJobDefinition.EvaluateOnExitProperty(on_status_reason=HOST_TERMINATED, action="RETRY"))
    return batch.CfnJobDefinition.RetryStrategyProperty(attempts=attempts, evaluate_on_exit=rules)
