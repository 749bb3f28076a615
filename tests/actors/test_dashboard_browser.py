"""The dashboard in a real browser: Debian's chromium (headless, over the DevTools protocol) on a real demo run.

One short demo launch (hosts.example.toml with ``[dashboard] enabled = true``) records its samples and step
metrics; the page served for that run directory is navigated step -> sample -> token view,
and what it shows is checked against the JSONL files. A screenshot of each view is written under the test's tmp
dir. The views follow miles' dashboard (radixark/miles miles/dashboard/static: the rollout step table, the sample
view's conversation and tokens tabs); the error cases follow the bugs its PRs #2817, #2815 and #2881 fixed (an
empty step, a missing step, a malformed line: a message, never a failed page).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cdp_browser import CHROMIUM, Chromium
from dashboard_fixtures import ROOT, demo_config, sample

from actors.dashboard.records import encode_line
from actors.dashboard.server import DashboardServer

pytestmark = pytest.mark.processes

ITERATIONS = 3


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a 3-iteration demo launch that recorded to it."""
    tmp = tmp_path_factory.mktemp("demo")
    run_dir = tmp / "dashboard"
    config = demo_config(tmp, iterations=ITERATIONS, run_dir=run_dir)
    result = subprocess.run([sys.executable, "-m", "launcher.console.cli", str(config)], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)  # fmt: skip
    assert "teardown complete" in result.stderr, (result.stdout + result.stderr)[-3000:]
    # between "ready N/N" and the job: the dashboard's URL, construction progress
    # (launcher/launch/construction_progress.py)
    console = result.stderr.split("running the job")[0]
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/ \(run ", console), console[-3000:]
    assert re.search(r"pool trainer: constructed 2/2 in \d+\.\ds", console), console[-3000:]
    assert len(jsonl(run_dir / "steps.jsonl")) == ITERATIONS * 3, "one rollout and two trainer records per step"
    return run_dir


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    assert CHROMIUM.exists(), f"no {CHROMIUM}: install Debian's chromium (bash scripts/setup.sh does)"
    with Chromium.start(tmp_path_factory.mktemp("chromium-profile")) as chromium:
        yield chromium


@pytest.fixture
def served(demo_run: Path, tmp_path: Path) -> Iterator[DashboardServer]:
    """The dashboard on a copy of the demo's run directory (each test may add to its copy)."""
    server = DashboardServer(shutil.copytree(demo_run, tmp_path / "run")).start()
    yield server
    server.close()


def shows(text: str, value: float, digits: int) -> bool:
    """``text`` is ``value`` printed with ``digits`` decimals (JavaScript's rounding of halves may differ)."""
    return abs(float(text.rpartition(" ")[2]) - value) <= 0.5 * 10**-digits + 1e-12


def texts(browser: Chromium, selector: str) -> list[str]:
    return browser.evaluate(f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.textContent)")


def test_step_sample_and_token_views_show_the_recorded_run(
    browser: Chromium, served: DashboardServer, tmp_path: Path
) -> None:
    run = served.store.run_dir
    samples, steps = jsonl(run / "samples.jsonl"), jsonl(run / "steps.jsonl")
    browser.navigate(served.url)
    assert browser.wait_for(f"document.querySelectorAll('#steps tr.step-row').length === {ITERATIONS}")
    for row, step in enumerate(range(1, ITERATIONS + 1)):
        rewards = [s["reward"] for s in samples if s["step"] == step]
        losses = [r["loss"] for r in steps if r["step"] == step and r["source"] == "trainer"]
        assert shows(texts(browser, "#steps tr.step-row td.reward")[row], sum(rewards) / len(rewards), 3)
        assert shows(texts(browser, "#steps tr.step-row td.loss")[row], sum(losses) / len(losses), 4)
    assert browser.evaluate("document.querySelectorAll('#reward-chart circle.point').length") == ITERATIONS
    assert browser.evaluate("document.querySelectorAll('#loss-chart circle.point').length") == ITERATIONS
    # the trainer's drift metrics (actors/trainer/objectives.py), one point per step
    for key in ("train_rollout_logprob_abs_diff", "ess_ratio", "entropy"):
        assert browser.evaluate(f"document.querySelectorAll('#{key}-chart circle.point').length") == ITERATIONS, key
    browser.screenshot(tmp_path / "steps.png")

    browser.evaluate("document.querySelector('#steps tr.step-row[data-step=\"2\"]').click()")
    step2 = [s for s in samples if s["step"] == 2]
    browser.wait_for(f"document.querySelectorAll('#samples tr.sample-row').length === {len(step2)}")
    assert texts(browser, "#step-title") == ["Step 2"]
    shown = browser.evaluate("[...document.querySelectorAll('#samples tr.sample-row')].map(r => +r.dataset.reward)")
    assert shown == sorted((s["reward"] for s in step2), reverse=True)  # sorted by reward, best first
    browser.evaluate("document.getElementById('sort-reward').click()")
    browser.wait_for("document.getElementById('sort-reward').textContent.endsWith('▲')")
    shown = browser.evaluate("[...document.querySelectorAll('#samples tr.sample-row')].map(r => +r.dataset.reward)")
    assert shown == sorted(s["reward"] for s in step2)
    browser.screenshot(tmp_path / "step.png")

    best = max(step2, key=lambda s: (s["reward"], -s["sample_index"]))
    row = f"#samples tr.sample-row[data-sample='{best['sample_index']}']"
    browser.evaluate(f"document.querySelector({json.dumps(row)}).click()")
    browser.wait_for("!!document.getElementById('conversation')")
    assert texts(browser, "#prompt-text") == [best["prompt"]] and texts(browser, "#response-text") == [best["response"]]
    (chip,) = texts(browser, "#chip-reward")
    assert chip.startswith("reward: ") and shows(chip, best["reward"], 3)
    assert texts(browser, "#chip-weights") == [f"weights: {best['weight_version']}"]
    browser.screenshot(tmp_path / "conversation.png")

    browser.evaluate("document.getElementById('tab-tokens').click()")
    browser.wait_for("document.querySelectorAll('#tokens .tok').length > 0")
    tokens = browser.evaluate("[...document.querySelectorAll('#tokens .tok')].map(t => ({id: +t.dataset.tokenId, "
                              "lp: t.dataset.logprob, mask: +t.dataset.mask, text: t.textContent, "
                              "masked: t.classList.contains('masked'), colour: t.style.background}))")  # fmt: skip
    assert [t["id"] for t in tokens] == best["token_ids"]
    assert [t["text"] for t in tokens] == best["token_texts"]
    assert [t["mask"] for t in tokens] == best["loss_mask"] and [t["masked"] for t in tokens] == [
        not m for m in best["loss_mask"]]  # fmt: skip
    for token, logprob in zip(tokens, best["logprobs"], strict=True):
        if logprob is None:
            assert token["lp"] == "" and token["colour"] == ""
        else:
            assert math.isclose(float(token["lp"]), logprob, rel_tol=1e-9) and token["colour"].startswith("rgb")
    assert browser.evaluate("location.hash").endswith("/tokens")
    browser.screenshot(tmp_path / "tokens.png")
    assert all((tmp_path / f"{view}.png").stat().st_size > 5000 for view in ("steps", "step", "conversation", "tokens"))


def test_empty_missing_malformed_and_a_growing_run(browser: Chromium, served: DashboardServer) -> None:
    run = served.store.run_dir
    with (run / "steps.jsonl").open("ab") as handle:  # a step whose samples never came, then a torn line
        handle.write(encode_line({"step": 7, "source": "rollout", "rollout_s": 0.1}) + b"{not json\n")
    browser.navigate(served.url + "#/step/7")
    note = browser.wait_for("document.getElementById('step-note')?.textContent")
    assert note == "step 7 recorded no samples (its metrics are shown)"
    problems = browser.wait_for("!document.getElementById('problems').hidden && "
                                "document.getElementById('problems').textContent")  # fmt: skip
    assert "1 malformed line(s) skipped: steps.jsonl line" in problems and "not JSON" in problems

    for hash_, expected in [("#/step/12345", "step 12345 is not in this run (steps recorded: 1..7)"),
                            ("#/step/2/sample/100000/0", "step 2 has no sample 100000 (occurrence 0)"),
                            ("#/step/-3", "no such page #/step/-3: open the step list")]:  # fmt: skip
        browser.navigate(served.url + hash_)
        browser.wait_for(
            f"!document.getElementById('message').hidden && "
            f"document.getElementById('message').textContent.includes({json.dumps(expected)})"
        )

    turns = [{"role": "user", "content": "ls"}, {"role": "assistant", "content": "a.txt"},
             {"role": "tool", "content": "ok"}]  # fmt: skip
    with (run / "samples.jsonl").open("ab") as handle:  # a multi-turn sample: its conversation is its turns
        handle.write(encode_line(sample(7, 0, 0.5, occurrence=1, messages=turns)))
    browser.navigate(served.url + "#/step/7/sample/0/1")
    browser.wait_for("document.querySelectorAll('#conversation .turn').length === 3")
    assert texts(browser, "#conversation .turn .content") == ["ls", "a.txt", "ok"]
    assert texts(browser, "#sample-title")[0].endswith("sample 0 (occurrence 1)")

    browser.navigate(served.url)
    browser.wait_for(f"document.querySelectorAll('#steps tr.step-row').length === {ITERATIONS + 1}")
    line = encode_line(sample(8, 0, 0.875))
    with (run / "samples.jsonl").open("ab") as handle:  # the run writes on: first half a line, then the rest
        handle.write(line[:20])
    with (run / "samples.jsonl").open("ab") as handle:
        handle.write(line[20:])
    browser.wait_for("!!document.querySelector('#steps tr.step-row[data-step=\"8\"]')", deadline_s=10)
    assert texts(browser, "#steps tr.step-row[data-step='8'] td.reward") == ["0.875"]
