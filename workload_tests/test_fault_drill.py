"""Fault drill: one rank SIGKILLed mid-run, torchrun restarts the workers, the job resumes from the newest
checkpoint and ends with the loss of a run that was never interrupted.

Two CPU processes over gloo under runtime/workloads/elastic.py (torchrun with the exit code policy of the
rendered jobs), the same train.py arguments as on a cluster: --checkpoint-dir, --checkpoint-every,
--keep-checkpoints, --resume.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runtime.workloads import elastic, launch, train

ELASTIC = Path(elastic.__file__).resolve()
SLOW_SAVE = Path(__file__).resolve().parent / "slow_save_train.py"
ARGS = ["--steps", "24", "--batch-size", "4", "--seq-len", "32", "--checkpoint-every", "4", "--keep-checkpoints", "2"]


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _worker(parent: int, rank: int) -> int | None:
    """PID of the worker of global rank `rank` that `parent` (the torchrun agent) started, from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0") if ppid == parent else []
        except (OSError, IndexError, ValueError):
            continue
        if f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def _elastic(
    metrics: Path, *args: str, max_restarts: int, script: Path = launch.TRAIN, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", **(env or {})}
    env.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)  # torchrun's own default (30 s) unless a test sets the window
    cmd = [
        sys.executable, str(ELASTIC), "--standalone", "--nproc-per-node=2", f"--max-restarts={max_restarts}",
        str(script), "--metrics-file", str(metrics), *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str]:
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        raise AssertionError(f"timed out:\n{stderr[-3000:]}") from None
    return proc.returncode, stderr


def test_a_rank_killed_after_a_checkpoint_resumes_from_it_and_ends_with_the_uninterrupted_loss(tmp_path: Path) -> None:
    straight = launch.torchrun(tmp_path / "straight.jsonl", *ARGS, "--checkpoint-dir", str(tmp_path / "a"), timeout=240)

    metrics, ckpt = tmp_path / "drill.jsonl", tmp_path / "b"
    proc = _elastic(metrics, *ARGS, "--checkpoint-dir", str(ckpt), "--resume", max_restarts=1)
    deadline = time.monotonic() + 180
    while not (ckpt / "step-8" / "done").exists():  # the second checkpoint is complete: kill rank 1 now
        assert proc.poll() is None and time.monotonic() < deadline, _finish(proc)[1][-3000:]
        time.sleep(0.002)
    victim = _worker(proc.pid, rank=1)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    killed_after = _records(metrics)[-1]["step"]
    rc, stderr = _finish(proc)
    assert rc == 0, stderr[-3000:]

    records = _records(metrics)
    steps = [r["step"] for r in records]
    # torchrun saw the worker group fail and restarted it. The failure it names first is rank 1 (SIGKILL, -9) or
    # rank 0 (1: its collective lost the peer; its SIGTERM handler only sets a flag, so it no longer dies of the
    # SIGTERM torchrun sends the survivors, and its exit may carry the same second's timestamp).
    assert re.search(r"failed \(exitcode: (-9|1)\) local_rank: [01] ", stderr), stderr[-3000:]
    resumed = re.findall(r"resumed from checkpoint step (\d+)", stderr)
    assert len(resumed) == 1, stderr[-3000:]
    resumed_from = int(resumed[0])
    restart = len(steps) - steps[::-1].index(resumed_from + 1) - 1  # the restarted workers' first record
    print(f"\n[drill] killed rank 1 after step {killed_after}; resumed from checkpoint step {resumed_from}; "
          f"final loss {records[-1]['loss']!r} (uninterrupted {straight[-1]['loss']!r})")  # fmt: skip
    assert resumed_from % 4 == 0 and 8 <= resumed_from <= killed_after < 24
    assert steps[:restart] == list(range(1, steps[restart - 1] + 1)) and steps[restart - 1] >= resumed_from
    assert steps[restart:] == list(range(resumed_from + 1, 25))
    # Bit-identical: every resumed step, the last included, has the uninterrupted run's loss.
    assert [r["loss"] for r in records[restart:]] == [r["loss"] for r in straight[resumed_from:]]
    assert records[-1]["loss"] == straight[-1]["loss"]
    # Bounded retention: the newest two checkpoints, no temporary directory left by the killed save (if any).
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-20", "step-24"]


def test_sigterm_to_the_launcher_saves_the_current_step_on_every_rank_and_exits_for_a_restart(tmp_path: Path) -> None:
    # A drained node: the pod's SIGTERM goes to PID 1, the launcher; torchrun passes it on to its workers and waits
    # for them. No periodic checkpoint (--checkpoint-every 0): all that is saved is the step the signal ended.
    metrics, ckpt = tmp_path / "m.jsonl", tmp_path / "c"
    args = ["--steps", "100000", "--batch-size", "2", "--seq-len", "16", "--checkpoint-dir", str(ckpt), "--resume"]
    proc = _elastic(metrics, *args, max_restarts=0)
    deadline = time.monotonic() + 60
    while len(_records(metrics)) < 3:
        assert proc.poll() is None and time.monotonic() < deadline, _finish(proc)[1][-3000:]
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGTERM)
    rc, stderr = _finish(proc, timeout=60)
    assert rc == elastic.RETRY_EXIT == 1, stderr[-3000:]
    last = _records(metrics)[-1]["step"]
    assert re.search(rf"SIGTERM: checkpoint step {last} saved, exiting for a restart", stderr), stderr[-3000:]
    assert "stopped by signal" in stderr
    assert [p.name for p in train.complete_checkpoints(ckpt)] == [f"step-{last}"]
    assert {p.name for p in (ckpt / f"step-{last}").glob("extra-rank*.pt")} == {"extra-rank0.pt", "extra-rank1.pt"}
    # The restart resumes from that step.
    resumed = tmp_path / "r.jsonl"
    rc, stderr = _finish(_elastic(resumed, *[a if a != "100000" else str(last + 2) for a in args], max_restarts=0))
    assert rc == 0, stderr[-3000:]
    assert f"resumed from checkpoint step {last}" in stderr
    assert [r["step"] for r in _records(resumed)] == [last + 1, last + 2]


def test_sigterm_gives_the_workers_the_whole_stop_window_even_where_torchrun_would_kill_them_after_30s(
    tmp_path: Path,
) -> None:
    # The image's torch 2.7.1 SIGKILLs the workers 30 s after passing the SIGTERM on, whatever
    # TORCH_ELASTIC_SHUTDOWN_TIMEOUT says (it has no such setting). Here torchrun keeps its 30 s default
    # (TORCH_ELASTIC_SHUTDOWN_TIMEOUT unset) and the step the signal stops needs 40 s more to save: the launcher's
    # own window (60 s) must hold the SIGKILL off until both ranks have saved it.
    metrics, ckpt = tmp_path / "m.jsonl", tmp_path / "c"
    args = ["--steps", "100000", "--batch-size", "2", "--seq-len", "16", "--checkpoint-dir", str(ckpt), "--resume"]
    env = {"SLOW_SAVE_S": "40", elastic.GRACE_ENV: "60"}
    proc = _elastic(metrics, *args, max_restarts=0, script=SLOW_SAVE, env=env)
    deadline = time.monotonic() + 60
    while len(_records(metrics)) < 3:
        assert proc.poll() is None and time.monotonic() < deadline, _finish(proc)[1][-3000:]
        time.sleep(0.01)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    rc, stderr = _finish(proc, timeout=120)
    took = time.monotonic() - sent
    print(f"\n[drill] SIGTERM to exit: {took:.1f}s (save delayed 40s, torchrun's own timeout 30s)")
    assert rc == elastic.RETRY_EXIT, stderr[-3000:]
    assert 40 <= took < 60, stderr[-3000:]
    last = _records(metrics)[-1]["step"]
    assert re.search(rf"SIGTERM: checkpoint step {last} saved, exiting for a restart", stderr), stderr[-3000:]
    assert "waiting up to 60s for workers" in stderr and "still running after" not in stderr
    assert [p.name for p in train.complete_checkpoints(ckpt)] == [f"step-{last}"]


def test_workers_still_running_when_the_window_ends_are_killed(tmp_path: Path) -> None:
    # A save longer than the window: SIGKILL at its end, no complete checkpoint, the launcher still exits 1.
    metrics, ckpt = tmp_path / "m.jsonl", tmp_path / "c"
    args = ["--steps", "100000", "--batch-size", "2", "--seq-len", "16", "--checkpoint-dir", str(ckpt), "--resume"]
    proc = _elastic(
        metrics, *args, max_restarts=0, script=SLOW_SAVE, env={"SLOW_SAVE_S": "600", elastic.GRACE_ENV: "3"}
    )
    deadline = time.monotonic() + 60
    while len(_records(metrics)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, _finish(proc)[1][-3000:]
        time.sleep(0.01)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    rc, stderr = _finish(proc, timeout=60)
    assert rc == elastic.RETRY_EXIT and time.monotonic() - sent < 20, stderr[-3000:]
    assert re.search(r"workers \[\d+, \d+\] still running after 3s: killed", stderr), stderr[-3000:]
    assert train.complete_checkpoints(ckpt) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_sigterm_during_the_rendezvous_ends_the_launcher_as_a_containers_first_process(tmp_path: Path) -> None:
    # The container's PID 1 (a new PID namespace, as Docker and the kubelet make): the kernel drops a SIGTERM
    # sent from outside unless the process handles it. Node 0 of 2 waits in the rendezvous for a node that never
    # comes (timeout 120 s); torchrun has installed no handler yet. The launcher must exit for a restart at once.
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], check=False).returncode:
        pytest.skip("no PID namespaces here (unshare --pid --fork --mount-proc)")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        unshare, "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, str(ELASTIC), "--nnodes=2",
        "--node_rank=0", "--nproc-per-node=1", "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
        "--rdzv_conf=timeout=120", str(launch.TRAIN), "--metrics-file", str(tmp_path / "m.jsonl"), *ARGS,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not (init := _children(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(8)  # torchrun parsed its arguments and waits for node 1
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    sent = time.monotonic()
    os.kill(init[0], signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(init[0], signal.SIGKILL)  # the one signal a namespace's init cannot drop
        _, stderr = proc.communicate(timeout=30)
    rc, took = proc.returncode, time.monotonic() - sent
    assert rc == elastic.RETRY_EXIT and took < 10, f"rc={rc} after {took:.1f}s: {stderr[-3000:]}"
    assert "SIGTERM before the workers started: exiting for a restart" in stderr


def test_the_stop_window_comes_from_the_launcher_setting_then_torchruns() -> None:
    assert elastic.grace_seconds({}) == 30
    assert elastic.grace_seconds({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "270"}) == 270
    assert elastic.grace_seconds({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "270", elastic.GRACE_ENV: "90"}) == 90
    with pytest.raises(SystemExit, match="MLSTACK_STOP_GRACE_S=-1"):
        elastic.grace_seconds({elastic.GRACE_ENV: "-1"})
    # The torch handler the launcher wraps exists under that name in this torch, as in the image's 2.7.1.
    from torch.distributed.elastic.multiprocessing import api

    assert callable(api._terminate_process_handler)


def test_an_application_error_exits_with_the_code_the_job_policies_fail_on(tmp_path: Path) -> None:
    # --shard-group-size 3 does not divide the world size 2: the script's own check fails after the process group
    # is up, on both ranks. torchrun alone would exit 1, the code of a lost peer.
    bad = ["--steps", "2", "--strategy", "fsdp", "--sharding", "hybrid", "--shard-group-size", "3"]
    rc, stderr = _finish(_elastic(tmp_path / "m.jsonl", *bad, max_restarts=0))
    assert rc == elastic.APP_ERROR_EXIT == train.APP_ERROR_EXIT == 42, stderr[-3000:]
    assert "does not divide the world size" in stderr


def _complete(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "done").touch()
    return path


def test_only_complete_checkpoints_count_and_retention_keeps_the_newest(tmp_path: Path) -> None:
    for step in (4, 8, 12):
        _complete(tmp_path / f"step-{step}")
    (tmp_path / "step-16.tmp").mkdir()  # killed while writing step 16
    (tmp_path / "step-6.tmp").mkdir()  # an older leftover
    (tmp_path / "step-20").mkdir()  # no done marker (an incomplete directory of an older release)
    assert [p.name for p in train.complete_checkpoints(tmp_path)] == ["step-4", "step-8", "step-12"]
    deleted = train.prune(tmp_path, keep=2)
    assert sorted(p.name for p in deleted) == ["step-4", "step-6.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-12", "step-16.tmp", "step-20", "step-8"]
    assert train.prune(tmp_path, keep=0) == []  # 0: keep all


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"), 1),
        (ValueError("bad data"), 42),
        (SystemExit("--shard-group-size 3 does not divide the world size 2"), 42),
        (SystemExit(2), 42),  # argparse
        (SystemExit(0), 0),
    ],
)
def test_failures_are_classified_by_what_failed(error: BaseException, code: int) -> None:
    import torch.distributed as dist

    assert train.failure_exit_code(error) == code
    assert train.failure_exit_code(dist.DistNetworkError("store")) == 1
    assert elastic.exit_code([-9, 1]) == 1 and elastic.exit_code([1, 42]) == 42
