#!/bin/bash
# Controller only: Slurm job accounting in a local MariaDB through slurmdbd (sacct, fair-share, job history):
# setup_accounting.sh <controller-address>. The HyperPod AMI ships MariaDB and slurmdbd; install MariaDB only where
# it is missing, after refreshing the package lists. Accounting settings go into accounting.conf, which slurm.conf
# includes (lifecycle.py accounting-conf), never into a slurm.conf of a node that has none.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SLURM_ETC="${MLSTACK_SLURM_ETC:-/opt/slurm/etc}"
SYSTEMCTL="${MLSTACK_SYSTEMCTL:-systemctl}"
PASSWORD_FILE="${MLSTACK_DBD_PASSWORD_FILE:-/root/.slurmdbd-password}"
CONTROLLER="$1"

if ! command -v mariadbd > /dev/null && ! command -v mysqld > /dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get -y -o DPkg::Lock::Timeout=300 update
  DEBIAN_FRONTEND=noninteractive apt-get -y -o DPkg::Lock::Timeout=300 install mariadb-server
fi
"$SYSTEMCTL" enable --now mariadb

if [[ ! -s "$PASSWORD_FILE" ]]; then
  (umask 077 && openssl rand -hex 24 > "$PASSWORD_FILE")
fi
PASSWORD="$(cat "$PASSWORD_FILE")"
mysql --user=root <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '${PASSWORD}';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '${PASSWORD}';
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL

(umask 077 && python3 "$HERE/lifecycle.py" slurmdbd-conf --password-file "$PASSWORD_FILE" > "$SLURM_ETC/slurmdbd.conf")
chown slurm:slurm "$SLURM_ETC/slurmdbd.conf"
"$SYSTEMCTL" enable --now slurmdbd
python3 "$HERE/lifecycle.py" accounting-conf --controller "$CONTROLLER"
echo "[mlstack] slurmdbd accounting configured (${SLURM_ETC}/accounting.conf)"
