"""A class defined in a script (or inside a function) travels by value (cloudpickle); its remote tracebacks still
name the script's file and line, where cloudpickle alone writes ``File "<dynamic-code>"``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

SCRIPT = """\
from runtime import spawn


class Boom:
    def fail(self) -> None:
        raise ValueError("from the script")


def local_class():
    class Inner:
        def fail(self) -> None:
            raise KeyError("from a function")

    return Inner


if __name__ == "__main__":
    for cls in (Boom, local_class()):
        handle = spawn(cls)
        try:
            handle.fail().result(timeout=60)
        except Exception as exc:
            print(exc.remote_traceback)
        handle.kill()
"""


def test_remote_tracebacks_of_script_classes_name_the_script(tmp_path: Path) -> None:
    script = tmp_path / "my_script.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f'File "{script}", line 6, in fail' in result.stdout
    assert f'File "{script}", line 12, in fail' in result.stdout
    assert 'raise ValueError("from the script")' in result.stdout  # the source line, read from the script
    assert "<dynamic-code>" not in result.stdout
