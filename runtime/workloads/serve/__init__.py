"""OpenVINO int8 serving: `convert` (PyTorch -> OpenVINO IR -> int8 with NNCF) and `server` (SageMaker contract)."""
