#!/bin/bash
# Mount FSx for Lustre at $3 now and at every boot: mount_fsx.sh <dns-name> <mount-name> <path>.
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 <dns-name> <mount-name> <path>" >&2
  exit 2
fi
DNS="$1"
MOUNT_NAME="$2"
MOUNT_PATH="$3"
OPTIONS="defaults,_netdev,flock,x-systemd.automount,x-systemd.requires=network-online.target"

mkdir -p "$MOUNT_PATH"
if ! grep -q " ${MOUNT_PATH} lustre " /etc/fstab; then
  echo "${DNS}@tcp:/${MOUNT_NAME} ${MOUNT_PATH} lustre ${OPTIONS} 0 0" >> /etc/fstab
fi
systemctl daemon-reload
for attempt in 1 2 3 4 5; do
  if mountpoint -q "$MOUNT_PATH" || mount "$MOUNT_PATH"; then
    chmod 1777 "$MOUNT_PATH"
    echo "[mlstack] FSx ${DNS}@tcp:/${MOUNT_NAME} mounted at ${MOUNT_PATH}"
    exit 0
  fi
  echo "[mlstack] mount attempt ${attempt} failed; retrying"
  sleep $((attempt * 10))
done
echo "[mlstack] could not mount FSx at ${MOUNT_PATH}" >&2
exit 1
