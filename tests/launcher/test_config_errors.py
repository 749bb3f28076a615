"""hosts.toml errors with their fix (launcher/config/config_errors.py): the closest known key for an unknown one, at any
depth (hosts, their ssh table, pools' workers, [launcher]), and an example for a missing [job]."""

from __future__ import annotations

import pytest

from launcher.config.hosts_config import parse_config
from launcher.errors import ConfigError

HOST = '[[hosts]]\nname = "h"\naddress = "localhost"\nprovider = "local"\nworkdir = "/tmp/w"\n'
JOB = '[job]\nentrypoint = "myjob:main"\n'


def error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    return str(err.value)


def test_unknown_keys_get_the_closest_known_one() -> None:
    text = (
        HOST.replace('workdir = "/tmp/w"', 'workdir = "/tmp/w"\ngpu = 2')
        + "[hosts.ssh]\nprot = 22\n"
        + JOB
        + "entrypiont = 'x:y'\n[launcher]\nconnect_timeout = 3\n"
        + '[[pools]]\nid = "p"\n[pools.worker]\nkind = "serve"\nactor_class = "a:B"\nkwarg = {}\n'
    )
    message = error(text)
    assert "<hosts.toml>:6: host 'h' field 'gpu': unknown key 'gpu'; did you mean 'gpus'?" in message
    assert "host 'h' field 'ssh.prot': unknown key 'prot'; did you mean 'port'?" in message
    assert "field 'job.entrypiont': unknown key 'entrypiont'; did you mean 'entrypoint'?" in message
    assert "unknown key 'connect_timeout'; did you mean 'connect_timeout_s'?" in message
    assert "pool 'p' field 'worker.serve.kwarg': unknown key 'kwarg'; did you mean 'kwargs'?" in message
    assert "Extra inputs are not permitted" not in message


def test_a_key_like_none_lists_the_known_ones() -> None:
    message = error(HOST + JOB + "[launcher]\nzzz = 1\n")
    assert "unknown key 'zzz'; known keys: allow_open_binds_without_curve, check_versions," in message


def test_a_missing_job_table_shows_a_two_line_example() -> None:
    message = error(HOST)
    assert "field 'job': no [job] table: what runs once every pool is ready" in message
    assert '\n      [job]\n      entrypoint = "myjob:main"' in message
    assert "Field required" not in message
