"""SageMaker MLOps constructs: pipeline definitions built in code, the pipeline, approval-to-deploy, Studio."""

from mlstack.constructs.sagemaker.approval_deploy import ApprovalDeploy
from mlstack.constructs.sagemaker.jobs import JobNetwork, ModelPackage, ProcessingJob, TrainingJob
from mlstack.constructs.sagemaker.mlops_pipeline import MlopsPipeline, TrainingSettings
from mlstack.constructs.sagemaker.pipeline_definition import (
    Condition,
    ConditionStep,
    Parameter,
    PipelineDefinition,
    PipelineDefinitionError,
    PropertyFile,
    Step,
)
from mlstack.constructs.sagemaker.studio import StudioDomain

__all__ = [
    "ApprovalDeploy",
    "Condition",
    "ConditionStep",
    "JobNetwork",
    "MlopsPipeline",
    "ModelPackage",
    "Parameter",
    "PipelineDefinition",
    "PipelineDefinitionError",
    "ProcessingJob",
    "PropertyFile",
    "Step",
    "StudioDomain",
    "TrainingJob",
    "TrainingSettings",
]
