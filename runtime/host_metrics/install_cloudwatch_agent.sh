#!/bin/bash
# The CloudWatch agent on a GPU host of AWS Batch (Amazon Linux 2023 ECS GPU AMI) or SageMaker HyperPod Slurm
# (Ubuntu DLAMI): per-GPU nvidia-smi metrics, EFA counters, and the kernel log (NVIDIA Xid lines) to CloudWatch.
# Usage: install_cloudwatch_agent.sh CONFIG_JSON (the agent configuration the stack rendered; its agent.region
# names the region). A host where `nvidia-smi -L` lists no GPU and no NVIDIA display controller is on the PCI bus
# (a Slurm controller or login node) is left alone. A failure on a GPU host is reported (`report`) and exits 1;
# an agent left without our metrics by another configuration of the host is reported and exits 0.
# Test-only overrides: MLSTACK_ROOT (prefix of system paths), MLSTACK_EFA_SYSFS, MLSTACK_PCI_SYSFS, MLSTACK_IMDS,
# MLSTACK_MONITORING_ENDPOINT, MLSTACK_WAIT_STEP_S.
set -euo pipefail

CONFIG_SRC="$1"
ROOT="${MLSTACK_ROOT:-}"
EFA_SYSFS="${MLSTACK_EFA_SYSFS:-/sys/class/infiniband}"
PCI_SYSFS="${MLSTACK_PCI_SYSFS:-/sys/bus/pci/devices}"
IMDS="${MLSTACK_IMDS:-http://169.254.169.254}"
WAIT_STEP_S="${MLSTACK_WAIT_STEP_S:-5}"
AGENT_DIR="$ROOT/opt/aws/amazon-cloudwatch-agent"
CONFIG_DIR="$AGENT_DIR/etc/amazon-cloudwatch-agent.d"
CONFIG="$AGENT_DIR/etc/mlstack.json"
KERNEL_LOG_DIR="$ROOT/var/log/mlstack"
UNIT="$ROOT/etc/systemd/system/mlstack-kernel-log.service"
LOGROTATE="$ROOT/etc/logrotate.d/mlstack-kernel-log"

# The agent version every host runs: the versioned path of the regional download bucket (the user guide's
# `.../<platform>/<arch>/latest/...` links with `latest` replaced by the release's build). 1.300068.0 is the first
# with the `efa` section (aws/amazon-cloudwatch-agent #2093); a host that already runs that or newer keeps it.
AGENT_VERSION="1.300071.0b1720"
MIN_VERSION="1.300068.0"
# The agent packages' signing key ("Verifying the signature of the CloudWatch agent package",
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/verify-CloudWatch-Agent-Package-Signature.html):
# a package whose .sig is not a valid signature by this key is not installed.
KEY_FINGERPRINT="937616F3450B7D806CBD9725D58167303B789C72"

read -r ns region < <(python3 -c 'import json,sys; c = json.load(open(sys.argv[1]))
print(c["metrics"]["namespace"], c["agent"]["region"])' "$CONFIG_SRC") || true
stage=start
# A failure publishes host_agent_install_failed = 1 with dimensions InstanceId and Reason (the step), and without
# any (the alarm's series): CloudWatch's Query API PutMetricData, POSTed by python3's urllib with the role's IMDSv2
# credentials and signed here with Signature Version 4 (IAM User Guide, "Create a signed AWS API request",
# https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html): signed headers content-type, host,
# x-amz-date and x-amz-security-token whatever the host's curl (curl before 7.86, Ubuntu 22.04's 7.81, leaves the
# session token out of its --aws-sigv4 signature). Python 3.7 or later (the HyperPod EKS AL2 AMI). Best effort,
# bounded: 3 tries of 10 s. MLSTACK_MONITORING_ENDPOINT (tests) changes where it connects, not the signed host.
report() {
  if python3 - "$IMDS" "${ns:-}" "$1" "${region:-}" <<'PY'; then
import datetime, hashlib, hmac, json, os, sys, time, urllib.error as ue, urllib.parse as up, urllib.request as ur
imds, ns, reason, region = sys.argv[1:]
def get(path, method="GET", **head):
    h = {k.replace("_", "-"): v for k, v in head.items()}
    return ur.urlopen(ur.Request(imds + "/latest/" + path, method=method, headers=h), timeout=5).read().decode()
t = get("api/token", "PUT", X_aws_ec2_metadata_token_ttl_seconds="300")
md = lambda path: get("meta-data/" + path, X_aws_ec2_metadata_token=t)
region, instance = region or md("placement/region"), md("instance-id")
c = json.loads(md("iam/security-credentials/" + md("iam/security-credentials/").split()[0]))
form = [("Action", "PutMetricData"), ("Version", "2010-08-01"), ("Namespace", ns)]
for n, dims in ((1, (("InstanceId", instance), ("Reason", reason))), (2, ())):
    m = "MetricData.member.%d." % n
    form += [(m + "MetricName", "host_agent_install_failed"), (m + "Value", "1"), (m + "Unit", "Count")]
    for d, (k, v) in enumerate(dims, 1):
        form += [(m + "Dimensions.member.%d.Name" % d, k), (m + "Dimensions.member.%d.Value" % d, v)]
body = up.urlencode(form).encode()
host = "monitoring." + region + ".amazonaws.com" + ".cn" * region.startswith("cn-")
now = datetime.datetime.now(datetime.timezone.utc)
stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
head = {"content-type": "application/x-www-form-urlencoded; charset=utf-8", "host": host, "x-amz-date": stamp,
        "x-amz-security-token": c["Token"]}
signed = ";".join(sorted(head))
canonical = ["POST", "/", ""] + [k + ":" + head[k] for k in sorted(head)] + ["", signed, hashlib.sha256(body).hexdigest()]
scope = day + "/" + region + "/monitoring/aws4_request"
key = ("AWS4" + c["SecretAccessKey"]).encode()
for part in scope.split("/"):
    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
text = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256("\n".join(canonical).encode()).hexdigest()])
head["authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (
    c["AccessKeyId"], scope, signed, hmac.new(key, text.encode(), hashlib.sha256).hexdigest())
url = os.environ.get("MLSTACK_MONITORING_ENDPOINT") or "https://" + host
for attempt in range(3):
    try:
        ur.urlopen(ur.Request(url + "/", data=body, headers=head, method="POST"), timeout=10).read()
        break
    except ue.HTTPError as e:
        if attempt == 2 or e.code < 500 and e.code != 429:
            sys.exit("PutMetricData: HTTP %d %s" % (e.code, e.read()[:300].decode("utf-8", "replace")))
    except OSError as e:
        if attempt == 2:
            sys.exit("PutMetricData: %s" % e)
    time.sleep(2)
PY
    echo "[mlstack] reported host_agent_install_failed (Reason=$1) to ${ns:-}"
  else
    echo "[mlstack] could not report it"
  fi
}
on_exit() {
  local rc=$?
  [[ $rc -eq 0 ]] || { echo "[mlstack] CloudWatch agent not installed or not running: step $stage failed"; report "$stage"; }
  exit "$rc"
}
trap on_exit EXIT

# A host with an NVIDIA display controller (PCI vendor 0x10de, class 0x03xxxx) is a GPU host: its driver gets a
# minute more to list the GPUs, then the host is reported. A host without one is left alone.
nvidia_pci() {
  for dev in "$PCI_SYSFS"/*; do
    [[ "$(cat "$dev/vendor" 2>/dev/null)" == 0x10de && "$(cat "$dev/class" 2>/dev/null)" == 0x03* ]] && return 0
  done
  return 1
}
if ! nvidia-smi -L >/dev/null 2>&1; then
  nvidia_pci || { echo "[mlstack] nvidia-smi lists no GPU on this host: no GPU metrics agent"; exit 0; }
  stage=no_gpu
  for _ in $(seq 12); do nvidia-smi -L >/dev/null 2>&1 && break; sleep "$WAIT_STEP_S"; done
  nvidia-smi -L >/dev/null 2>&1 || { echo "[mlstack] an NVIDIA GPU is on the PCI bus, nvidia-smi lists none"; exit 1; }
fi

installed="$(cat "$AGENT_DIR/bin/CWAGENT_VERSION" 2>/dev/null || true)"
if python3 - "$installed" "$MIN_VERSION" <<'PY'; then
import re, sys
def parts(v):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", v)
    return tuple(int(p) for p in m.groups()) if m else None
have, need = parts(sys.argv[1]), parts(sys.argv[2])
sys.exit(0 if have is not None and have >= need else 1)
PY
  echo "[mlstack] CloudWatch agent $installed already installed (>= $MIN_VERSION): kept"
else
  stage=architecture
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) echo "[mlstack] unsupported architecture $(uname -m)"; exit 1 ;;
  esac
  if command -v dpkg >/dev/null 2>&1; then platform=ubuntu package=amazon-cloudwatch-agent.deb
  else platform=amazon_linux package=amazon-cloudwatch-agent.rpm; fi
  # Over the VPC's S3 gateway endpoint (a regional bucket) or NAT.
  stage=download
  base="https://amazoncloudwatch-agent-${region}.s3.${region}.amazonaws.com"
  workdir="$(mktemp -d)"
  fetch() {
    curl -fsSL --connect-timeout 10 --max-time 300 --retry 5 -o "$workdir/$package" "$base/$platform/$arch/$1/$package" &&
      curl -fsSL --connect-timeout 10 --max-time 300 --retry 5 -o "$workdir/$package.sig" "$base/$platform/$arch/$1/$package.sig"
  }
  # The pinned build was read from a release manifest, not from the bucket (it cannot be listed): should the bucket
  # not serve it, the current release (`latest`, newer than MIN_VERSION) is taken, under the same signature check.
  if ! fetch "$AGENT_VERSION"; then
    echo "[mlstack] agent $AGENT_VERSION not served by $base: the latest release instead"
    AGENT_VERSION=latest
    fetch latest
  fi
  curl -fsSL --connect-timeout 10 --max-time 300 --retry 5 -o "$workdir/agent.gpg" "$base/assets/amazon-cloudwatch-agent.gpg"
  stage=signature
  export GNUPGHOME="$workdir/gnupg"
  mkdir -m 700 "$GNUPGHOME"
  gpg --batch --quiet --import "$workdir/agent.gpg"
  # VALIDSIG names the signing key's primary fingerprint last: a good signature by the pinned key only.
  if ! gpg --batch --status-fd 1 --verify "$workdir/$package.sig" "$workdir/$package" 2>/dev/null |
    grep -q "^\[GNUPG:\] VALIDSIG .* ${KEY_FINGERPRINT}\$"; then
    echo "[mlstack] $package $AGENT_VERSION: no valid signature by key $KEY_FINGERPRINT, not installed"
    { gpgconf --homedir "$GNUPGHOME" --kill gpg-agent 2>/dev/null || true; rm -rf "$workdir"; }
    exit 1
  fi
  stage=package
  if [[ "$platform" == ubuntu ]]; then dpkg -i -E "$workdir/$package"
  else rpm -U --replacepkgs "$workdir/$package"; fi
  { gpgconf --homedir "$GNUPGHOME" --kill gpg-agent 2>/dev/null || true; rm -rf "$workdir"; }
fi

# Configurations already in the agent's directory (HyperPod's own, say) stay: ours is appended (the ctl's
# `fetch-config` mode deletes every other file there). The agent merges the files and refuses two values for one
# key (translator/jsonconfig/mergeJsonUtil), and a host has one metrics namespace (metrics.namespace is top-level
# only in the agent's schema): when another file already sets metrics keys of ours differently, our metrics
# section is left out (the kernel log and its Xid alarm still work) and the log says which file.
stage=configuration
mkdir -p "$AGENT_DIR/etc"
efa=0
if compgen -G "$EFA_SYSFS/*" >/dev/null; then efa=1; fi
mode=fetch-config
for other in "$CONFIG_DIR"/*; do
  if [[ -e "$other" && "${other##*/}" != file_mlstack.json* ]]; then mode=append-config; fi
done
# Exit 3: written, without our metrics (a clash), reported once the agent runs.
clash=0
python3 - "$CONFIG_SRC" "$CONFIG" "$efa" "$CONFIG_DIR" <<'PY' || { rc=$?; [[ $rc -eq 3 ]] || exit "$rc"; clash=1; }
import json, pathlib, sys
config = json.load(open(sys.argv[1]))
if sys.argv[3] != "1":
    config["metrics"]["metrics_collected"].pop("efa", None)
for other in sorted(pathlib.Path(sys.argv[4]).glob("*")):
    if other.name.startswith("file_mlstack.json"):
        continue
    try:
        theirs = json.loads(other.read_text())
    except (OSError, ValueError):
        continue  # not a JSON file: the agent's merge reads JSON files only
    if not isinstance(theirs, dict):
        continue
    their_agent = theirs.get("agent") if isinstance(theirs.get("agent"), dict) else {}
    for key, value in list(config.get("agent", {}).items()):
        if key in their_agent and their_agent[key] != value:
            config["agent"].pop(key)  # theirs wins: the merged agent section takes one value
    ours, their_metrics = config.get("metrics"), theirs.get("metrics")
    if ours is not None and isinstance(their_metrics, dict):
        clash = [k for k in ours if k != "metrics_collected" and k in their_metrics and their_metrics[k] != ours[k]]
        clash += [
            f"metrics_collected.{k}"
            for k, v in ours["metrics_collected"].items()
            if k in their_metrics.get("metrics_collected", {}) and their_metrics["metrics_collected"][k] != v
        ]
        if clash:
            print(f"[mlstack] {other} sets {', '.join(clash)} differently: no GPU/EFA metrics from this host")
            config.pop("metrics")
json.dump(config, open(sys.argv[2], "w"), indent=1)
sys.exit(3 if "metrics" not in config else 0)
PY

# Amazon Linux 2023 keeps the kernel log in the journal only (no rsyslog), and the agent reads files: a unit
# appends the kernel's journal entries to a file, from the start of the boot, resuming after the last entry it
# wrote when it restarts (journalctl --cursor-file, systemd 242 and later). journalctl writes the cursor when it
# exits, so after a crash (not a stop) it re-sends the lines since its last start.
stage=kernel_log
mkdir -p "$KERNEL_LOG_DIR" "$ROOT/var/lib/mlstack" "$(dirname "$UNIT")" "$(dirname "$LOGROTATE")"
cat >"$UNIT" <<'UNIT'
[Unit]
Description=mlstack: kernel messages (NVIDIA Xid lines) to a file the CloudWatch agent uploads
After=systemd-journald.service

[Service]
ExecStart=/usr/bin/journalctl --dmesg --boot --follow --no-tail --output=short-iso --cursor-file=/var/lib/mlstack/kernel-log.cursor
StandardOutput=append:/var/log/mlstack/kernel.log
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
UNIT
# The unit holds the file open (append): copytruncate keeps its descriptor valid, and the agent starts a
# truncated file again from its beginning.
cat >"$LOGROTATE" <<'ROTATE'
/var/log/mlstack/kernel.log {
    weekly
    maxsize 100M
    rotate 4
    compress
    missingok
    notifempty
    copytruncate
}
ROTATE
systemctl daemon-reload
systemctl enable --now mlstack-kernel-log.service

stage=agent_start
"$AGENT_DIR/bin/amazon-cloudwatch-agent-ctl" -a "$mode" -m ec2 -s -c "file:$CONFIG"
# An agent that exits at once (a configuration it rejects at run time) shows in the ctl's status JSON.
for _ in $(seq 6); do
  status="$("$AGENT_DIR/bin/amazon-cloudwatch-agent-ctl" -a status 2>&1)" || true
  [[ "$status" == *'"status": "running"'* ]] && break
  sleep "$WAIT_STEP_S"
done
echo "[mlstack] CloudWatch agent ($mode, EFA counters: $efa): $status"
[[ "$status" == *'"status": "running"'* ]] || exit 1
# The agent runs without our metrics: the alarm says so (Reason configuration_clash); the install itself succeeded.
if [[ $clash -eq 1 ]]; then report configuration_clash; fi
