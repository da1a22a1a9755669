"""Training-layer constructs: EFA networking, accelerated EKS node groups, the EKS training cluster."""
