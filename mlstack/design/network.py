"""The network a blueprint implies: zones, subnets, NAT, endpoints, flow logs, and what the project key must
allow (`NetworkDesign`). `NetworkStack` maps it onto `ProjectKey` and `MlVpc`; the plan and the footprint read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.config import BlueprintConfig
from mlstack.config.network import INTERFACE_ENDPOINTS, GatewayEndpoint
from mlstack.design.cost import capacity_block_reservations


@dataclass(frozen=True)
class KeyNeeds:
    """Which services the project key's policy lets use it, by the layers the blueprint has."""

    ebs_through_ec2: bool
    """Training or EKS serving: managed node groups launch through EC2 Auto Scaling with volumes encrypted with the
    key."""
    alarms_to_sns: bool
    """Training, inference, a document pipeline or MLOps: alarm topics are encrypted with the key."""
    budgets_to_sns: bool
    """A `budget:` section: AWS Budgets publishes its notifications to the training stack's encrypted topic."""
    eventbridge_to_sns: bool
    """MLOps (failed executions, monitoring) or a Capacity Block expiry rule: EventBridge publishes to an encrypted
    alarm topic."""


@dataclass(frozen=True)
class NetworkDesign:
    zones: tuple[str, ...]
    zones_are_ids: bool
    cidr: str
    nat_gateways: int
    private_subnet_mask: int
    interface_endpoints: tuple[str, ...]
    """Blueprint keys (`ecr.api`, ...), in the blueprint's order."""
    interface_services: tuple[str, ...]
    """Each key's service name suffix (com.amazonaws.<region>.<suffix>), what `MlVpc` takes."""
    gateway_endpoints: tuple[GatewayEndpoint, ...]
    flow_log_retention_days: int
    flow_log_traffic: str
    key: KeyNeeds
    key_pending_window_days: int
    """30 days for retained blueprints (time to notice a scheduled deletion), 7 for `removal: destroy`."""

    @property
    def public_subnets(self) -> int:
        """One public subnet per zone for the NAT gateways; none in an isolated network."""
        return len(self.zones) if self.nat_gateways else 0


def network_design(config: BlueprintConfig) -> NetworkDesign:
    net = config.network
    ai = config.ai_services
    return NetworkDesign(
        zones=tuple(config.zones),
        zones_are_ids=net.uses_az_ids,
        cidr=str(net.cidr),
        nat_gateways=net.nat_gateways,
        private_subnet_mask=net.private_subnet_mask,
        interface_endpoints=tuple(net.interface_endpoints),
        interface_services=tuple(INTERFACE_ENDPOINTS[k] for k in net.interface_endpoints),
        gateway_endpoints=tuple(net.gateway_endpoints),
        flow_log_retention_days=net.flow_logs.retention_days,
        flow_log_traffic=net.flow_logs.traffic,
        key=KeyNeeds(
            ebs_through_ec2=config.training is not None or config.inference_eks is not None,
            alarms_to_sns=config.training is not None
            or config.inference is not None
            or (ai is not None and ai.document_pipeline is not None)
            or config.mlops is not None,
            budgets_to_sns=config.training is not None and config.budget is not None,
            eventbridge_to_sns=config.mlops is not None
            or (config.training is not None and bool(capacity_block_reservations(config.training))),
        ),
        key_pending_window_days=30 if config.retain else 7,
    )
