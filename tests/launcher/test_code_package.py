"""The job's code as packages (launcher/launch/code_package.py) and the host's cache of them
(launcher/agent/code_cache.py).

Mirrors Ray's working_dir packaging (ray/_private/runtime_env/packaging.py): .gitignore files exclude below their
directory, ``excludes`` use the same syntax, the package is content-addressed (unchanged files, same digest) and
refused past a size limit; and checks what Ray's unpacking leaves to trust: hostile zips are refused on the host.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
import toml_text
from launch_helpers import PYTHON, local_host, subprocess_env

from launcher.agent.agent_commands import CodeHave, CodePut, CodeUnpack
from launcher.agent.code_cache import CodeCache, safe_extract, with_python_path
from launcher.config.hosts_config import load_config
from launcher.errors import ConfigError
from launcher.launch.code_package import code_packages, local_paths


def project(tmp_path: Path, job: str = "") -> Path:
    """A project directory with hosts.toml, code, ignored data and the run directories inside it."""
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("X = 1\n")
    (root / "myjob.py").write_text("def main(ctx):\n    return 0\n")
    (root / "tool.sh").write_text("#!/bin/sh\n")
    (root / "tool.sh").chmod(0o755)
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"x" * 1000)
    (root / "pkg" / "notes.tmp").write_text("scratch")
    (root / "pkg" / ".gitignore").write_text("*.tmp\n")  # nested: applies below pkg/ only
    (root / "top.tmp").write_text("kept: the nested .gitignore does not reach up")
    (root / ".gitignore").write_text("data/\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (root / "h1").mkdir()  # a host workdir inside the project: its logs never ship
    (root / "h1" / "agent.log").write_text("log")
    (root / "hosts.toml").write_text(
        '[[hosts]]\nname = "h1"\naddress = "localhost"\nprovider = "local"\nworkdir = "h1"\n'
        f'[job]\nentrypoint = "myjob:main"\n{job}\n'
    )
    return root


def names(tmp_path: Path, job: str = "") -> list[str]:
    (package,) = code_packages(load_config(project(tmp_path, job) / "hosts.toml"))
    return [name for name, _ in package.files]


def test_working_dir_defaults_to_hosts_toml_directory_and_respects_gitignore(tmp_path: Path) -> None:
    assert names(tmp_path) == [".gitignore", "hosts.toml", "myjob.py", "pkg/.gitignore", "pkg/__init__.py",
                               "tool.sh", "top.tmp"]  # fmt: skip


def test_excludes_use_gitignore_syntax_relative_to_the_working_dir(tmp_path: Path) -> None:
    assert names(tmp_path, 'excludes = ["*.sh", "/top.tmp"]') == [
        ".gitignore", "hosts.toml", "myjob.py", "pkg/.gitignore", "pkg/__init__.py"
    ]  # fmt: skip


def test_digest_is_the_content_address(tmp_path: Path) -> None:
    root = project(tmp_path)
    config = load_config(root / "hosts.toml")

    def digest() -> str:
        (package,) = code_packages(config)
        package.zip()
        assert package.zip_file is not None
        package.zip_file.seek(0)
        assert hashlib.sha256(package.zip_file.read()).hexdigest() == package.digest
        package.close()
        return package.digest

    first = digest()
    os.utime(root / "myjob.py", (1, 1))  # a touched file, same content: same package
    assert digest() == first
    (root / "myjob.py").write_text("def main(ctx):\n    return 1\n")
    assert digest() != first


def test_py_modules_ship_as_their_own_package_and_import_from_their_parent(tmp_path: Path) -> None:
    root = project(tmp_path, 'py_modules = ["../lib/helper", "../lib/single.py"]\nworking_dir = false')
    (tmp_path / "lib" / "helper").mkdir(parents=True)
    (tmp_path / "lib" / "helper" / "__init__.py").write_text("")
    (tmp_path / "lib" / "single.py").write_text("")
    config = load_config(root / "hosts.toml")
    packages = code_packages(config)
    assert [[n for n, _ in p.files] for p in packages] == [["helper/__init__.py"], ["single.py"]]
    assert local_paths(config.job) == [str(tmp_path / "lib")]


def test_a_missing_working_dir_names_the_field_and_line(tmp_path: Path) -> None:
    root = project(tmp_path, 'working_dir = "nowhere"')
    with pytest.raises(ConfigError, match=r"hosts.toml:8: field 'job.working_dir': .*nowhere is not a directory"):
        load_config(root / "hosts.toml")


def test_size_limit_names_the_largest_files_and_the_fix(tmp_path: Path) -> None:
    root = project(tmp_path, "max_code_mib = 0.001")
    (root / "weights.bin").write_bytes(b"w" * 4000)
    with pytest.raises(ConfigError) as err:
        code_packages(load_config(root / "hosts.toml"))
    message = str(err.value)
    assert "over [job] max_code_mib = 0.001" in message and str(root / "weights.bin") in message
    assert "excludes" in message and ".gitignore" in message


def _zip(entries: list[tuple[str, bytes, int]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "mode", "why"),
    [
        ("/etc/passwd", stat.S_IFREG | 0o644, "not a plain relative path"),
        ("../../escape.py", stat.S_IFREG | 0o644, "not a plain relative path"),
        ("a/../../escape.py", stat.S_IFREG | 0o644, "not a plain relative path"),
        ("link", stat.S_IFLNK | 0o777, "not a file or a directory"),
    ],
)
def test_hostile_entries_are_refused(tmp_path: Path, name: str, mode: int, why: str) -> None:
    archive = tmp_path / "p.zip"
    archive.write_bytes(_zip([(name, b"/etc", mode)]))
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match=why):
        safe_extract(archive, tmp_path / "out", max_bytes=10**6)
    assert not (tmp_path / "escape.py").exists()


def test_a_zip_bomb_stops_at_the_size_bound(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(_zip([("zeros", b"\0" * 5_000_000, stat.S_IFREG | 0o644)]))
    assert archive.stat().st_size < 50_000
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="more than 1000000 bytes"):
        safe_extract(archive, tmp_path / "out", max_bytes=1_000_000)


def test_a_name_twice_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "twice.zip"
    with pytest.warns(UserWarning, match="Duplicate name"):
        archive.write_bytes(_zip([("a.py", b"1", stat.S_IFREG | 0o644), ("a.py", b"2", stat.S_IFREG | 0o644)]))
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError):
        safe_extract(archive, tmp_path / "out", max_bytes=10**6)


def _send(cache: CodeCache, data: bytes, digest: str, chunk: int = 7) -> None:
    for offset in range(0, len(data), chunk):
        piece = base64.b64encode(data[offset : offset + chunk]).decode()
        cache.put(CodePut(digest, size=len(data), offset=offset, data=piece))


def test_cache_receives_checks_and_unpacks_a_package_once(tmp_path: Path) -> None:
    data = _zip([("mod.py", b"VALUE = 3\n", stat.S_IFREG | 0o644), ("run.sh", b"#!/bin/sh\n", stat.S_IFREG | 0o755)])
    digest = hashlib.sha256(data).hexdigest()
    cache = CodeCache(tmp_path)
    assert cache.have(CodeHave(digest)) == {"path": str(tmp_path / "code" / digest), "present": False}
    _send(cache, data, digest)
    path = Path(cache.unpack(CodeUnpack(digest, max_bytes=10**6))["path"])
    assert (path / "mod.py").read_text() == "VALUE = 3\n"
    assert os.access(path / "run.sh", os.X_OK) and not os.access(path / "mod.py", os.X_OK)
    assert cache.have(CodeHave(digest))["present"] is True
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == [digest]  # no partial files left


def test_cache_refuses_bytes_that_do_not_match_the_digest_and_chunks_out_of_order(tmp_path: Path) -> None:
    data = _zip([("mod.py", b"VALUE = 3\n", stat.S_IFREG | 0o644)])
    cache = CodeCache(tmp_path)
    wrong = hashlib.sha256(b"something else").hexdigest()
    _send(cache, data, wrong)
    with pytest.raises(ValueError, match="do not match its digest"):
        cache.unpack(CodeUnpack(wrong, max_bytes=10**6))
    digest = hashlib.sha256(data).hexdigest()
    cache.put(CodePut(digest, size=len(data), offset=5, data=base64.b64encode(data[5:9]).decode()))
    with pytest.raises(ValueError, match="does not follow 0"):
        cache.unpack(CodeUnpack(digest, max_bytes=10**6))
    with pytest.raises(ValueError, match="64 hex digits"):
        cache.have(CodeHave("../../etc"))
    assert not any((tmp_path / "code").iterdir())


def test_python_path_goes_first_and_keeps_what_the_environment_had() -> None:
    assert with_python_path({"PYTHONPATH": "/old"}, ["/code/a", "/code/b"])["PYTHONPATH"] == "/code/a:/code/b:/old"
    assert with_python_path({}, ["/code/a"])["PYTHONPATH"] == "/code/a"
    assert with_python_path({"PYTHONPATH": "/old"}, [])["PYTHONPATH"] == "/old"


LOCAL_JOB = """\
import json


class Where:
    def where(self) -> str:
        return __file__


def main(ctx) -> int:
    print("LOCAL " + json.dumps({"job": __file__, "actor": ctx.handles("w")[0].where().result(timeout=60)}))
    return 0
"""


@pytest.mark.processes
def test_local_hosts_import_the_working_dir_in_place(tmp_path: Path) -> None:
    """The issue's first try: myjob.py beside hosts.toml, `entrypoint = "myjob:main"`, an actor class of its own,
    launched from another directory (before: `cannot import 'myjob'`, rc 2)."""
    (tmp_path / "myjob.py").write_text(LOCAL_JOB)
    host = local_host("h", tmp_path / "h")
    pool = {"id": "w", "worker": {"kind": "serve", "actor_class": "myjob:Where"}}
    data = {"launcher": {"workdir": str(tmp_path / "run")}, "hosts": [host], "job": {"entrypoint": "myjob:main"},
            "pools": [pool]}  # fmt: skip
    (tmp_path / "hosts.toml").write_text(toml_text.dump(data))
    argv = [PYTHON, "-m", "launcher.console.cli", str(tmp_path / "hosts.toml")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("LOCAL ", 1)[1].splitlines()[0])
    assert out == {"job": str(tmp_path / "myjob.py"), "actor": str(tmp_path / "myjob.py")}
    assert not (tmp_path / "h" / "code").exists()  # nothing unpacked: used in place


@pytest.mark.processes
def test_a_command_job_gets_the_working_dir_first_on_its_pythonpath(tmp_path: Path) -> None:
    (tmp_path / "myjob.py").write_text("")
    command = [PYTHON, "-c", "import myjob, os; print('CMDJOB', myjob.__file__, os.environ['PYTHONPATH'])"]
    idle = {"kind": "command", "command": "sleep 60", "ports": {}, "ready": {"kind": "none"}}
    data = {"launcher": {"workdir": str(tmp_path / "run")}, "hosts": [local_host("h", tmp_path / "h")],
            "job": {"command": command}, "pools": [{"id": "idle", "worker": idle}]}  # fmt: skip
    (tmp_path / "hosts.toml").write_text(toml_text.dump(data))
    argv = [PYTHON, "-m", "launcher.console.cli", str(tmp_path / "hosts.toml")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    module, pythonpath = result.stdout.split("CMDJOB ", 1)[1].split()[:2]
    assert module == str(tmp_path / "myjob.py") and pythonpath.split(os.pathsep)[0] == str(tmp_path)
