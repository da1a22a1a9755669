"""The facts a blueprint's run-time principals act on, read from its templates (`Finder`).

A role is a run-time principal when something that runs after the deploy uses it: a SageMaker pipeline
(`RoleArn`) and the jobs its definition starts (each step's `RoleArn`), a SageMaker model, a Lambda function
with a handler from `runtime/`, a state machine, an EventBridge target, a HyperPod instance group, a Batch
compute environment or job definition, an EKS node group, a Pod Identity association, an instance profile.
CDK's own deploy-time functions (custom-resource providers) are not run-time principals.
"""

from __future__ import annotations

from typing import Any

from mlstack.access.model import Facts, Principal, Use, merge
from mlstack.access.resolve import Stacks


class Finder:
    def __init__(self, stacks: Stacks) -> None:
        self.stacks = stacks
        self.principals: dict[str, Principal] = {}
        self.roles = {
            stacks.arn(s, lid): (s, lid) for s, lid, r in stacks.all_resources() if r["Type"] == "AWS::IAM::Role"
        }
        self.bucket_keys: dict[str, str] = {}
        self.subnet_vpc: dict[str, str] = {}
        self.topic_keys: dict[str, str] = {}
        self.queue_keys: dict[str, str] = {}
        self.secret_keys_by_arn: dict[str, str] = {}
        for s, lid, r in stacks.all_resources():
            props = r.get("Properties", {})
            if r["Type"] == "AWS::S3::Bucket":
                rules = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
                for rule in rules:
                    key = rule.get("ServerSideEncryptionByDefault", {}).get("KMSMasterKeyID")
                    if key is not None:
                        self.bucket_keys[stacks.name(s, lid)] = self._key_arn(stacks.text(s, key))
            elif r["Type"] == "AWS::EC2::Subnet":
                self.subnet_vpc[stacks.text(s, {"Ref": lid})] = stacks.text(s, props["VpcId"])
            elif r["Type"] == "AWS::SNS::Topic" and "KmsMasterKeyId" in props:
                self.topic_keys[stacks.text(s, {"Ref": lid})] = self._key_arn(stacks.text(s, props["KmsMasterKeyId"]))
            elif r["Type"] == "AWS::SecretsManager::Secret" and "KmsKeyId" in props:
                self.secret_keys_by_arn[stacks.text(s, {"Ref": lid})] = self._key_arn(stacks.text(s, props["KmsKeyId"]))
            elif r["Type"] == "AWS::SQS::Queue" and "KmsMasterKeyId" in props:
                self.queue_keys[stacks.arn(s, lid)] = self._key_arn(stacks.text(s, props["KmsMasterKeyId"]))

    # ---- facts -------------------------------------------------------------------------------------------
    def _key_arn(self, key: str) -> str:
        if key.startswith("arn:"):
            return key
        return f"arn:aws:kms:{self.stacks.region}:{self.stacks.account}:key/{key}"

    def s3(self, uri: str, *, prefix: bool, kind: str) -> Facts:
        """Facts for reading (kind 'in') or writing (kind 'out') an S3 URI; a prefix is listed when read."""
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        bucket_arn = f"arn:aws:s3:::{bucket}"
        looks_like_file = "." in key.rsplit("/", 1)[-1]
        obj = key if (looks_like_file or not prefix) else f"{key.rstrip('/')}/part-0000"
        facts: Facts = {}
        item = {"bucket_arn": bucket_arn, "prefix": key, "object_arn": f"{bucket_arn}/{obj}"}
        if kind == "in":
            facts["inputs"] = [item]
            if prefix:
                facts["s3_prefix_inputs"] = [item]
        else:
            facts["outputs"] = [item]
        if bucket in self.bucket_keys:
            facts["input_keys" if kind == "in" else "output_keys"] = [{"key": self.bucket_keys[bucket]}]
        return facts

    def secret_keys(self, secret_arn: str) -> list[dict[str, str]]:
        """The customer managed key of a secret of the blueprint (none: the AWS managed key, no grant needed)."""
        key = self.secret_keys_by_arn.get(secret_arn)
        return [{"key": key}] if key else []

    def image(self, uri: str) -> Facts:
        host, _, path = uri.partition("/")
        account, _, rest = host.partition(".dkr.ecr.")
        region = rest.split(".", 1)[0]
        repo = path.split("@", 1)[0].split(":", 1)[0]
        return {"images": [{"repository": f"arn:aws:ecr:{region}:{account}:repository/{repo}"}]}

    def vpc(self, subnets: list[str], groups: list[str]) -> Facts:
        region, account = self.stacks.region, self.stacks.account
        facts: Facts = {"vpcs": []}
        for subnet in subnets:
            vpc = self.subnet_vpc.get(subnet, "vpc-unknown")
            facts["vpcs"].append(
                {
                    "subnet_arn": f"arn:aws:ec2:{region}:{account}:subnet/{subnet}",
                    "vpc_arn": f"arn:aws:ec2:{region}:{account}:vpc/{vpc}",
                    "sg_arn": f"arn:aws:ec2:{region}:{account}:security-group/{groups[0] if groups else 'none'}",
                }
            )
        return facts

    def logs(self, group: str, stream: str) -> Facts:
        return {"logs": [{"group": group, "stream": stream}]}

    # ---- principals --------------------------------------------------------------------------------------
    def add(self, role_arn: str, kind: str, what: str, *parts: Facts) -> None:
        if role_arn not in self.roles:
            return  # a role from outside the blueprint: its policies are not ours to check
        stack, lid = self.roles[role_arn]
        principal = self.principals.setdefault(role_arn, Principal(stack, lid, role_arn))
        principal.uses.append(Use(kind, what, merge(*parts)))

    # ---- SageMaker jobs (pipeline steps and jobs a handler starts) ---------------------------------------
    def sagemaker_job(self, caller: str, kind: str, name: str, args: dict[str, Any]) -> None:
        """A processing (`kind` 'ProcessingJob') or training ('TrainingJob') job's calls, given its API arguments."""
        region, account = self.stacks.region, self.stacks.account
        role = str(args["RoleArn"])
        job_type = "processing-job" if kind == "ProcessingJob" else "training-job"
        job_arn = f"arn:aws:sagemaker:{region}:{account}:{job_type}/{name}"
        # Stream names: [job-name]/algo-[instance-number]-[epoch_timestamp] (SageMaker logging page)
        parts: list[Facts] = [self.logs(f"/aws/sagemaker/{kind}s", f"{name}/algo-1-1700000000")]
        if kind == "ProcessingJob":
            resources = args["ProcessingResources"]["ClusterConfig"]
            parts.append(self.image(str(args["AppSpecification"]["ImageUri"])))
            for item in args.get("ProcessingInputs", []):
                s3 = item.get("S3Input")
                if s3:
                    parts.append(self.s3(str(s3["S3Uri"]), prefix=s3.get("S3DataType") == "S3Prefix", kind="in"))
            output = args.get("ProcessingOutputConfig", {})
            for item in output.get("Outputs", []):
                parts.append(self.s3(str(item["S3Output"]["S3Uri"]), prefix=True, kind="out"))
            vpc = args.get("NetworkConfig", {}).get("VpcConfig")
        else:
            resources = args["ResourceConfig"]
            parts.append(self.image(str(args["AlgorithmSpecification"]["TrainingImage"])))
            for item in args.get("InputDataConfig", []):
                s3 = item["DataSource"].get("S3DataSource")
                if s3:
                    parts.append(self.s3(str(s3["S3Uri"]), prefix=s3.get("S3DataType") == "S3Prefix", kind="in"))
            output = args.get("OutputDataConfig", {})
            parts.append(self.s3(str(output["S3OutputPath"]), prefix=True, kind="out"))
            vpc = args.get("VpcConfig")
        if output.get("KmsKeyId"):
            parts.append({"output_keys": [{"key": self._key_arn(str(output["KmsKeyId"]))}]})
        if vpc:
            parts.append(self.vpc([str(s) for s in vpc["Subnets"]], [str(g) for g in vpc["SecurityGroupIds"]]))
        parts.append({"assumed_for": [{"arn": job_arn}]})
        self.add(role, "sagemaker-job", f"{kind} {name}", *parts)
        caller_facts: Facts = {
            "jobs": [{"create": f"Create{kind}", "describe": f"Describe{kind}", "job_arn": job_arn, "role": role}]
        }
        if resources.get("VolumeKmsKeyId"):
            caller_facts["volume_keys"] = [{"key": self._key_arn(str(resources["VolumeKmsKeyId"])), "role": role}]
        self.add(caller, "sagemaker-job-caller", f"starts {kind} {name}", caller_facts)
