"""docs/architecture.md stays true and short: every path and module it names exists, and it copies no constants.

Issue 43 item 6: the design document holds concepts and boundaries; numbers live in the code, where they change.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 200
#: Top-level folders a path in the document may start with; a path elsewhere in backticks is checked all the same.
FOLDERS = ("transport", "runtime", "launcher", "actors", "tests", "bench", "docs", "scripts", "examples")
LAYERS = ("transport", "runtime", "launcher", "actors")

_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(FOLDERS) + r")/[\w./-]*)")
_MODULE = re.compile(r"(?<![\w./-])((?:" + "|".join(LAYERS) + r")(?:\.\w+)+)")
_CODE = re.compile(r"`([^`\s]+)`")
#: A constant copied from code: a number of two digits or more, or any number with a unit.
_CONSTANT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?\s?(?:s|ms|us|µs|B|KiB|MiB|GiB|bytes|seconds|%)|\d{2,})(?![\w])")


def named_paths(text: str) -> set[str]:
    """Repository paths a text names: under a top-level folder, or any relative path written in backticks.

    A trailing ``.``, ``,`` or ``...`` (``actors/trainer/...``: somewhere in that folder) is not part of the path.
    """
    found = {match.rstrip(".,") for match in _PATH.findall(text)}
    for token in _CODE.findall(text):
        if "/" in token and "://" not in token and not token.startswith("/"):
            found.add(token.rstrip(".,"))
    return found


def named_modules(text: str) -> set[str]:
    """Dotted module names of the four layers a text names (``runtime.worker``, ``runtime.ray_compat``)."""
    return set(_MODULE.findall(text))


def missing_paths(text: str, root: Path) -> list[str]:
    return sorted(path for path in named_paths(text) if not (root / path).exists())


def unresolved_modules(text: str, root: Path) -> list[str]:
    missing = []
    for module in named_modules(text):
        base = root.joinpath(*module.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
            missing.append(module)
    return sorted(missing)


def test_every_path_the_architecture_names_exists() -> None:
    text = DOC.read_text()
    assert len(named_paths(text)) > 20, "the extractor found almost no paths: has the document's style changed?"
    missing = missing_paths(text, ROOT)
    assert not missing, f"docs/architecture.md names paths that do not exist (fix the document): {missing}"


def test_every_module_the_architecture_names_resolves_to_a_file() -> None:
    text = DOC.read_text()
    assert named_modules(text), "the extractor found no dotted module name"
    missing = unresolved_modules(text, ROOT)
    assert not missing, f"docs/architecture.md names modules with no file (fix the document): {missing}"


def test_the_architecture_is_short_and_copies_no_constants() -> None:
    lines = DOC.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"docs/architecture.md has {len(lines)} lines (at most {MAX_LINES}: concepts)"
    copied = [f"line {n}: {m}" for n, line in enumerate(lines, 1) for m in _CONSTANT.findall(line)]
    assert not copied, f"docs/architecture.md copies constants from code (say what they mean instead): {copied}"


def test_the_checks_catch_a_stale_document(tmp_path: Path) -> None:
    (tmp_path / "runtime" / "sub").mkdir(parents=True)
    (tmp_path / "runtime" / "__init__.py").write_text("")
    (tmp_path / "runtime" / "here.py").write_text("")
    (tmp_path / "runtime" / "sub" / "__init__.py").write_text("")
    text = (
        "Read `runtime/here.py`, runtime/gone.py. The folder runtime/sub/... and `launcher/moved.py`, "
        "`scripts/x.sh`; not `/dev/shm` nor `tcp://host:1`. Modules runtime.here, runtime.sub, runtime.old's "
        "and `transport.frames`."
    )
    assert missing_paths(text, tmp_path) == ["launcher/moved.py", "runtime/gone.py", "scripts/x.sh"]
    assert unresolved_modules(text, tmp_path) == ["runtime.old", "transport.frames"]
    assert _CONSTANT.findall("a 10 s timeout, 64 MiB, port 5555, 0.5s, rank 0, sha256, step 3") == [
        "10 s",
        "64 MiB",
        "5555",
        "0.5s",
    ]
