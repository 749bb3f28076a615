"""The launch services: what the launcher process serves its launch, started once before the first host agent.

Its CURVE keys, actor name service, provider API, placement API and Prometheus service discovery, one for every host
of the launch.
"""

from __future__ import annotations

from pathlib import Path

from launcher.config.hosts_config import ClusterConfig, open_bind_hosts
from launcher.console.progress import Say
from launcher.errors import LauncherError
from launcher.launch import curve_keys
from launcher.launch.provider_service import ProviderService, serve_provider_api
from launcher.launch.service_discovery import ServiceDiscovery
from runtime import placement
from runtime.internals import NameRegistry, ServiceServer, serve_name_service

# file_sd JSON under the launcher workdir, mirroring the HTTP service discovery (``metrics_sd_url``);
# launcher.launch.metrics_targets says what it lists.
SD_FILE = "prometheus-targets.json"


class LaunchServices:
    """This launch's keys, name service, provider API (:mod:`launcher.launch.provider_service`, for jobs and
    actors), placement API (the cluster ledger, :mod:`launcher.cluster`) and service discovery.

    Processes on SSH hosts and Slurm nodes reach them at the launcher's address as their SSH connection came from, or
    on the route to the node (``reach_back``, filled in by the SSH and srun openers); local ones on loopback."""

    def __init__(
        self,
        config: ClusterConfig,
        provider_service: ProviderService,
        placement_service: placement.PlacementApi,
        *,
        launch_id: str,
        say: Say,
    ) -> None:
        self.config = config
        self.settings = config.launcher
        self._provider_service = provider_service
        self._placement_service = placement_service
        self._say = say
        self.launch_id = launch_id
        self.keys: curve_keys.LaunchKeys | None = None  # None: CURVE off (or not started yet)
        self.reach_back: dict[str, str] = {}  # remote host -> the launcher's address as that host reaches it
        self.name_server: ServiceServer | None = None
        self.name_registry: NameRegistry | None = None  # the names it serves (the launcher's own go here directly)
        self.provider_api: ServiceServer | None = None
        self.placement_api: ServiceServer | None = None
        self.service_discovery: ServiceDiscovery | None = None

    @property
    def curve_dir(self) -> str | None:
        """This launch's CURVE keys on the launcher host (None: CURVE off)."""
        return self.keys.directory if self.keys is not None else None

    def start(self) -> None:
        """Start what is not running yet: the keys, the name service, the provider and placement APIs, service
        discovery."""
        # With ``[launcher] curve`` (the default): the agent pool ships the keys to every host, every worker gets
        # MILES_CURVE_DIR, the launcher attaches with them (curve_dir); close() removes them.
        if self.settings.curve and self.keys is None:
            self.keys = curve_keys.create_launch_keys(Path(self.settings.workdir), self.launch_id)
        if self.name_server is None:
            self._serve_names()
        if self.provider_api is None:
            self.provider_api = serve_provider_api(
                self._provider_service, curve_dir=self.curve_dir, open_bind=self._open_bind()
            )
        if self.placement_api is None:
            try:
                self.placement_api = placement.serve(
                    self._placement_service, curve_dir=self.curve_dir, open_bind=self._open_bind()
                )
            except (OSError, RuntimeError) as exc:
                raise LauncherError(f"cannot serve the placement API: {exc}") from None
        if self.settings.metrics_sd_port >= 0 and self.service_discovery is None:
            host, port = self.settings.metrics_sd_host, self.settings.metrics_sd_port
            path = Path(self.settings.workdir) / SD_FILE
            try:
                self.service_discovery = ServiceDiscovery(host=host, port=port, file_path=path)
            except (OSError, ValueError) as exc:
                raise LauncherError(
                    f"cannot serve Prometheus service discovery on {host}:{port} ([launcher] metrics_sd_host / "
                    f"metrics_sd_port; 0 picks a free port, -1 turns it off): {exc}"
                ) from None
            self._say(f"Prometheus service discovery: {self.metrics_sd_url}; file_sd: {path}")

    def _open_bind(self) -> bool:
        """Whether the launch's services listen on every interface: when SSH hosts must reach them (with the rule
        of actors' open binds: CURVE on, or ``allow_open_binds_without_curve``); else on loopback."""
        return bool(open_bind_hosts(self.config)) and (
            self.curve_dir is not None or self.settings.allow_open_binds_without_curve
        )

    def _serve_names(self) -> None:
        """Serve this launch's name registry (on every interface or on loopback: :meth:`_open_bind`).

        The launcher is its launch's name authority: every worker and command job finds it in ``MILES_NAME_SERVICE``
        (:meth:`name_service_env`), so a name is one name on every host."""
        open_bind = self._open_bind()
        try:
            registry = NameRegistry()
            self.name_server = serve_name_service(curve_dir=self.curve_dir, open_bind=open_bind, registry=registry)
            self.name_registry = registry
        except (OSError, RuntimeError) as exc:
            raise LauncherError(f"cannot serve the launch's actor names: {exc}") from None
        where = "every interface" if open_bind else "loopback"
        self._say(f"actor name service on {where}, port {self.name_server.port}")

    def name_service_env(self, host: str | None) -> str:
        """``MILES_NAME_SERVICE`` for a process on ``host`` (None: the launcher's host): the service as that host
        reaches this process (an SSH host: the address its SSH connection came from; a local host: loopback)."""
        if self.name_server is None:
            raise LauncherError("the launch's name service is not running (connect() starts it)")
        reach = self.reach_back.get(host, "127.0.0.1") if host is not None else "127.0.0.1"
        return self.name_server.address(reach).to_json()

    def placement_api_env(self, host: str | None) -> str:
        """``MILES_PLACEMENT_API`` for a process on ``host`` (None: the launcher's host), as
        :meth:`name_service_env`."""
        if self.placement_api is None:
            raise LauncherError("the launch's placement API is not running (connect() starts it)")
        reach = self.reach_back.get(host, "127.0.0.1") if host is not None else "127.0.0.1"
        return self.placement_api.address(reach).to_json()

    @property
    def metrics_sd_url(self) -> str | None:
        """URL of the Prometheus HTTP service discovery (``http_sd_configs``) as this machine reaches it."""
        sd = self.service_discovery
        if sd is None:
            return None
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(sd.host, sd.host)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{sd.port}{sd.path}"

    @property
    def metrics_sd_file(self) -> Path | None:
        """The file_sd JSON (``file_sd_configs``) mirroring the same targets."""
        return self.service_discovery.file_path if self.service_discovery is not None else None

    def say_remote_sd_url(self, hosts: list[str]) -> None:
        """The discovery URL as newly connected SSH hosts reach the launcher (where a Prometheus there scrapes)."""
        sd = self.service_discovery
        if sd is None or sd.host not in ("0.0.0.0", "::", ""):
            return
        for address in sorted({self.reach_back[h] for h in hosts if h in self.reach_back}):
            names = ", ".join(h for h in hosts if self.reach_back.get(h) == address)
            shown = f"[{address}]" if ":" in address else address
            self._say(f"Prometheus service discovery from {names}: http://{shown}:{sd.port}{sd.path}")

    def close(self) -> None:
        """Remove the keys on this host, stop the provider and placement APIs, the name service and service
        discovery."""
        curve_keys.remove_keys(self.curve_dir)
        for served in (self.provider_api, self.placement_api):
            if served is not None:
                served.close()
        self.provider_api = self.placement_api = None
        if self.name_server is not None:
            self.name_server.close()
            self.name_server = None
        if self.service_discovery is not None:
            self.service_discovery.close()
