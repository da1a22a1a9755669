"""`ServingImage`: a container image in ECR and the repository an execution role may pull from."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Aws
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam

_ECR_PULL = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


@dataclass(frozen=True)
class ServingImage:
    """An image URI and the ARN of its repository (the pull grant is scoped to it)."""

    uri: str
    repository_arn: str

    @classmethod
    def from_registry(
        cls, repository_name: str, tag: str, *, account: str | None = None, region: str | None = None
    ) -> ServingImage:
        """An image in a registry by name. Default `account` and `region`: this stack's (a same-account
        repository); an AWS Deep Learning Container names its regional registry account."""
        account = account or Aws.ACCOUNT_ID
        region = region or Aws.REGION
        return cls(
            uri=f"{account}.dkr.ecr.{region}.{Aws.URL_SUFFIX}/{repository_name}:{tag}",
            repository_arn=f"arn:{Aws.PARTITION}:ecr:{region}:{account}:repository/{repository_name}",
        )

    @classmethod
    def from_repository(cls, repository: ecr.IRepository, repository_name: str, tag: str) -> ServingImage:
        """An image in a repository this app manages (e.g. another stack's): the pull grant references it, so the
        stacks are ordered; the URI is built from the fixed name (CloudFormation cannot Fn::Split an output)."""
        return cls(uri=cls.from_registry(repository_name, tag).uri, repository_arn=repository.repository_arn)

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        token = iam.Grant.add_to_principal(grantee=grantee, actions=["ecr:GetAuthorizationToken"], resource_arns=["*"])
        pull = iam.Grant.add_to_principal(grantee=grantee, actions=_ECR_PULL, resource_arns=[self.repository_arn])
        return token.combine(pull)
