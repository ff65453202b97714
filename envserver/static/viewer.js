// The viewer page: asks /viewer/session for the bridge's URL, then shows the remote's
// screen through noVNC. State for people (the header) and for tests (window.viewer).
import RFB from "../novnc/core/rfb.js";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
// How the screen is scaled: "sharp" (the default) shows the largest whole multiple of
// the screen that fits the window, each remote pixel a square of pixels (nearest
// neighbour: a 160x210 game stays crisp); a screen larger than the window is fitted
// smoothly instead. "smooth" fits the window exactly, smoothed; "1" is pixel for pixel.
// ?scale=sharp|smooth|1 picks one (Universe's ?scale=fit is smooth); the button cycles.
const MODES = ["sharp", "smooth", "1"];
const LABELS = { sharp: "sharp", smooth: "smooth", 1: "1:1" };
const asked = params.get("scale");
const viewer = (window.viewer = {
  state: "starting", detail: "", rfb: null, session: null, factor: null,
  scale: asked === "1" ? "1" : asked === "smooth" || asked === "fit" ? "smooth" : "sharp",
});

function applyScale() {
  const screen = $("screen"), frame = $("frame");
  const session = viewer.session || {};
  const canvas = screen.querySelector("canvas"); // its size is the remote's screen's
  const w = Number(session.width) || (canvas ? canvas.width : 0);
  const h = Number(session.height) || (canvas ? canvas.height : 0);
  viewer.factor = null;
  let width = "", height = "";
  if (viewer.scale === "sharp" && w > 0 && h > 0) {
    const k = Math.floor(Math.min(frame.clientWidth / w, frame.clientHeight / h));
    if (k >= 1) {
      viewer.factor = k;
      width = `${k * w}px`;
      height = `${k * h}px`;
    }
  }
  // noVNC fits its canvas to #screen: sized to k times the screen, that is exactly k.
  screen.style.width = width;
  screen.style.height = height;
  screen.classList.toggle("sharp", viewer.factor !== null);
  if (viewer.rfb) viewer.rfb.scaleViewport = viewer.scale !== "1";
  const next = MODES[(MODES.indexOf(viewer.scale) + 1) % MODES.length];
  $("scale").textContent = LABELS[next];
}
window.addEventListener("resize", applyScale);

function show(state, detail = "") {
  viewer.state = state;
  viewer.detail = detail;
  $("state").textContent = state;
  const playing = state === "connected" && viewer.session && !viewer.session.view_only;
  $("state").className = "pill " + state + (playing ? " playing" : "");
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
  const session = viewer.session;
  if (session && session.view_only) parts.push("view only");
  else if (session) parts.push(`you play${session.player ? ` player ${session.player}` : ""}: click the screen, then keys and mouse`);
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
  rfb.addEventListener("connect", () => {
    show("connected", describe(session));
    applyScale();
    if (!session.view_only) rfb.focus();
  });
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
$("scale").addEventListener("click", () => {
  viewer.scale = MODES[(MODES.indexOf(viewer.scale) + 1) % MODES.length];
  applyScale();
});
setInterval(poll, 2000);
connect();
