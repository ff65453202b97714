// The viewer page: asks /viewer/session for the bridge's URL, then shows the remote's
// screen through noVNC. State for people (the header) and for tests (window.viewer).
import RFB from "../novnc/core/rfb.js";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
// Fit the screen to the window (a 160x210 game or a 1024x768 desktop alike) unless
// ?scale=1 asks for pixel for pixel; the header's button toggles.
const viewer = (window.viewer = {
  state: "starting", detail: "", rfb: null, session: null, fit: params.get("scale") !== "1",
});

function applyScale() {
  if (viewer.rfb) viewer.rfb.scaleViewport = viewer.fit;
  $("scale").textContent = viewer.fit ? "1:1" : "fit";
}

function show(state, detail = "") {
  viewer.state = state;
  viewer.detail = detail;
  $("state").textContent = state;
  $("state").className = "pill " + state;
  $("detail").textContent = detail;
  $("reconnect").hidden = !["disconnected", "failed"].includes(state);
}

// The page's URL may hold credentials (http://:password@host/...), which fetch() and
// WebSocket URLs refuse: resolve against the origin, which never has them.
const base = location.origin + location.pathname;

// ?password= (Universe's viewer URL) goes on to the JSON endpoints; Basic auth the
// browser sends by itself.
function withPassword(path) {
  const url = new URL(path, base);
  const password = params.get("password");
  if (password) url.searchParams.set("password", password);
  return url.href;
}

function describe(body) {
  const parts = [];
  if (body.env_state) parts.push(body.env_state);
  if (body.episode_id !== undefined) parts.push(`episode ${body.episode_id}`);
  if (body.fps) parts.push(`${body.fps} fps`);
  if (viewer.session && viewer.session.view_only) parts.push("view only");
  return parts.join(" · ");
}

async function connect() {
  show("connecting");
  let response;
  try {
    response = await fetch(withPassword("session"), { cache: "no-store", credentials: "same-origin" });
  } catch (error) {
    show("failed", `the remote does not answer (${error})`);
    return;
  }
  if (!response.ok) {
    show("failed", (await response.text()).trim());
    return;
  }
  const session = (viewer.session = await response.json());
  if (session.env_id) {
    $("title").textContent = session.env_id;
    document.title = `${session.env_id} · universe-remote`;
  }
  const url = new URL(session.websocket, base);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const quality = params.get("quality");
  if (quality === "lossless") url.searchParams.set("quality", "lossless");
  $("screen").replaceChildren();
  const rfb = (viewer.rfb = new RFB($("screen"), url.href, { shared: true }));
  rfb.viewOnly = session.view_only;
  applyScale();
  if (quality !== null && /^[0-9]$/.test(quality)) rfb.qualityLevel = Number(quality);
  rfb.addEventListener("connect", () => show("connected", describe(session)));
  rfb.addEventListener("disconnect", (e) =>
    show("disconnected", e.detail.clean ? "the remote closed the connection" : "the connection was lost"));
  rfb.addEventListener("securityfailure", (e) => show("failed", e.detail.reason || "refused"));
}

async function poll() {
  if (viewer.state !== "connected") return;
  try {
    const response = await fetch(withPassword("status"), { cache: "no-store", credentials: "same-origin" });
    if (response.ok && viewer.state === "connected") show("connected", describe(await response.json()));
  } catch (error) {
    // the disconnect event says what happened
  }
}

$("reconnect").addEventListener("click", connect);
$("scale").addEventListener("click", () => { viewer.fit = !viewer.fit; applyScale(); });
setInterval(poll, 2000);
connect();
