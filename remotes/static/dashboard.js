// The agent's dashboard: polls state.json, refreshes each remote's screen, draws the
// chart of episode returns. window.dashboard holds the latest state (for tests).
"use strict";
const POLL_MS = 500;
const FRAME_MS = 250; // per remote, and only once the previous image has loaded
const COLOURS = ["#4fc3f7", "#ffb74d", "#81c784", "#e57373", "#ba68c8", "#fff176",
  "#4db6ac", "#f06292", "#9575cd", "#aed581", "#ff8a65", "#90a4ae"];
const $ = (id) => document.getElementById(id);
// ?zoom=N shows screens at N times their size; by default the cards shrink or grow to fit
// the window below the chart (screens at most MAX_ZOOM times their size).
const zoomParam = Number(new URLSearchParams(location.search).get("zoom")) || 0;
const MAX_ZOOM = 2;
const MIN_SCREEN = 64; // px: a screen narrower than this is not worth showing
const MAX_TEXT = 260; // px: a card grows to fit its text up to this; past it, an ellipsis
const GAP = 10; // px between cards (the CSS gap)
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
    dashboard.frames[i] = entry.shown;
    layout();
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

// The width a card's text needs on one line (the widest card's; at most MAX_TEXT): the
// title with its badge, the address, the steps.
function textWidth() {
  let need = 0;
  for (const c of cards) {
    if (!c) continue;
    const label = c.name.querySelector(".label"), pill = c.name.querySelector(".pill");
    const title = (label ? label.scrollWidth : 0) + (pill ? pill.offsetWidth + 6 : 0);
    need = Math.max(need, title, ...[...c.meta.children].map((line) => line.scrollWidth));
  }
  return Math.min(Math.ceil(need) + 1, MAX_TEXT);
}

// The screen width that fits every card in the window below the chart: the widest over
// every column count whose cards are ``need`` wide or more (their text uncut), each
// card's text taking the height it measures; 0 when none leaves MIN_SCREEN.
function fitWidth(count, natural, aspect, extra, need) {
  const box = $("remotes");
  const width = box.clientWidth;
  const height = window.innerHeight - box.getBoundingClientRect().top - window.scrollY - GAP;
  let best = 0;
  for (let cols = 1; cols <= count; cols++) {
    const rows = Math.ceil(count / cols);
    const byWidth = (width - (cols - 1) * GAP) / cols - extra.x;
    if (byWidth < need) break; // more columns would cut the text
    const byHeight = ((height - (rows - 1) * GAP) / rows - extra.y) / aspect;
    best = Math.max(best, Math.min(byWidth, byHeight));
  }
  return best < MIN_SCREEN ? 0 : Math.floor(Math.min(best, natural * MAX_ZOOM));
}

function layout() {
  const shown = cards.find((c) => c && c.img.naturalWidth);
  if (!shown) return;
  const w = shown.img.naturalWidth, h = shown.img.naturalHeight;
  // Cards as wide as their text, unless then they cannot all fit (16 at 1280x800): then
  // as narrow as the screens, the text cut with an ellipsis (its tooltip has it all).
  let need = textWidth();
  const apply = (width) => {
    for (const c of cards) {
      if (!c) continue;
      c.img.style.width = `${width}px`;
      c.img.style.height = `${Math.round((width * h) / w)}px`;
      c.card.style.width = `${Math.max(width, need)}px`; // never narrower than its text
    }
    dashboard.screenWidth = width;
  };
  if (zoomParam) { apply(w * zoomParam); return; }
  // A card's text takes its height at each width: measure, fit, and again until it holds.
  let width = dashboard.screenWidth || w;
  for (let round = 0; round < 4; round++) {
    apply(width);
    const card = shown.card;
    const extra = { x: card.offsetWidth - card.clientWidth + 2 + (card.clientWidth - Math.max(width, need)),
      y: card.offsetHeight - shown.img.offsetHeight + 2 };
    let fitted = fitWidth(cards.length, w, h / w, extra, need);
    if (!fitted && need) {
      need = 0;
      fitted = fitWidth(cards.length, w, h / w, extra, 0);
    }
    fitted = fitted || MIN_SCREEN;
    if (fitted === width) break;
    width = fitted;
  }
  apply(width);
}
window.addEventListener("resize", layout);

function render(state) {
  const fps = state.target_fps ? ` (${fmt(state.target_fps, 0)} target)` : "";
  $("title").textContent = state.title;
  $("summary").textContent = `${state.remotes.length} remote(s) · step ${state.steps} · ` +
    `${fmt(state.seconds, 0)} s${fps}`;
  state.remotes.forEach((r, i) => {
    if (!cards[i]) { cards[i] = makeCard(i); refreshFrame(i); }
    const c = cards[i];
    const label = `${i}: ${r.env_id || "?"}`;
    c.name.replaceChildren(el("span", { class: "label", title: label }, label),
      el("span", { class: `pill ${r.state}` }, r.state));
    const line = (text, attrs = {}) => el("div", { title: text, ...attrs }, text);
    const episode = line(`episode ${r.episode} · return ${fmt(r.episode_return)}`, { class: "episode" });
    episode.title = `the remote's own episode id: ${r.episode_id ?? "?"}`;
    c.meta.replaceChildren(
      line(r.name, { class: "address" }),
      line(`${fmt(r.fps, 1)} steps/s · ${r.steps} steps`, { class: "steps" }),
      episode,
      line(`mean of last 20 ${fmt(r.mean_return)}`),
    );
    if (r.error) c.meta.append(line(r.error, { class: "error" }));
  });
  layout(); // the text may need other widths now (a longer state, more digits)
  drawChart(state);
}

// About `count` round values from lo to hi (1, 2 or 5 times a power of ten apart).
function ticks(lo, hi, count, integers = false) {
  const raw = (hi - lo) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw || 1));
  let step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
  if (integers) step = Math.max(1, Math.round(step));
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toFixed(10)));
  return out;
}

function drawChart(state) {
  const svg = $("chart");
  // Drawn in the SVG's own pixels, so text is never stretched.
  const W = svg.clientWidth || 800, H = svg.clientHeight || 190, left = 44, right = 8, top = 8, bottom = 30;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
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
    return n;
  };
  // One y axis: round ticks with grid lines (0 among them), titled once.
  for (const v of ticks(y0, y1, 4)) {
    add("line", { x1: left, x2: W - right, y1: Y(v), y2: Y(v), stroke: v === 0 ? "#666" : "#333" });
    add("text", { class: "ytick", x: left - 4, y: Y(v) + 4, "text-anchor": "end" }, String(v));
  }
  add("text", { class: "axis", x: 10, y: top + (H - top - bottom) / 2, "text-anchor": "middle",
    transform: `rotate(-90 10 ${top + (H - top - bottom) / 2})` }, "return");
  // One x axis: episodes numbered from 1, as on the cards.
  for (const v of ticks(x0, x1, 8, true)) {
    add("text", { class: "xtick", x: X(v), y: H - bottom + 14, "text-anchor": "middle" }, String(v));
  }
  add("text", { class: "axis", x: W - right, y: H - 2, "text-anchor": "end" }, "episode");
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
