# SageMaker real-time inference container: OpenVINO runtime serving an int8 IR (the /ping and /invocations
# contract on port 8080). The model comes from SageMaker's model.tar.gz, unpacked to /opt/ml/model
# (model.xml + model.bin written by `python -m runtime.workloads.serve.convert`).
# Build from the repository root and push it to the repository the DataStack creates (output ImageRepositoryUri,
# <account>.dkr.ecr.<region>.amazonaws.com/<image.repository>) with the blueprint's image.tag: for
# inference-intel-amx, openvino-model-server-sagemaker:2025.3. The tags are immutable: a rebuild needs a new tag
# (and image.tag set to it), and `mlstack precheck` looks for exactly that tag.
#   docker build -f runtime/containers/openvino.Dockerfile -t <ImageRepositoryUri>:2025.3 .
#   docker push <ImageRepositoryUri>:2025.3
FROM python:3.11-slim
RUN pip install --no-cache-dir openvino==2026.4.1 numpy==2.4.6
COPY runtime/__init__.py /opt/mlstack/runtime/__init__.py
COPY runtime/workloads/__init__.py /opt/mlstack/runtime/workloads/__init__.py
COPY runtime/workloads/serve/__init__.py runtime/workloads/serve/server.py /opt/mlstack/runtime/workloads/serve/
WORKDIR /opt/mlstack
ENV MODEL_DIR=/opt/ml/model PORT=8080
EXPOSE 8080
# SageMaker starts the container with the argument "serve".
ENTRYPOINT ["python", "-m", "runtime.workloads.serve.server"]
