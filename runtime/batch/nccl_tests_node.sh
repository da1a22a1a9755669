# One node of the nccl-tests multi-node job on AWS Batch (the container command of the job definition that
# `mlstack acceptance` registers). Batch starts the main node first, then the others; each has its own interface
# (awsvpc) and the job's /fsx. The main node makes an SSH key for this job only and shares it, and the node list,
# through /fsx; every other node trusts that key, starts sshd and registers its address; the main node then runs
# mpirun over all of them and removes the key when it exits. When the main node exits, Batch stops the others.
# Set by the job definition: GPUS_PER_NODE, ALL_REDUCE_ARGS; by Batch: AWS_BATCH_JOB_ID, AWS_BATCH_JOB_NODE_INDEX,
# AWS_BATCH_JOB_MAIN_NODE_INDEX, AWS_BATCH_JOB_NUM_NODES.
set -euo pipefail
: "${GPUS_PER_NODE:?}" "${ALL_REDUCE_ARGS:?}" "${AWS_BATCH_JOB_ID:?}" "${AWS_BATCH_JOB_NODE_INDEX:?}"
: "${AWS_BATCH_JOB_MAIN_NODE_INDEX:?}" "${AWS_BATCH_JOB_NUM_NODES:?}"
exchange=${EXCHANGE_DIR:-/fsx/.mlstack-nccl-tests}/${AWS_BATCH_JOB_ID%%#*}
mpirun=${MPIRUN:-/opt/amazon/openmpi/bin/mpirun}
all_reduce=${ALL_REDUCE_PERF:-/opt/nccl-tests/build/all_reduce_perf}
ssh_port=2222
# ecs-eth0: the ECS agent's link-local interface in every awsvpc container (the same 169.254.172.0/22 on each
# node), which no other node can reach; Open MPI must not pick it.
not_between_nodes=lo,docker0,ecs-eth0
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker,ecs}
wait_seconds=${WAIT_SECONDS:-900}
# The container's own interface address; not ecs-eth0's link-local one.
address=$(hostname -I | tr ' ' '\n' | grep -v -e '^169\.254\.' -e '^127\.' -e '^$' | sed -n 1p)
mkdir -p "$exchange/hosts"

wait_for() {
  # wait_for DESCRIPTION TEST...: poll until TEST succeeds or wait_seconds pass.
  local what=$1 deadline=$((SECONDS + wait_seconds))
  shift
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "mlstack: timed out waiting for $what" >&2
      return 1
    fi
    sleep 2
  done
}

# shellcheck disable=SC2329  # called through wait_for
all_registered() {
  local hosts=("$exchange"/hosts/*)
  [ -e "${hosts[0]}" ] && [ "${#hosts[@]}" -ge "$AWS_BATCH_JOB_NUM_NODES" ]
}

if [ "$AWS_BATCH_JOB_NODE_INDEX" != "$AWS_BATCH_JOB_MAIN_NODE_INDEX" ]; then
  wait_for "the main node's key" test -e "$exchange/key.ready"
  mkdir -p /root/.ssh /run/sshd
  chmod 700 /root/.ssh
  cat "$exchange/key.pub" >>/root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
  ssh-keygen -A
  /usr/sbin/sshd -p "$ssh_port"
  echo "$address" >"$exchange/hosts/$AWS_BATCH_JOB_NODE_INDEX"
  exec sleep infinity
fi

# The key must not outlive the job on /fsx, also when a wait times out (set -e) or mpirun is killed.
trap 'rm -rf "$exchange"' EXIT
(umask 077 && ssh-keygen -q -t ed25519 -N '' -f "$exchange/key")
touch "$exchange/key.ready"
echo "$address" >"$exchange/hosts/$AWS_BATCH_JOB_NODE_INDEX"
wait_for "$AWS_BATCH_JOB_NUM_NODES nodes to register" all_registered
for host in "$exchange"/hosts/*; do
  echo "$(cat "$host") slots=$GPUS_PER_NODE"
done >"$exchange/hostfile"
status=0
# shellcheck disable=SC2086  # ALL_REDUCE_ARGS is a list of words
"$mpirun" --allow-run-as-root --hostfile "$exchange/hostfile" \
  -np $((GPUS_PER_NODE * AWS_BATCH_JOB_NUM_NODES)) -npernode "$GPUS_PER_NODE" --bind-to none \
  --mca plm_rsh_args "-p $ssh_port -i $exchange/key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null" \
  --mca oob_tcp_if_exclude "$not_between_nodes" --mca btl_tcp_if_exclude "$not_between_nodes" \
  -x PATH -x LD_LIBRARY_PATH -x NCCL_DEBUG=INFO -x NCCL_SOCKET_IFNAME "$all_reduce" $ALL_REDUCE_ARGS || status=$?
exit "$status"
