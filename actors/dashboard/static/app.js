// Routing (#/, #/step/N, #/step/N/sample/I/K[/tokens]), fetching /api/, live refresh every 2 s.
"use strict";

const view = document.getElementById("view");
const message = document.getElementById("message");
let shown = "";  // the JSON last rendered: a refresh that changes nothing keeps the page as it is
let sortOrder = "desc";
let sortKey = "reward";

async function api(path) {
  let response;
  try {
    response = await fetch(path, { cache: "no-store" });
  } catch (error) {
    return { ok: false, body: { error: `the dashboard server does not answer (${error})` } };
  }
  let body;
  try {
    body = await response.json();
  } catch (error) {
    body = { error: `HTTP ${response.status}: not JSON` };
  }
  return { ok: response.ok, body };
}

function say(text) {
  message.hidden = !text;
  message.textContent = text || "";
}

function render(key, parts) {
  if (key === shown) return;
  shown = key;
  view.replaceChildren(...parts);
}

function showProblems(run) {
  const box = document.getElementById("problems");
  const problems = run.problems || { count: 0, lines: [] };
  const dropped = Object.values((run.collector || {}).dropped || {}).reduce((a, b) => a + b, 0);
  const lines = problems.lines.slice(0, 5).map((p) => `${p.file} line ${p.line}: ${p.reason}`);
  const text = [];
  if (problems.count) text.push(`${problems.count} malformed line(s) skipped: ${lines.join("; ")}`);
  if (dropped) text.push(`${dropped} record(s) dropped by producers before they reached the collector`);
  box.hidden = text.length === 0;
  box.textContent = text.join(" · ");
  document.getElementById("run-name").textContent = run.run_dir || "";
}

async function route() {
  const hash = location.hash || "#/";
  const run = await api("/api/run");
  if (run.ok) showProblems(run.body);
  let match;
  if ((match = hash.match(/^#\/step\/(\d{1,9})\/sample\/(\d{1,9})\/(\d{1,9})(\/tokens)?$/))) {
    const [, step, index, occurrence, tokens] = match;
    const result = await api(`/api/steps/${step}/samples/${index}?occurrence=${occurrence}`);
    if (!result.ok) return fail(hash, result.body.error);
    say("");
    const base = `#/step/${step}/sample/${index}/${occurrence}`;
    render(hash, sampleView(result.body.sample, tokens ? "tokens" : "conversation",
      (tab) => { location.hash = tab === "tokens" ? base + "/tokens" : base; }));
  } else if ((match = hash.match(/^#\/step\/(\d{1,9})$/))) {
    const result = await api(`/api/steps/${match[1]}?sort=${sortKey}&order=${sortOrder}`);
    if (!result.ok) return fail(hash, result.body.error);
    say("");
    render(hash + JSON.stringify(result.body), stepView(result.body, (order) => {
      sortKey = "reward";
      sortOrder = order;
      route();
    }));
  } else if (hash === "#/" || hash === "#" || hash === "") {
    const result = await api("/api/steps");
    if (!result.ok) return fail(hash, result.body.error);
    say("");
    render(hash + JSON.stringify(result.body), stepsView(result.body.steps));
  } else {
    fail(hash, `no such page ${hash}: open the step list`);
  }
}

function fail(key, text) {
  say(text);
  render("error:" + key + text, [el("p", {}, el("a", { href: "#/" }, "← all steps"))]);
}

window.addEventListener("hashchange", () => { shown = ""; route(); });
route();
setInterval(() => {
  document.getElementById("live").textContent = "live: refreshed " + new Date().toLocaleTimeString();
  if (!(location.hash || "").includes("/sample/")) route();
}, 2000);
