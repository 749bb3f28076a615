// The three views: the step list, one step's samples, one sample (conversation and tokens).
"use strict";

function el(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (key === "onclick") element.addEventListener("click", value);
    else if (value !== undefined && value !== null) element.setAttribute(key, String(value));
  }
  for (const child of children) element.append(child instanceof Node ? child : String(child ?? ""));
  return element;
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "—";
  return typeof value === "number" ? value.toFixed(digits) : String(value);
}

function cpuText(byHost) {
  return Object.entries(byHost || {}).map(([host, cpu]) => `${host} ${fmt(cpu, 0)}%`).join(", ") || "—";
}

// The trainer's drift metrics (actors/trainer/objectives.py): charted once a step reports them.
const DRIFT_CHARTS = [
  ["train_rollout_logprob_abs_diff", "|logp train - logp rollout| (mismatch)", "#9467bd"],
  ["mismatch_k3_kl", "k3 KL(rollout || train)", "#8c564b"],
  ["ess_ratio", "effective sample size ratio", "#2ca02c"],
  ["tis_clipfrac", "TIS clip fraction", "#ff7f0e"],
  ["pg_clipfrac", "PPO clip fraction", "#e377c2"],
  ["entropy", "entropy", "#17becf"],
  ["ref_kl", "KL to the reference model", "#7f7f7f"],
  ["grad_norm", "grad norm", "#bcbd22"],
];

function driftCharts(steps, points) {
  return DRIFT_CHARTS.filter(([key]) => steps.some((s) => typeof s[key] === "number"))
    .map(([key, title, color]) => lineChart(title, points(key).filter((p) => typeof p.y === "number"),
      { color, id: `${key}-chart` }));
}

function stepsView(steps) {
  const points = (key) => steps.map((s) => ({ x: s.step, y: s[key] }));
  const band = steps.filter((s) => s.reward_min !== null).map((s) => ({ x: s.step, low: s.reward_min,
    high: s.reward_max }));
  const charts = el("div", { class: "charts" },
    lineChart("mean reward (band: min..max)", points("reward_mean"), { band, id: "reward-chart" }),
    lineChart("policy-gradient loss", points("loss"), { color: "#d62728", id: "loss-chart" }),
    ...driftCharts(steps, points));
  const head = el("tr", {}, ...["step", "samples", "reward mean", "reward std", "loss", "rollout s", "train s",
    "gen tok/s", "CPU per host"].map((h) => el("th", {}, h)));
  const rows = steps.map((s) => el("tr", { class: "link step-row", "data-step": s.step,
    onclick: () => { location.hash = `#/step/${s.step}`; } },
    el("td", {}, s.step), el("td", {}, s.samples), el("td", { class: "reward" }, fmt(s.reward_mean)),
    el("td", {}, fmt(s.reward_std)), el("td", { class: "loss" }, fmt(s.loss, 4)), el("td", {}, fmt(s.rollout_s, 2)),
    el("td", {}, fmt(s.train_s, 2)), el("td", {}, fmt(s.tokens_per_s, 0)), el("td", {}, cpuText(s.cpu_percent_by_host))));
  const note = steps.length ? "" : el("p", { id: "empty-run" }, "No step recorded yet: the page updates as the run writes.");
  return [el("h2", {}, `Steps (${steps.length})`), charts, note, el("table", { id: "steps" }, head, ...rows)];
}

function stepView(step, onSort) {
  const arrow = step.sort === "reward" ? (step.order === "desc" ? " ▼" : " ▲") : "";
  const rewardHeader = el("th", { class: "sortable", id: "sort-reward",
    onclick: () => onSort(step.sort === "reward" && step.order === "desc" ? "asc" : "desc") }, "reward" + arrow);
  const head = el("tr", {}, el("th", {}, "sample"), el("th", {}, "occ."), el("th", {}, "prompt"), rewardHeader,
    el("th", { class: "text" }, "response"), el("th", {}, "resp. tokens"), el("th", {}, "weights"),
    el("th", {}, "latency s"), el("th", {}, "finish"));
  const rows = step.sample_list.map((s) => el("tr", { class: "link sample-row", "data-sample": s.sample_index,
    "data-occurrence": s.occurrence, "data-reward": s.reward,
    onclick: () => { location.hash = `#/step/${step.step}/sample/${s.sample_index}/${s.occurrence}`; } },
    el("td", {}, s.sample_index), el("td", {}, s.occurrence), el("td", {}, s.prompt_index ?? "—"),
    el("td", { class: "reward" }, fmt(s.reward)), el("td", { class: "text" }, s.response),
    el("td", {}, s.response_tokens), el("td", {}, s.weight_version ?? "—"), el("td", {}, fmt(s.latency_s, 3)),
    el("td", {}, s.finish_reason ?? "—")));
  const summary = el("p", { id: "step-summary" }, `${step.samples} samples · reward mean ${fmt(step.reward_mean)} · `
    + `loss ${fmt(step.loss, 4)} · rollout ${fmt(step.rollout_s, 2)} s · train ${fmt(step.train_s, 2)} s · `
    + `${fmt(step.tokens_per_s, 0)} gen tok/s · CPU ${cpuText(step.cpu_percent_by_host)}`);
  const parts = [el("h2", { id: "step-title" }, `Step ${step.step}`), summary];
  if (step.note) parts.push(el("p", { id: "step-note", class: "note" }, step.note));
  parts.push(el("table", { id: "samples" }, head, ...rows));
  return parts;
}

function tokenColor(logprob) {
  const p = Math.exp(Math.max(-20, logprob));
  return `hsl(${Math.round(120 * p)}, 70%, 78%)`;
}

function tokensPanel(sample) {
  const ids = sample.token_ids || [];
  const texts = sample.token_texts || [];
  const logprobs = sample.logprobs || [];
  const mask = sample.loss_mask || [];
  const box = el("div", { class: "tokens", id: "tokens" });
  ids.forEach((id, i) => {
    const lp = logprobs[i];
    const masked = !mask[i];
    const span = el("span", { class: "tok" + (masked ? " masked" : ""), "data-index": i, "data-token-id": id,
      "data-logprob": lp ?? "", "data-mask": masked ? 0 : 1,
      title: `#${i} id ${id}` + (lp === null || lp === undefined ? "" : ` logprob ${lp.toFixed(4)} p ${Math.exp(lp).toFixed(3)}`)
        + (masked ? " (masked: no loss)" : "") }, texts[i] || `<${id}>`);
    if (!masked && typeof lp === "number") span.style.background = tokenColor(lp);
    box.append(span);
  });
  const legend = el("div", { class: "legend" }, "colour: the token's probability under the sampling policy, ",
    el("span", { class: "tok", id: "legend-low" }, "low"), " → ", el("span", { class: "tok", id: "legend-high" }, "high"),
    "; ", el("span", { class: "tok masked" }, "struck grey"), ": masked (prompt, no loss)");
  legend.querySelector("#legend-low").style.background = tokenColor(-5);
  legend.querySelector("#legend-high").style.background = tokenColor(0);
  return el("div", { id: "token-view" }, legend, box);
}

function conversationPanel(sample) {
  if (Array.isArray(sample.messages) && sample.messages.length) {  // a multi-turn sample: its own turns
    return el("div", { id: "conversation" }, ...sample.messages.map((m) => el("div",
      { class: "turn " + (m.role === "assistant" ? "assistant" : "user") }, el("div", { class: "role" }, m.role ?? "?"),
      el("div", { class: "content" }, typeof m.content === "string" ? m.content : JSON.stringify(m.content)))));
  }
  return el("div", { id: "conversation" },
    el("div", { class: "turn user" }, el("div", { class: "role" }, "prompt"), el("div", { class: "content", id: "prompt-text" }, sample.prompt ?? "")),
    el("div", { class: "turn assistant" }, el("div", { class: "role" }, "response"),
      el("div", { class: "content", id: "response-text" }, sample.response ?? "")));
}

function sampleView(sample, tab, onTab) {
  const chips = el("div", {}, ...[["reward", fmt(sample.reward)], ["advantage", fmt(sample.advantage)],
    ["weights", sample.weight_version ?? "—"], ["latency", fmt(sample.latency_s, 3) + " s"],
    ["finish", sample.finish_reason ?? "—"],
    sample.engine ? ["engine", sample.engine] : ["router", sample.router ?? "—"]]
    .map(([k, v]) => el("span", { class: "chip", id: `chip-${k}` }, `${k}: ${v}`)));
  const tabs = el("div", { class: "tabs" },
    el("button", { id: "tab-conversation", class: tab === "conversation" ? "active" : "", onclick: () => onTab("conversation") }, "Conversation"),
    el("button", { id: "tab-tokens", class: tab === "tokens" ? "active" : "", onclick: () => onTab("tokens") }, "Tokens"));
  const title = `Step ${sample.step} · sample ${sample.sample_index}` + (sample.occurrence ? ` (occurrence ${sample.occurrence})` : "");
  return [el("h2", { id: "sample-title" }, el("a", { href: `#/step/${sample.step}` }, `Step ${sample.step}`), " › ", title),
    chips, tabs, tab === "tokens" ? tokensPanel(sample) : conversationPanel(sample)];
}
