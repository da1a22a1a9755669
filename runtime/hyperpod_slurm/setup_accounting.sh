#!/bin/bash
# Controller only: Slurm job accounting in a local MariaDB through slurmdbd (sacct, fair-share, job history).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SLURM_ETC=/opt/slurm/etc
PASSWORD_FILE=/root/.slurmdbd-password

DEBIAN_FRONTEND=noninteractive apt-get -y -o DPkg::Lock::Timeout=300 install mariadb-server
systemctl enable --now mariadb

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
systemctl enable --now slurmdbd
echo "[mlstack] slurmdbd accounting configured"
