"""Where a sweep's points run: a local pool, or Ray tasks on a cluster. Same results either way.

Both engines run `runner.run_point` on each spec and hand every result to `on_result` in the
calling thread as soon as it is there, in completion order; the caller makes the order irrelevant.
An interruption (Ctrl-C) stops the running workloads and propagates; results not yet handed over
are lost, which is what resuming re-runs.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from spyre_arch.runner import PointSpec, run_point

OnResult = Callable[[PointSpec, dict[str, Any]], None]


class EngineError(RuntimeError):
    """The engine itself cannot run (Ray missing or unreachable); the message says what to do."""


def failed_result(error: str) -> dict[str, Any]:
    """The result of a point whose run broke outside the workload (a lost Ray worker, a bug)."""
    return {"status": "failed", "exit_status": None, "error": error, "host_seconds": float("nan")}


def run_local(specs: Sequence[PointSpec], jobs: int, on_result: OnResult) -> None:
    """Runs the points on this machine, `jobs` workload processes at a time.

    Each workload is its own process; the pool's threads only start and wait for them, so a
    thread pool is enough and lets Ctrl-C stop every running workload at once.

    Args:
        specs: the points to run.
        jobs: how many run at once (at least 1).
        on_result: called with each finished point's spec and result.
    Raises:
        KeyboardInterrupt: after stopping the running workloads.
    """
    stopper = _Stopper()
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="spyre-sweep") as pool:
        futures = {pool.submit(run_point, spec, stopper.started): spec for spec in specs}
        try:
            for future in as_completed(futures):
                try:
                    result = future.result()
                except Exception as e:  # a bug in run_point: this point fails, the sweep goes on
                    result = failed_result(f"internal error: {type(e).__name__}: {e}")
                on_result(futures[future], result)
        except BaseException:
            stopper.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def run_ray(specs: Sequence[PointSpec], address: str, on_result: OnResult, cpus_per_point: float = 1) -> None:
    """Runs the points as Ray tasks on the cluster at `address` (ray.init(address=...)).

    The workers need spyre_arch importable and the workload command runnable in the driver's
    working directory; with several nodes that means a shared file system (see the architect guide).

    Args:
        specs: the points to run.
        address: the cluster, e.g. "127.0.0.1:6379" or "auto".
        on_result: called with each finished point's spec and result.
        cpus_per_point: CPUs Ray reserves per point.
    Raises:
        EngineError: Ray is not installed or the cluster cannot be reached.
        KeyboardInterrupt: after cancelling the tasks still queued or running.
    """
    try:
        import ray
    except ImportError as e:
        raise EngineError("sweep: --ray needs the 'ray' package (.venv/bin/pip install ray)") from e
    _check_reachable(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except Exception as e:  # Ray raises ConnectionError, ValueError, ... for a bad address
        raise EngineError(f"sweep: cannot connect to the Ray cluster at '{address}' ({e}); is it started?") from e
    try:
        task = ray.remote(num_cpus=cpus_per_point)(run_point)
        pending = {task.remote(spec): spec for spec in specs}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    spec = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as e:  # the worker died, or run_point broke
                        result = failed_result(f"ray: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
                    on_result(spec, result)
        except BaseException:
            for ref in pending:  # raises KeyboardInterrupt in the task, which kills its workload
                ray.cancel(ref)
            raise
    finally:
        ray.shutdown()


def _check_reachable(address: str, timeout: float = 10) -> None:
    """Fails fast when nothing listens at a HOST:PORT address (ray.init would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto", "ray://...": Ray's own lookup
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise EngineError(
            f"sweep: nothing answers at the Ray address '{address}' ({e}); is the cluster started?"
        ) from e


class _Stopper:
    """The running workloads of the local pool, to kill them all on an interruption."""

    def __init__(self) -> None:
        self.lock_ = threading.Lock()
        self.procs_: set[subprocess.Popen] = set()
        self.stopped_ = False

    def started(self, proc: subprocess.Popen) -> None:
        """Records a started workload; refuses it (run_point then kills it) once stopping."""
        with self.lock_:
            if self.stopped_:
                raise KeyboardInterrupt
            self.procs_.add(proc)

    def stop(self) -> None:
        """Kills every recorded workload and refuses new ones."""
        with self.lock_:
            self.stopped_ = True
            for proc in self.procs_:
                if proc.poll() is None:
                    proc.kill()
