// The status page: polls the node's read-only JSON endpoints with the session cookie and
// renders them. Everything a peer or a user named (channels, tables, peer ids, addresses) goes
// into the page as text (textContent), never as markup.
"use strict";

const HEADERS = { "X-Syncnode-UI": "1", "Accept": "application/json" };
let refreshS = 2;
let timer = null;
const previous = { at: 0, channels: new Map(), events: null };

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    if (cell instanceof Node) { const td = el("td"); td.appendChild(cell); tr.appendChild(td); }
    else if (Array.isArray(cell)) { tr.appendChild(el("td", cell[0], cell[1])); }
    else tr.appendChild(el("td", cell));
  }
  return tr;
}

function fill(tableId, rows, emptyText, columns) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows);
  if (!rows.length) {
    const td = el("td", emptyText, "empty");
    td.colSpan = columns;
    const tr = document.createElement("tr");
    tr.appendChild(td);
    body.appendChild(tr);
  }
}

function int(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }

// A Lamport time as the API and the CLI print it: the raw number, no separators.
function raw(n) { return n === null || n === undefined ? "–" : String(n); }

// Epoch milliseconds in UTC ISO, to the second, as the CLI prints times: 2026-11-26T07:40:12Z.
function iso(ms) { return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z"); }

function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  let s = Math.max(0, Math.round(seconds));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

// Epoch seconds or milliseconds (or an ISO string) as "12s ago".
function ago(value) {
  if (value === null || value === undefined || value === "") return "–";
  let ms;
  if (typeof value === "number") ms = value > 1e12 ? value : value * 1000;
  else { ms = Date.parse(value); if (isNaN(ms)) return String(value); }
  return `${duration((Date.now() - ms) / 1000)} ago`;
}

// A cell of ago(value) whose tooltip is the time itself, in UTC.
function agoCell(value) {
  const cell = el("span", ago(value));
  if (typeof value === "number") cell.title = iso(value > 1e12 ? value : value * 1000);
  return cell;
}

// A peer's sync (/v1/peers): "in sync", "behind ~N", or "–" before the first Recon round.
function peerSync(sync) {
  if (!sync) return ["–", "muted"];
  return sync.behind ? [`behind ~${int(sync.behind)}`, "warn"] : ["in sync", "good"];
}

function short(id) { return id && id.length > 16 ? `${id.slice(0, 8)}…${id.slice(-6)}` : (id || "–"); }

function first(obj, names) {
  for (const name of names) if (obj && obj[name] !== undefined && obj[name] !== null) return obj[name];
  return null;
}

async function get(path) {
  const response = await fetch(path, { headers: HEADERS, credentials: "same-origin", cache: "no-store" });
  if (response.status === 401 || response.status === 403) {
    let why = "";
    try { why = (await response.json()).error || ""; } catch (e) { /* not JSON */ }
    throw Object.assign(new Error(why || `HTTP ${response.status}`), { signedOut: true });
  }
  if (!response.ok) throw Object.assign(new Error(`HTTP ${response.status}`), { status: response.status });
  return response.json();
}

function renderStatus(status) {
  $("peer-id").textContent = status.peer_id;
  $("node-facts").textContent = `v${status.version} · network ${status.network_id} · ${status.database}`;
  $("t-events").textContent = int(status.events);
  $("t-uptime").textContent = duration(status.uptime_s);
  const now = Date.now();
  if (previous.events !== null && previous.at) {
    const rate = (status.events - previous.events) / ((now - previous.at) / 1000);
    $("t-rate").textContent = rate >= 0 ? rate.toFixed(1) : "–";
  }
  previous.events = status.events;
  renderSync(status.sync);
}

// How far behind its peers the node is (/v1/status "sync").
function renderSync(sync) {
  const value = $("t-sync");
  const detail = $("t-sync-detail");
  if (!sync) { value.textContent = "–"; value.className = "tile-value"; detail.textContent = ""; return; }
  if (sync.state === "in_sync") {
    value.textContent = "in sync";
    const n = Object.keys(sync.peers || {}).length;
    detail.textContent = `with ${n} peer${n === 1 ? "" : "s"}`;
  } else if (sync.state === "behind") {
    value.textContent = `behind ~${int(sync.behind)}`;
    const parts = [];
    if (sync.rate_per_s) parts.push(`catching up at ${int(Math.round(sync.rate_per_s))}/s`);
    if (sync.eta_s !== null && sync.eta_s !== undefined) parts.push(`about ${duration(sync.eta_s)} left`);
    detail.textContent = parts.join(" · ") || "events peers hold that this node lacks";
  } else {
    value.textContent = "unknown";
    detail.textContent = (sync.text || "").replace(/^unknown \((.*)\)$/, "$1");
  }
  value.className = `tile-value ${{ in_sync: "good", behind: "warn" }[sync.state] || "muted"}`;
  value.dataset.state = sync.state;
}

function renderChannels(data, dt) {
  const rows = data.channels.map((ch) => {
    const before = previous.channels.get(ch.channel);
    const rate = before !== undefined && dt > 0 ? ((ch.delivered - before) / dt).toFixed(1) : "–";
    previous.channels.set(ch.channel, ch.delivered);
    const tr = row([[ch.channel, "mono"], [int(ch.delivered), "num"], [rate, "num"],
      [int(ch.waiting), "num"], [int(ch.missing), "num"], [int(ch.unacknowledged), "num"],
      [raw(ch.lamport), "num mono"]]);
    tr.dataset.channel = ch.channel;
    if (before !== undefined && before !== ch.delivered) tr.classList.add("flash");
    return tr;
  });
  fill("channels", rows, "no channels", 7);
}

function renderPeers(data) {
  const peers = data.connected || [];
  $("t-peers").textContent = int(peers.length);
  const rows = peers.map((p) => {
    // path, RTT and last Recon are rendered when the node reports them (newer nodes do).
    const rtt = first(p, ["rtt_ms"]) ?? (first(p, ["rtt_s"]) !== null ? first(p, ["rtt_s"]) * 1000 : null);
    let recon = first(p, ["last_recon", "last_recon_at"]);
    if (recon && typeof recon === "object") {
      const at = first(recon, ["at", "finished_at", "ended_at", "time"]);
      const outcome = first(recon, ["outcome", "result", "status"]);
      recon = [at !== null ? ago(at) : null, outcome].filter((x) => x !== null).join(" · ") || "–";
    } else recon = ago(recon);
    const peer = el("span", short(p.peer_id), "mono");
    peer.title = p.peer_id;
    const tr = row([peer, [p.address || "–", "mono small"], first(p, ["path", "transport"]) ?? "–",
      p.direction || "–", agoCell(p.connected_since),
      [rtt === null ? "–" : `${Number(rtt).toFixed(1)} ms`, "num"],
      agoCell(first(p, ["last_seen", "last_seen_at"])), recon, peerSync(p.sync)]);
    tr.dataset.peer = p.peer_id;
    return tr;
  });
  fill("peers", rows, "no peer connected", 9);
  const known = data.known || [];
  const facts = [];
  if (known.length) facts.push(`${known.length} known peer address${known.length === 1 ? "" : "es"} (redialled when disconnected)`);
  if (typeof data.address_book === "number") facts.push(`${int(data.address_book)} in the address book`);
  $("peers-known").textContent = facts.join(" · ");
}

function renderSnapshots(data) {
  const box = $("snapshots");
  if (data === null) { box.replaceChildren(el("p", "Snapshots are not enabled on this node ([spark] enabled = false).", "empty")); return; }
  const parts = [];
  const state = el("span", data.state, `pill ${data.state === "running" ? "warn" : "good"}`);
  const list = el("dl");
  const add = (name, value) => { list.appendChild(el("dt", name)); const dd = el("dd"); if (value instanceof Node) dd.appendChild(value); else dd.textContent = value; list.appendChild(dd); };
  add("State", state);
  add("Runs", `${int(data.runs)} (${int(data.failures)} failed)`);
  add("New events", int(data.new_events));
  if (data.progress) {
    const p = data.progress;
    add("Progress", `${p.job}: ${p.phase} ${int(p.done)}/${int(p.total)}`);
    const bar = el("div", null, "bar"); const fillBar = el("div"); fillBar.style.width = `${Math.round(100 * (p.fraction || 0))}%`; bar.appendChild(fillBar);
    parts.push(bar);
  }
  const last = data.last;
  if (last) {
    add("Last result", el("span", last.ok ? "ok" : "failed", `pill ${last.ok ? "good" : "bad"}`));
    add("Last run", `${ago(last.finished_at)} · ${last.seconds} s · ${last.reason}`);
  } else add("Last result", "no run yet");
  box.replaceChildren(list, ...parts);
}

function renderTables(data) {
  const rows = Object.entries(data.tables).map(([name, t]) => {
    const owner = el("span", short(t.owner), "mono"); owner.title = t.owner;
    const columns = Object.entries(t.columns).map(([c, type]) => `${c} ${type}`).join(", ");
    const tr = row([[name, "mono"], [int(t.rows), "num"], [int(t.versions), "num"], owner, [columns, "small muted"]]);
    tr.dataset.table = name;
    return tr;
  });
  fill("tables", rows, "no replicated table declared", 5);
}

function setLive(ok, text) {
  $("live-dot").className = `dot ${ok ? "ok" : "bad"}`;
  $("live-text").textContent = text;
}

async function refresh() {
  const now = Date.now();
  const dt = previous.at ? (now - previous.at) / 1000 : 0;
  let wait = refreshS * 1000;
  try {
    const [session, status, channels, peers, db] = await Promise.all([
      get("/v1/ui/session"), get("/v1/status"), get("/v1/channels"), get("/v1/peers"),
      get("/v1/db"),
    ]);
    let snapshots = null;
    try { snapshots = await get("/v1/snapshots/status"); } catch (e) { if (e.signedOut) throw e; }
    $("signed-out").hidden = true;
    $("board").hidden = false;
    renderStatus(status);
    renderChannels(channels, dt);
    renderPeers(peers);
    renderSnapshots(snapshots);
    renderTables(db);
    previous.at = now;
    if (session.refresh_s && session.refresh_s !== refreshS) { refreshS = session.refresh_s; }
    $("refresh").textContent = String(refreshS);
    $("session-left").textContent = session.expires_in_s !== null ? `signed in for ${duration(session.expires_in_s)} more` : "";
    setLive(true, `live · ${iso(now)}`);
    document.body.dataset.updated = String(now);
  } catch (e) {
    if (e.signedOut) {
      $("board").hidden = true;
      $("signed-out").hidden = false;
      $("signed-out-why").textContent = e.message;
      setLive(false, "signed out");
    } else if (e.status === 429) {
      setLive(false, "too many requests (ui.requests_per_s): slowing down");
      wait *= 3;  // other tabs share the session's rate
    }
    else setLive(false, `node not answering (${e.message})`);
  }
  timer = setTimeout(refresh, wait);
}

document.addEventListener("DOMContentLoaded", refresh);
