"""`mlstack access`: prove offline that every call a blueprint's run-time principals make is allowed.

`principals` and `finders` find the roles that act after the deploy and what each one touches; `calls` is the
table of the calls each kind of principal makes (service-made calls included, each with its AWS documentation
page); `resolve` fills in the ARNs from the synthesized templates; `evaluate` decides every call with a
maintained IAM policy simulator; `render` prints one table per principal.
"""

from __future__ import annotations

from mlstack.access.evaluate import Call, Report, evaluate
from mlstack.access.resolve import Stacks

__all__ = ["Call", "Report", "Stacks", "evaluate"]
