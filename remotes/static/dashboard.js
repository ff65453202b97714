// The agent's dashboard: polls state.json, refreshes each remote's screen, draws the
// chart of episode returns. window.dashboard holds the latest state (for tests).
"use strict";
const POLL_MS = 500;
const FRAME_MS = 250; // per remote, and only once the previous image has loaded
const COLOURS = ["#4fc3f7", "#ffb74d", "#81c784", "#e57373", "#ba68c8", "#fff176",
  "#4db6ac", "#f06292", "#9575cd", "#aed581", "#ff8a65", "#90a4ae"];
const $ = (id) => document.getElementById(id);
// ?zoom=N shows screens at N times their size; by default small screens of few remotes
// are doubled.
const zoomParam = Number(new URLSearchParams(location.search).get("zoom")) || 0;
const dashboard = (window.dashboard = { state: null, frames: {}, polls: 0 });
const cards = [];

function colour(i) { return COLOURS[i % COLOURS.length]; }
function fmt(x, digits = 2) { return x === null || x === undefined ? "n/a" : Number(x).toFixed(digits); }

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function makeCard(i) {
  const card = el("div", { class: "card", id: `remote-${i}` });
  card.style.borderTopColor = colour(i);
  const img = el("img", { class: "screen", alt: `remote ${i}` });
  const name = el("div", { class: "name" });
  const meta = el("div", { class: "meta" });
  card.append(img, name, meta);
  $("remotes").append(card);
  const entry = { card, img, name, meta, shown: -1, loading: false };
  img.addEventListener("load", () => {
    entry.loading = false;
    const w = img.naturalWidth, count = dashboard.state ? dashboard.state.remotes.length : 1;
    const zoom = zoomParam || (w < 200 && count <= 4 ? 2 : 1);
    img.style.width = `${w * zoom}px`;
    img.style.height = `${img.naturalHeight * zoom}px`;
    dashboard.frames[i] = entry.shown;
    setTimeout(() => refreshFrame(i), FRAME_MS);
  });
  img.addEventListener("error", () => { entry.loading = false; setTimeout(() => refreshFrame(i), 1000); });
  return entry;
}

function refreshFrame(i) {
  const entry = cards[i];
  const state = dashboard.state;
  if (!entry || entry.loading || !state) return;
  if (document.hidden || state.frame === entry.shown) {
    setTimeout(() => refreshFrame(i), FRAME_MS);
    return;
  }
  entry.loading = true;
  entry.shown = state.frame;
  entry.img.src = `frame/${i}?n=${state.frame}`;
}

function render(state) {
  const fps = state.target_fps ? ` (${fmt(state.target_fps, 0)} target)` : "";
  $("title").textContent = state.title;
  $("summary").textContent = `${state.remotes.length} remote(s) · step ${state.steps} · ` +
    `${fmt(state.seconds, 0)} s${fps}`;
  state.remotes.forEach((r, i) => {
    if (!cards[i]) { cards[i] = makeCard(i); refreshFrame(i); }
    const c = cards[i];
    c.name.replaceChildren(`${i}: ${r.env_id || "?"} `, el("span", { class: `pill ${r.state}` }, r.state));
    c.meta.replaceChildren(
      el("div", {}, r.name),
      el("div", {}, `${fmt(r.fps, 1)} steps/s · ${r.steps} steps`),
      el("div", {}, `episode ${r.episodes + 1} (id ${r.episode_id ?? "?"}) · return ${fmt(r.episode_return)}`),
      el("div", {}, `mean of last 20 ${fmt(r.mean_return)}`),
    );
    if (r.error) c.meta.append(el("div", {}, r.error));
  });
  drawChart(state);
}

function drawChart(state) {
  const svg = $("chart");
  const W = 800, H = 220, left = 40, right = 8, top = 8, bottom = 18;
  const series = state.remotes.map((r) => r.returns);
  const points = series.flat();
  svg.replaceChildren();
  $("legend").replaceChildren(...state.remotes.map((r, i) => {
    const s = el("span", {}, `■ ${i}`);
    s.style.color = colour(i);
    return s;
  }));
  if (!points.length) {
    const t = document.createElementNS("http://www.w3.org/2000/svg", "text");
    t.setAttribute("x", left); t.setAttribute("y", H / 2);
    t.textContent = "no episode has ended yet";
    svg.append(t);
    return;
  }
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(x0 + 1, ...xs);
  let y0 = Math.min(0, ...ys), y1 = Math.max(0, ...ys);
  if (y1 === y0) y1 = y0 + 1;
  const X = (x) => left + ((x - x0) / (x1 - x0)) * (W - left - right);
  const Y = (y) => top + (1 - (y - y0) / (y1 - y0)) * (H - top - bottom);
  const ns = "http://www.w3.org/2000/svg";
  const add = (tag, attrs, text) => {
    const n = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n);
  };
  add("line", { x1: left, x2: W - right, y1: Y(0), y2: Y(0), stroke: "#555" });
  add("text", { x: 2, y: top + 10 }, fmt(y1, 1));
  add("text", { x: 2, y: H - bottom }, fmt(y0, 1));
  add("text", { x: left, y: H - 4 }, `episode ${x0}`);
  add("text", { x: W - right - 70, y: H - 4 }, `episode ${x1}`);
  series.forEach((returns, i) => {
    if (!returns.length) return;
    const d = returns.map((p, k) => `${k ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    add("path", { d, fill: "none", stroke: colour(i), "stroke-width": 1.5, "vector-effect": "non-scaling-stroke" });
    if (returns.length < 60) {
      returns.forEach((p) => add("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2, fill: colour(i) }));
    }
  });
}

async function poll() {
  try {
    const response = await fetch("state.json", { cache: "no-store" });
    if (response.ok) {
      dashboard.state = await response.json();
      dashboard.polls += 1;
      render(dashboard.state);
    }
  } catch (error) {
    $("summary").textContent = "the agent has stopped (no answer from the dashboard)";
  }
  setTimeout(poll, POLL_MS);
}
poll();
