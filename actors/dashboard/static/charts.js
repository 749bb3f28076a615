// Line charts drawn as inline SVG (no library): lineChart(title, points, options) -> <svg>.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
  return element;
}

function niceNumber(value) {
  if (value === null || value === undefined) return "—";
  const magnitude = Math.abs(value);
  return magnitude >= 1000 ? value.toFixed(0) : magnitude >= 1 ? value.toFixed(2) : value.toFixed(3);
}

// points: [{x, y}] with y possibly null (skipped); band: optional [{x, low, high}] drawn behind the line.
function lineChart(title, points, { color = "#1f77b4", band = null, id = "", width = 460, height = 200 } = {}) {
  const svg = svgElement("svg", { width, height, class: "chart", id, "data-points": points.length });
  const pad = { left: 48, right: 12, top: 22, bottom: 26 };
  const title_ = svgElement("text", { x: pad.left, y: 14, class: "title" });
  title_.textContent = title;
  svg.appendChild(title_);
  const valid = points.filter((p) => p.y !== null && Number.isFinite(p.y));
  if (valid.length === 0) {
    const empty = svgElement("text", { x: width / 2, y: height / 2, "text-anchor": "middle" });
    empty.textContent = "no data yet";
    svg.appendChild(empty);
    return svg;
  }
  const ys = valid.map((p) => p.y).concat(band ? band.flatMap((b) => [b.low, b.high]).filter(Number.isFinite) : []);
  const xs = valid.map((p) => p.x);
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y0 === y1) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const [x0, x1] = [Math.min(...xs), Math.max(...xs) === Math.min(...xs) ? Math.min(...xs) + 1 : Math.max(...xs)];
  const sx = (x) => pad.left + ((x - x0) / (x1 - x0)) * (width - pad.left - pad.right);
  const sy = (y) => height - pad.bottom - ((y - y0) / (y1 - y0)) * (height - pad.top - pad.bottom);
  svg.appendChild(svgElement("line", { x1: pad.left, y1: height - pad.bottom, x2: width - pad.right,
    y2: height - pad.bottom, stroke: "#b8c2cf" }));
  svg.appendChild(svgElement("line", { x1: pad.left, y1: pad.top, x2: pad.left, y2: height - pad.bottom,
    stroke: "#b8c2cf" }));
  for (const [value, y] of [[y0, sy(y0)], [y1, sy(y1)], [(y0 + y1) / 2, sy((y0 + y1) / 2)]]) {
    const label = svgElement("text", { x: pad.left - 4, y: y + 4, "text-anchor": "end" });
    label.textContent = niceNumber(value);
    svg.appendChild(label);
  }
  for (const [x, anchor] of [[x0, "start"], [x1, "end"]]) {
    const label = svgElement("text", { x: sx(x), y: height - 8, "text-anchor": anchor });
    label.textContent = "step " + x;
    svg.appendChild(label);
  }
  if (band && band.length > 1) {
    const upper = band.map((b) => `${sx(b.x)},${sy(b.high)}`);
    const lower = band.slice().reverse().map((b) => `${sx(b.x)},${sy(b.low)}`);
    svg.appendChild(svgElement("polygon", { points: upper.concat(lower).join(" "), fill: color, opacity: 0.15 }));
  }
  svg.appendChild(svgElement("polyline", { points: valid.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" "),
    fill: "none", stroke: color, "stroke-width": 2 }));
  for (const p of valid) {
    const dot = svgElement("circle", { cx: sx(p.x), cy: sy(p.y), r: 3, fill: color, class: "point",
      "data-x": p.x, "data-y": p.y });
    const tip = svgElement("title");
    tip.textContent = `step ${p.x}: ${niceNumber(p.y)}`;
    dot.appendChild(tip);
    svg.appendChild(dot);
  }
  return svg;
}
