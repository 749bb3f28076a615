"""The job's own code as packages: ``[job] working_dir`` and ``py_modules``, listed, size-checked and zipped, as Ray's
``runtime_env={"working_dir": ..., "py_modules": [...]}`` does (ray/_private/runtime_env/packaging.py)."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pathspec import GitIgnoreSpec

from launcher.config.hosts_config import ClusterConfig, JobConfig
from launcher.errors import ConfigError

DEFAULT_EXCLUDES = (".git/", "__pycache__/", "*.pyc")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: every entry gets it, so the digest depends on content only
MIB = 1024 * 1024


@dataclass
class CodePackage:
    """One directory (or module file) of the job's code: its files, and once zipped, its digest and zip.

    The zip is deterministic (sorted entries, fixed dates and modes), so its sha256 is its content address:
    unchanged code has the same digest launch after launch and a host that holds it is sent nothing
    (launcher/launch/code_shipping.py, launcher/agent/code_cache.py)."""

    source: Path  # the working dir, or a py_modules package directory / module file
    field: str  # the hosts.toml field that names it (job.working_dir, job.py_modules)
    files: list[tuple[str, Path]]  # (name in the zip, file) in zip order
    size: int  # bytes of the files
    digest: str = ""  # sha256 of the zip (set by zip())
    zip_file: IO[bytes] | None = None
    zip_size: int = 0

    @property
    def local_path(self) -> str:
        """The ``sys.path`` entry that imports it in place (the working dir itself; a py_module's parent)."""
        return str(self.source if self.field == "job.working_dir" else self.source.parent)

    def zip(self) -> None:
        """Write the deterministic zip to a temporary file and take its digest (once)."""
        if self.zip_file is not None:
            return
        out = tempfile.TemporaryFile(prefix="miles-code-")
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
            for name, path in self.files:
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                executable = os.stat(path).st_mode & 0o111
                info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(path, "rb") as src, archive.open(info, "w") as dst:
                    while chunk := src.read(MIB):
                        dst.write(chunk)
        out.seek(0)
        digest = hashlib.sha256()
        while chunk := out.read(MIB):
            digest.update(chunk)
        self.digest, self.zip_size, self.zip_file = digest.hexdigest(), out.tell(), out

    def close(self) -> None:
        """Delete the temporary zip."""
        if self.zip_file is not None:
            self.zip_file.close()


def code_packages(config: ClusterConfig) -> list[CodePackage]:
    """The job's working dir and py_modules as packages (files listed, not zipped); ConfigError past the limit.

    Every ``.gitignore`` under a directory excludes what it names below it, so do ``[job] excludes`` (same syntax,
    relative to the directory) and a few defaults (``.git``, ``__pycache__``, ``*.pyc``); the launcher's and the
    hosts' workdirs are left out when they lie inside (their logs change every launch). The total is refused past
    ``[job] max_code_mib`` (Ray's limit: 500 MiB), naming the largest files."""
    job = config.job
    skip = _run_dirs(config)
    packages = []
    if job.working_dir is not None:
        files = _walk(job.working_dir, job.excludes, skip)
        packages.append(CodePackage(job.working_dir, "job.working_dir", files, _size(files)))
    for module in job.py_modules:
        if module.is_file():
            files = [(module.name, module)]
        else:
            files = [(f"{module.name}/{name}", path) for name, path in _walk(module, job.excludes, skip)]
        packages.append(CodePackage(module, "job.py_modules", files, _size(files)))
    _check_limit(job, packages, config)
    return packages


def local_paths(job: JobConfig) -> list[str]:
    """``sys.path`` entries that import the job's code in place on this machine (the launcher, local hosts)."""
    paths = [str(job.working_dir)] if job.working_dir is not None else []
    paths += [str(module.parent) for module in job.py_modules]
    return list(dict.fromkeys(paths))


def describe(packages: list[CodePackage], config: ClusterConfig) -> str:
    """The dry run's lines: what ships, from where, its size, and to which hosts."""
    if not packages:
        return "code: none shipped ([job] working_dir = false, no py_modules)"
    remote = [host.name for host in config.hosts if host.provider != "local"]
    where = (
        f"zipped and sent to {', '.join(remote)} (cached by content in each host's workdir/code)"
        if remote
        else "used in place (every host is local)"
    )
    lines = [f"code: first on sys.path of the job and every worker; {where}"]
    for package in packages:
        lines.append(f"  {package.field}: {package.source} ({len(package.files)} file(s), {_mib(package.size)})")
    return "\n".join(lines)


def _walk(root: Path, excludes: tuple[str, ...], skip: set[Path]) -> list[tuple[str, Path]]:
    """Files under ``root`` not excluded, as (posix name relative to root, path), sorted; symlinked directories
    are not followed (a loop, or a tree outside), symlinked files ship their content."""
    top = GitIgnoreSpec.from_lines([*DEFAULT_EXCLUDES, *excludes])
    specs: list[tuple[str, GitIgnoreSpec]] = [("", top)]
    found: list[tuple[str, Path]] = []
    for current, dirs, names in os.walk(root):
        here = Path(current)
        rel = here.relative_to(root).as_posix()
        rel = "" if rel == "." else rel + "/"
        ignore = here / ".gitignore"
        if ignore.is_file():
            specs.append((rel, GitIgnoreSpec.from_lines(ignore.read_text(errors="replace").splitlines())))
        ancestors = [(base, spec) for base, spec in specs if rel.startswith(base)]

        def excluded(name: str, is_dir: bool, rel: str = rel, ancestors: list = ancestors) -> bool:
            path = rel + name + ("/" if is_dir else "")
            return any(spec.match_file(path[len(base) :]) for base, spec in ancestors)

        dirs[:] = sorted(
            d for d in dirs
            if not (here / d).is_symlink() and (here / d).resolve() not in skip and not excluded(d, True)
        )  # fmt: skip
        for name in sorted(names):
            path = here / name
            if not excluded(name, False) and path.is_file():
                found.append((rel + name, path))
    return sorted(found)


def _run_dirs(config: ClusterConfig) -> set[Path]:
    """Directories on this machine the launch writes to (launcher and host workdirs): never shipped."""
    dirs = {config.launcher.workdir, *(host.workdir for host in config.hosts)}
    return {path.resolve() for path in dirs if path.is_absolute()}


def _size(files: list[tuple[str, Path]]) -> int:
    return sum(path.stat().st_size for _, path in files)


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB" if size >= MIB / 10 else f"{size / 1024:.1f} KiB"


def _check_limit(job: JobConfig, packages: list[CodePackage], config: ClusterConfig) -> None:
    total = sum(package.size for package in packages)
    if total <= job.max_code_mib * MIB:
        return
    files = sorted(((path.stat().st_size, path) for p in packages for _, path in p.files), reverse=True)[:5]
    largest = "\n".join(f"    {_mib(size):>10}  {path}" for size, path in files)
    label = config.source or "hosts.toml"
    raise ConfigError(
        f"{label}: field 'job.working_dir': the job's code is {_mib(total)}, over [job] max_code_mib = "
        f"{job.max_code_mib:g} (Ray's working_dir limit is 500 MiB too); the largest files:\n{largest}\n"
        'Fix: leave data, checkpoints and virtualenvs out (.gitignore or [job] excludes = ["data/"]), or raise '
        "max_code_mib"
    )
