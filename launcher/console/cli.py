"""``miles-launch``: plan, start every pool on every host, wait ready, run the job, tear down.

    miles-launch [run] hosts.toml [--dry-run] [--submit] [--no-logs] [--no-curve] [--no-gpu-check] [-v]
    miles-launch status hosts.toml [--json]
    miles-launch logs hosts.toml POOL[-CELL[-WORKER]] [-n LINES] [-f]
    miles-launch down hosts.toml

Exit codes: the job's code, 1 on launcher errors, 2 on bad configuration, 124 past ``[job] timeout_s``, 130 when
interrupted; ``status`` exits 0 while the launch runs, 3 when it does not. README "The two commands" has the rest.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from launcher.config.hosts_config import LOOPBACK_BIND, ClusterConfig, check_open_binds, load_config, open_bind_hosts
from launcher.config.launch_checks import check_launch
from launcher.config.placement import PlacementPlan
from launcher.config.slurm_config import SlurmCluster
from launcher.console import slurm_launch
from launcher.console.launch_control import launch_down, launch_status, status_table
from launcher.console.launch_log import library_logs_to_file
from launcher.console.launch_logs import print_logs
from launcher.console.progress import ProgressPrinter
from launcher.console.text_columns import aligned
from launcher.errors import ConfigError, LauncherError, PlacementError
from launcher.launch.job import JobContext, resolve_entrypoint, run_job
from launcher.launch.job_watch import TIMEOUT_EXIT_CODE, JobTimedOut, JobWatch
from launcher.launch.launch_phase import STARTING, TEARING_DOWN
from launcher.launch.launch_state import process_alive, read_state, state_path_for
from launcher.launch.worker_command import bind_address
from launcher.launch.worker_provider import WorkerProvider
from transport.security import CURVE_DIR_ENV

log = logging.getLogger(__name__)
_COMMANDS = ("run", "status", "logs", "down")


class Terminated(BaseException):
    """SIGTERM/SIGHUP reached the launcher: tear down like Ctrl-C."""


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``miles-launch``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in _COMMANDS else "run"
    parser = argparse.ArgumentParser(
        prog=f"miles-launch {command}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", help="path to hosts.toml")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging, and every worker line on the console"
    )
    if command == "run":
        parser.add_argument("--dry-run", action="store_true", help="print the placement plan and exit")
        parser.add_argument(
            "--driver",
            metavar="SCRIPT",
            help="run SCRIPT with this Python as the job, instead of [job] (a Ray script: ray.init(address='auto') "
            "joins the launch's hosts); its directory is the job's code unless [job] working_dir says otherwise",
        )
        parser.add_argument(
            "--submit", action="store_true", help="[cluster] provider = 'slurm': sbatch the launch, follow its console"
        )
        parser.add_argument("--no-logs", action="store_true", help="no worker output on the console (log files only)")
        parser.add_argument(
            "--no-curve",
            action="store_true",
            help="no CURVE authentication/encryption (trusted networks only; overrides [launcher] curve)",
        )
        parser.add_argument(
            "--no-gpu-check",
            action="store_true",
            help="do not refuse GPU ids a host does not have (ids that are only labels on a CPU machine)",
        )
    if command == "status":
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
    if command == "logs":
        parser.add_argument("target", help="a pool, a cell (POOL-N) or a worker (POOL-N-M)")
        parser.add_argument("-n", "--lines", type=int, default=50, help="how many last lines (default 50)")
        parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (Ctrl-C stops)")
    args = parser.parse_args(argv)
    # Ctrl-C (SIGINT) stops every command, whatever this process inherited: a non-interactive shell starts a
    # background command (`miles-launch ... --submit &` in a script, a CI job) with SIGINT ignored, which Python
    # keeps, and a `--submit` launcher then never cancelled its Slurm job on SIGINT.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    printer = ProgressPrinter()
    try:
        submit = getattr(args, "submit", False)
        config = load_config(
            args.config,
            allocation=slurm_launch.login_allocation(args.config, submit=submit, command=command),
            job=_driver_job(getattr(args, "driver", None)),
        )
        if command == "status":
            return _status(config, as_json=args.json)
        if command == "logs":
            return _logs(config, args, printer)
        if command == "down":
            on_login_node = config.cluster is not None and not os.environ.get("SLURM_JOB_ID")
            for message in slurm_launch.down_submitted(config) if on_login_node else launch_down(config):
                printer.step(message)
            return 0
        config = _console_overrides(config, args)
        # Every launch makes fresh CURVE keys, ships them to the hosts and authenticates every actor socket with them;
        # --no-curve (or [launcher] curve = false) is for trusted networks (large transfers between hosts are about
        # 4x faster without it). With CURVE off, SSH hosts' actors listen on every interface, so the launch is refused
        # unless hosts.toml says [launcher] allow_open_binds_without_curve = true (check_open_binds); the launch then
        # warns at start who can call the actors (curve_off_warning).
        if getattr(args, "no_curve", False):
            config = config.model_copy(update={"launcher": config.launcher.model_copy(update={"curve": False})})
            check_open_binds(config, curve_off_by="--no-curve")  # the file was checked with CURVE on
        plan = slurm_launch.plan(config)
        checked = check_launch(config) if command == "run" else None  # imports the job's and the actors' code
    except (ConfigError, PlacementError) as exc:
        printer.error(str(exc))
        return 2
    warning = curve_off_warning(config)
    if warning:
        printer.warning(warning)
    for problem in checked.warnings if checked else ():
        printer.warning(problem)
    if args.dry_run:
        print(_describe(config, plan))
        if checked is not None:
            print(checked.describe(config))
        if submit and config.cluster is not None:
            script = slurm_launch.batch_script(config, config.cluster, _passed_on(args))
            print(f"(hosts node1..node{config.cluster.nodes}: the nodes Slurm will give the job)")
            print(f"sbatch script:\n{script}")
        return 0
    if submit and config.cluster is not None:
        return _submit(config, config.cluster, _passed_on(args), printer)
    library_logs_to_file(config.launcher.workdir, verbose=args.verbose)  # paramiko's tracebacks: not on the console
    return _run(config, plan, printer)


def _passed_on(args: argparse.Namespace) -> list[str]:
    """The console flags of ``--submit`` that the launch inside the job gets too."""
    flags = {"--no-logs": args.no_logs, "--no-curve": args.no_curve, "--no-gpu-check": args.no_gpu_check,
             "-v": args.verbose}  # fmt: skip
    return [flag for flag, given in flags.items() if given]


def _submit(config: ClusterConfig, cluster: SlurmCluster, launcher_args: list[str], printer: ProgressPrinter) -> int:
    """``--submit`` on a login node: sbatch the launch, stream the job's console, cancel the job on Ctrl-C.

    (With ``[cluster] provider = "slurm"`` the hosts are the allocation's nodes, each host agent an srun step;
    ``down`` on a login node cancels the job: launcher/console/slurm_launch.py.)"""

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        code = slurm_launch.submit_and_follow(config, cluster, launcher_args, write=printer.raw, say=printer.step)
    except LauncherError as exc:
        printer.error(str(exc))
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    printer.step(f"the Slurm job finished with exit code {code}")
    return code


def _console_overrides(config: ClusterConfig, args: argparse.Namespace) -> ClusterConfig:
    """``-v`` streams every worker line, ``--no-logs`` none; otherwise hosts.toml's ``stream_logs`` holds;
    ``--no-gpu-check`` turns ``[launcher] gpu_check`` off.

    The console shows the launcher's progress, the job's output and workers' warnings, errors and prints; every line
    a worker writes is in its log file on its host (``miles-launch logs`` reads it)."""
    if getattr(args, "no_gpu_check", False):
        config = config.model_copy(update={"launcher": config.launcher.model_copy(update={"gpu_check": False})})
    if getattr(args, "no_logs", False):
        mode = "none"
    elif args.verbose:
        mode = "all"
    else:
        return config
    return config.model_copy(update={"launcher": config.launcher.model_copy(update={"stream_logs": mode})})


def _describe(config: ClusterConfig, plan: PlacementPlan) -> str:
    hosts = [
        (host.name, host.provider, host.address,
         f"gpus={list(host.gpu_ids)} python={host.python} workdir={host.workdir} bind={bind_address(host)}")
        for host in config.hosts
    ]  # fmt: skip
    lines = [f"hosts.toml: {config.source}", "hosts:", *aligned(hosts, indent="  "), "pools:"]
    pools = [
        (pool.id, f"{pool.cells} cell(s) x {pool.workers_per_cell} {pool.worker.kind} worker(s), "
         f"gpus={pool.worker.gpus:g} each, {pool.strategy.value}")
        for pool in config.pools
    ]  # fmt: skip
    for pool, line in zip(config.pools, aligned(pools, indent="  "), strict=True):
        lines.append(line)
        if pool.worker.kind == "command":  # the template each worker's placeholders are filled into
            lines.append(f"    command: {pool.worker.command}")
    lines += ["placement:", *("  " + row for row in plan.describe().splitlines())]
    job = config.job
    lines.append(f"job: {job.entrypoint or ' '.join(job.command or ())}")
    settings = config.launcher
    lines.append(f"security: {'CURVE (fresh keys per launch)' if settings.curve else 'none (CURVE off: plain TCP)'}")
    sd = "off" if settings.metrics_sd_port < 0 else f"{settings.metrics_sd_host}:{settings.metrics_sd_port or 'any'}"
    lines.append(f"prometheus service discovery: {sd}")
    return "\n".join(lines)


def curve_off_warning(config: ClusterConfig) -> str | None:
    """What a launch with CURVE off exposes, and to whom (None with CURVE on)."""
    if config.launcher.curve:
        return None
    open_hosts = open_bind_hosts(config)
    if not open_hosts:
        return (
            f"CURVE is off: actors listen on loopback only ({LOOPBACK_BIND}), so only processes on this machine can "
            "reach their ports, but any of them (any user) can call any public method of any actor."
        )
    names = ", ".join(host.name for host in open_hosts)
    return (
        f"CURVE is off: actors on {names} listen on every interface ({bind_address(open_hosts[0])}) without "
        "authentication, so any peer that can reach the actors' ports can call any public method of any actor.\n"
        "Trusted networks only (allowed by `allow_open_binds_without_curve = true` in hosts.toml)."
    )


def _logs(config: ClusterConfig, args: argparse.Namespace, printer: ProgressPrinter) -> int:
    try:
        print_logs(config, args.target, lines=args.lines, follow=args.follow)
    except KeyboardInterrupt:
        return 130
    except ConfigError:
        raise  # exit code 2, like every configuration error
    except LauncherError as exc:
        printer.error(str(exc))
        return 1
    return 0


def _status(config: ClusterConfig, *, as_json: bool) -> int:
    if config.cluster is not None and not os.environ.get("SLURM_JOB_ID"):  # a login node: the submitted job
        job = slurm_launch.submitted_status(config)
        print(json.dumps(job, indent=2) if as_json else job["message"])
        return 0 if job["running"] else 3
    report = launch_status(config)
    print(json.dumps(report, indent=2) if as_json else status_table(report))
    return 0 if report["running"] else 3


def _run(config: ClusterConfig, plan: PlacementPlan, printer: ProgressPrinter) -> int:
    state_path = state_path_for(config)
    previous = read_state(state_path)
    if previous and process_alive(previous["launcher"].get("pid"), previous["launcher"].get("create_time")):
        printer.error(
            f"a launch of this config is running (pid {previous['launcher']['pid']}); `miles-launch down` it first"
        )
        return 1
    try:
        if config.job.entrypoint is not None:
            resolve_entrypoint(config.job.entrypoint)  # fail on a typo before starting anything
    except ConfigError as exc:
        printer.error(str(exc))
        return 2
    provider = WorkerProvider(
        config,
        plan=plan,
        log_sink=printer.log_line,
        on_death=printer.death,
        state_path=state_path,
        progress=printer.step,
    )
    printer.on_output = provider.phase.output  # workers' lines are the job's output too (its heartbeat says when)
    previous_handlers = _install_signal_handlers()
    previous_curve_env = os.environ.get(CURVE_DIR_ENV)
    code = 1
    try:
        hosts = provider.hosts_to_connect()
        security = "CURVE on" if config.launcher.curve else "CURVE OFF (plain TCP: trusted network only)"
        printer.step(f"connecting to {len(hosts)} host(s): {', '.join(hosts)} ({security})")
        started = time.monotonic()
        provider.connect()
        provider.phase.enter(STARTING)
        # The job's own handles (get_actor, object refs, handles returned by actors) use this launch's keys too;
        # empty (CURVE off) also hides a MILES_CURVE_DIR the shell may have set.
        os.environ[CURVE_DIR_ENV] = provider.curve_dir or ""
        provider.start_all()
        workers = len(plan.workers())
        printer.step(f"all {workers} worker(s) ready in {time.monotonic() - started:.1f}s; running the job")
        # Ctrl-C, SIGTERM and errors tear everything down (SIGTERM, grace, SIGKILL on every host) before exiting;
        # while the job runs, a line every [job] heartbeat_s (60 s) says how long it has run and when it last printed.
        with JobWatch(config.job, provider.phase, say=printer.step, save_state=provider.save_state):
            code = run_job(config.job, JobContext(config, provider, dict(config.job.args)), state_path=state_path)
        printer.step(f"job finished with exit code {code}")
    except (KeyboardInterrupt, Terminated) as exc:
        printer.step(f"{'interrupted' if isinstance(exc, KeyboardInterrupt) else 'terminated'}; tearing down")
        code = 130
    except JobTimedOut as exc:
        printer.error(f"{exc}; tearing down")
        code = TIMEOUT_EXIT_CODE
    except LauncherError as exc:
        printer.error(str(exc))
        code = 1
    except Exception:
        log.exception("job failed")
        printer.error("the job raised (traceback above); tearing down")
        code = 1
    finally:
        signal.signal(signal.SIGINT, lambda *_: printer.step("still tearing down, please wait"))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        printer.step("stopping every process on every host")
        provider.phase.enter(TEARING_DOWN)
        provider.save_state()
        provider.close()
        if previous_curve_env is None:
            os.environ.pop(CURVE_DIR_ENV, None)
        else:
            os.environ[CURVE_DIR_ENV] = previous_curve_env
        printer.step("teardown complete")
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    return code


def _driver_job(script: str | None) -> dict[str, Any] | None:
    """``--driver SCRIPT``: a command job running SCRIPT with this Python, its directory the job's code."""
    if script is None:
        return None
    path = Path(script).resolve()
    if not path.is_file():
        raise ConfigError(f"--driver {script}: no such file")
    return {"command": [sys.executable, str(path)], "working_dir": str(path.parent)}


def _install_signal_handlers() -> dict[int, Any]:
    def terminate(signum: int, _frame: Any) -> None:
        raise Terminated(signal.Signals(signum).name)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        previous[sig] = signal.getsignal(sig)
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return previous


def run_and_exit() -> NoReturn:
    """The ``miles-launch`` program: :func:`main`, then exit at once with its code.

    Once the teardown is complete nothing is left to wait for, so the process ends now: exit handlers run (the
    job's, the runtime's: actors the job spawned are killed) and the streams are flushed, but the interpreter's
    finalization is skipped: it joins every non-daemon thread a job left behind (forever, for a stuck one) and
    garbage-collects the whole heap, which kept a launcher alive 3-15 s after ``teardown complete`` on a busy
    machine (and a ``--submit``'s Slurm job with it).
    """
    code = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
