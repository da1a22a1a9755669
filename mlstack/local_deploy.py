"""`make deploy-local BLUEPRINT=<name>`: the real `cdk bootstrap` and `cdk deploy` against a local moto server.

    python -m mlstack.local_deploy [BLUEPRINT] [--port N] [--create-only]

1. Starts `python -m mlstack.local_moto PORT` (moto with the extensions listed there) on its own port and
   remembers its PID; it is stopped by that PID when this program ends, whether the deploy passed, failed or
   was interrupted (try/finally, and SIGTERM/SIGHUP are turned into an exit that runs it).
2. Runs the pinned CLI with dummy credentials and `AWS_ENDPOINT_URL=http://localhost:PORT`:
   `cdk bootstrap`, then `cdk deploy --all` three times: create; update (the same blueprint with one more
   tag, which changes every taggable resource); and again with no change (the CLI reports "no changes").
3. Prints each stack's status and outputs and the resource types moto did not model (placeholders).

What moto cannot do, and what is done instead:
- Change sets: updating a stack through one fails in moto (HTTP 500 in DeleteChangeSet), so every deploy uses
  `--method=direct` (UpdateStack), and the create and update use `--no-previous-parameters` because moto
  cannot reuse the previous value of CDK's BootstrapVersion parameter. The no-change deploy leaves that flag
  out: with it the CLI counts the parameter as changed and calls UpdateStack, which moto, unlike
  CloudFormation ("No updates are to be performed"), completes as an update.
- Destroy: `cdk destroy` fails in moto ("vpc ... has dependencies"); nothing is destroyed: stopping the
  server drops its in-memory state.
- Anything moto only stores (no EKS control plane, no FSx, no endpoint that serves): a local deploy proves the
  app synthesizes, its assets publish, its templates are accepted and references resolve in order; it does
  not prove the service accepts each property. `mlstack plan` and the quota checks cover the rest.
- Docker: an EKS blueprint's training image is a Docker image asset that `cdk deploy` would build; the local
  deploy passes `-c training-image=LOCAL_TRAINING_IMAGE`, so the job names that URI and nothing is built.
- Retries: `AWS_MAX_ATTEMPTS=1`, so a moto error fails fast instead of ~55 s of SDK retries.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from mlstack.config import DEFAULT_BLUEPRINT, load, resolve
from mlstack.errors import MlstackError
from mlstack.k8s.image import IMAGE_CONTEXT_KEY

ROOT = Path(__file__).resolve().parents[1]

MOTO_ACCOUNT = "123456789012"
"""moto's default account: what the dummy credentials resolve to (STS GetCallerIdentity)."""
CDK: tuple[str, ...] = ("npx", "--no-install", "cdk")
NO_PREVIOUS = "--no-previous-parameters"
LOCAL_TRAINING_IMAGE = f"{MOTO_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/mlstack-train:local"
"""The training image a local deploy names instead of building one (`-c training-image`): no Docker engine here."""
DEPLOY_FLAGS: tuple[str, ...] = ("--require-approval", "never", "--method=direct", NO_PREVIOUS, "--progress", "events")


class DeployError(Exception):
    """A step of the local deploy failed; the message says which."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def moto_server(
    port: int,
    log: Path,
    *,
    account: str = MOTO_ACCOUNT,
    command: Sequence[str] | None = None,
    timeout_s: float = 60.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """A moto server on `port` for the `with` block, stopped by its PID on the way out, however the block ends."""
    argv = list(command or (sys.executable, "-m", "mlstack.local_moto", str(port)))
    env = {**os.environ, "MOTO_ACCOUNT_ID": account}
    with log.open("wb") as out:
        # Own session: a Ctrl-C in the terminal reaches this program, which then stops the server itself.
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not _listening(port):
            if process.poll() is not None:
                raise DeployError(f"moto server exited with {process.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise DeployError(f"moto server not listening on port {port} after {timeout_s:.0f} s; see {log}")
            time.sleep(0.2)
        print(f"moto server PID {process.pid} on http://localhost:{port} (log: {log})", flush=True)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the process by its PID: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    print(f"moto server PID {process.pid} stopped (exit {process.returncode})", flush=True)


def cli_env(port: int, region: str) -> dict[str, str]:
    """The environment of every CLI call: dummy credentials, every AWS call to the local server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION=region,
        AWS_DEFAULT_REGION=region,
        # localhost, not 127.0.0.1: moto reads the bucket of a template URL from the host name unless it says
        # "localhost", so with an IP the deploy fails with "The specified bucket does not exist".
        AWS_ENDPOINT_URL=f"http://localhost:{port}",
        AWS_MAX_ATTEMPTS="1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        CDK_DISABLE_CLI_TELEMETRY="true",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="1",
    )
    return env


Runner = Callable[[list[str], dict[str, str]], str]


def run(argv: list[str], env: dict[str, str]) -> str:
    """Run a command in the project root, streaming its output; return the output, DeployError when it fails."""
    print(f"$ {shlex.join(argv)}", flush=True)
    lines: list[str] = []
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            print(line, end="", flush=True)
    if process.returncode != 0:
        raise DeployError(f"`{shlex.join(argv[:4])} ...` failed with exit code {process.returncode}")
    return "".join(lines)


def changed_blueprint(path: Path, outdir: Path) -> Path:
    """The blueprint with one more tag (same name): an update that touches every taggable resource."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data.setdefault("name", load(path).name)
    data["tags"] = {**(data.get("tags") or {}), "mlstack:local-deploy": "update"}
    changed = outdir / f"{data['name']}.updated.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    return changed


def not_modelled(assembly: Path) -> dict[str, Counter[str]]:
    """Stack name -> resource types the local server only holds as placeholders (with counts)."""
    from mlstack.local_moto import modelled

    manifest = json.loads((assembly / "manifest.json").read_text())
    found: dict[str, Counter[str]] = {}
    for artifact in manifest.get("artifacts", {}).values():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        props = artifact["properties"]
        resources = json.loads((assembly / props["templateFile"]).read_text()).get("Resources", {}).values()
        types = Counter(str(r["Type"]) for r in resources if r["Type"] != "AWS::CDK::Metadata")
        found[props.get("stackName", "")] = Counter({t: n for t, n in types.items() if not modelled(t)})
    return found


def report(port: int, region: str, prefix: str, assembly: Path) -> str:
    """Status, outputs and resource counts of the deployed stacks, and what moto did not model."""
    import boto3

    cfn = boto3.client(
        "cloudformation",
        region_name=region,
        endpoint_url=f"http://localhost:{port}",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    placeholders = not_modelled(assembly)
    lines: list[str] = []
    stacks = sorted(
        (s for s in cfn.describe_stacks()["Stacks"] if s["StackName"].startswith(prefix)), key=lambda s: s["StackName"]
    )
    for stack in stacks:
        name = stack["StackName"]
        resources = cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]
        lines.append(f"{name}: {stack['StackStatus']}, {len(resources)} resources")
        for output in sorted(stack.get("Outputs", []), key=lambda o: o["OutputKey"]):
            lines.append(f"  output {output['OutputKey']} = {output['OutputValue']}")
        skipped = placeholders.get(name, Counter())
        if skipped:
            listed = ", ".join(f"{t} x{n}" if n > 1 else t for t, n in sorted(skipped.items()))
            lines.append(f"  not modelled by moto (placeholders, nothing behind them): {listed}")
    return "\n".join(lines)


def local_deploy(
    blueprint: str,
    *,
    port: int | None = None,
    workdir: Path,
    create_only: bool = False,
    cdk: Sequence[str] = CDK,
    runner: Runner = run,
) -> dict[str, str]:
    """Bootstrap and deploy `blueprint` on a local moto server; step name -> CLI output (plus `report-*`)."""
    path = resolve(blueprint)
    config = load(path)
    region, account = config.env.region, config.env.account or MOTO_ACCOUNT
    port = port or free_port()
    env = cli_env(port, region)
    outputs: dict[str, str] = {}
    steps: list[tuple[str, Path]] = [("create", path)]
    if not create_only:
        updated = changed_blueprint(path, workdir)
        steps += [("update", updated), ("no-change", updated)]
    with moto_server(port, workdir / "moto.log", account=account):
        outputs["bootstrap"] = runner(
            [*cdk, "bootstrap", f"aws://{account}/{region}", "-o", str(workdir / "bootstrap.out")], env
        )
        for step, file in steps:
            assembly = workdir / f"{step}.out"
            print(f"== {step}: {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}", flush=True)
            deploy = [*cdk, "deploy", "--all", "-c", f"blueprint={file}", "-c", "nag=false", "-o", str(assembly)]
            deploy += ["-c", f"{IMAGE_CONTEXT_KEY}={LOCAL_TRAINING_IMAGE}"]  # no Docker engine: build nothing
            deploy += [f for f in DEPLOY_FLAGS if step != "no-change" or f != NO_PREVIOUS]
            outputs[step] = runner(deploy, env)
            outputs[f"report-{step}"] = report(port, region, f"{config.name}-", assembly)
            print(outputs[f"report-{step}"], flush=True)
    return outputs


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally` that stops the server


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlstack.local_deploy", description=__doc__.splitlines()[0])
    parser.add_argument("blueprint", nargs="?", default=DEFAULT_BLUEPRINT)
    parser.add_argument("--port", type=int, default=None, help="moto server port (default: a free one)")
    parser.add_argument("--create-only", action="store_true", help="skip the update and no-change deploys")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mlstack-local-") as tmp:
        try:
            local_deploy(args.blueprint, port=args.port, workdir=Path(tmp), create_only=args.create_only)
        except (DeployError, MlstackError) as err:
            log = Path(tmp) / "moto.log"
            if isinstance(err, DeployError) and log.exists():
                print("-- last lines of the moto server log --", *log.read_text().splitlines()[-30:], sep="\n")
            problems = err.problems if isinstance(err, MlstackError) else [str(err)]
            for line in problems:
                print(f"error: {line}", file=sys.stderr)
            return 1
    print(f"local deploy of {args.blueprint} done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
