"""`mlstack precheck`'s cost check: a blueprint's budget filters on its `mlstack:blueprint` tag, which AWS Budgets
counts only once the tag is active for cost allocation (AWS Billing User Guide, "Activating user-defined cost
allocation tags"; Cost Explorer API Reference, ListCostAllocationTags). One read-only call."""

from __future__ import annotations

from typing import Any

from mlstack.config import BlueprintConfig
from mlstack.config.budget import BUDGET_TAG


def check_cost_allocation_tag(config: BlueprintConfig, session: Any, problems: list[str], notes: list[str]) -> None:
    """Append a problem when the blueprint has a budget and its tag is inactive for cost allocation (a note when
    Billing does not list the tag yet, or cannot be read)."""
    if config.budget is None:
        return
    # Cost Explorer is served from us-east-1 whatever the blueprint's region (Cost Explorer API Reference, endpoints).
    ce = session.client("ce", region_name="us-east-1")
    try:
        tags = ce.list_cost_allocation_tags(TagKeys=[BUDGET_TAG], Type="UserDefined").get("CostAllocationTags", [])
    except Exception as err:
        code = getattr(err, "response", {}).get("Error", {}).get("Code", type(err).__name__)
        notes.append(f"cost allocation tag {BUDGET_TAG} not readable ({code}); check it in the Billing console")
        return
    status = next((str(t.get("Status")) for t in tags if t.get("TagKey") == BUDGET_TAG), None)
    activate = (
        f"aws ce update-cost-allocation-tags-status --cost-allocation-tags-status TagKey={BUDGET_TAG},Status=Active"
    )
    if status is None:
        # Billing lists a tag key only once a resource carries it: before the first deploy this is expected.
        notes.append(
            f"cost allocation tag {BUDGET_TAG} is not known to Billing yet (it appears up to 24 hours after a "
            f"tagged resource exists): the budget counts nothing until it is active; after the deploy, {activate}"
        )
    elif status != "Active":
        problems.append(f"cost allocation tag {BUDGET_TAG} is {status}: the budget counts nothing until {activate}")
