"use strict";
// Everything shown comes from replicators and binlogs (table names, errors): it is only ever
// put into the page as text nodes, never as HTML.
const HISTORY = 90;  // lag samples kept per channel (3 minutes)
const history = {};  // "dc/channel" -> [{t, lag, txns}]
let token = sessionStorage.getItem("drc-token") || "";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function pairs(rows) {
  const dl = el("dl");
  for (const [k, v] of rows) dl.append(el("dt", {}, k), el("dd", {}, v === null || v === undefined ? "-" : v));
  return dl;
}
async function get(path) {
  const headers = token ? {Authorization: "Bearer " + token} : {};
  const response = await fetch(path, {headers});
  if (response.status === 401) throw Object.assign(new Error("token needed"), {auth: true});
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}
function utc(date) { return date.toISOString().replace("T", " ").slice(0, 19) + " UTC"; }
function seconds(value) { return value === null || value === undefined ? "-" : Number(value).toFixed(1) + " s"; }
function channelLag(ch) { return ch.lag_seconds ?? (ch.lag && ch.lag.seconds) ?? null; }
function stateClass(state) {
  const s = String(state || "").toLowerCase();
  return s === "running" ? "ok" : (s === "stopped" || s === "unreachable" || s === "failed") ? "bad" : "warn";
}
function spark(points) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 120 28");
  const values = points.map(p => p.lag).filter(v => v !== null);
  const max = Math.max(1, ...values);
  if (values.length > 1) {
    const line = document.createElementNS(svg.namespaceURI, "polyline");
    line.setAttribute("points", values.map((v, i) =>
      (i * 120 / (values.length - 1)).toFixed(1) + "," + (27 - v / max * 26).toFixed(1)).join(" "));
    svg.append(line);
  }
  svg.append(Object.assign(document.createElementNS(svg.namespaceURI, "title"), {textContent: "lag, last 3 minutes"}));
  // The scale: the chart's top is the highest lag shown (at least 1 s), its bottom 0 s.
  return el("span", {class: "chart"}, svg, el("span", {class: "muted scale"}, " 0\u2013" + max.toFixed(1) + " s, 3 min"));
}
function stoppedDetails(name, stopped) {
  const box = el("div", {class: "stopped"});
  box.append(el("div", {class: "error"}, "stopped at " + (stopped.scn || "-") + ": " + stopped.error));
  const tables = Object.entries(stopped.tables || {}).map(([t, n]) => t + " (" + n + ")").join(", ");
  if (tables) box.append(el("div", {class: "muted"}, "tables: " + tables));
  for (const key of stopped.keys || []) box.append(el("div", {class: "muted"}, "row: " + key));
  box.append(el("div", {class: "muted"}, "continue: ",
    el("code", {}, "drc channel resume " + name), " (after a fix), ",
    el("code", {}, "drc channel skip " + name), " or ",
    el("code", {}, "drc channel rewind " + name + " --to SCN")));
  return box;
}
function replicatorCard(url, status, error) {
  const card = el("div", {class: "card replicator", "data-url": url});
  if (!status) {
    card.append(el("h3", {}, url), el("div", {class: "state bad"}, "unreachable"), el("div", {class: "muted"}, error || ""));
    return card;
  }
  const failed = status.capture && status.capture.failed;
  const buffer = status.buffer || {};
  const position = status.source_position;
  card.append(
    el("h3", {}, url),
    el("div", {class: "state " + (failed ? "bad" : "ok")}, (status.role || "?") + (failed ? " - capture stopped" : "")),
    pairs([
      ["source", status.source],
      ["SCN range", (buffer.first_scn || "-") + " .. " + (buffer.last_scn || "-")],
      ["source position", position ? position.log_index + ":" + position.log_pos : null],
      ["capture lag", seconds(status.lag && status.lag.seconds)],
      ["records", buffer.records],
    ]));
  if (failed) card.append(el("div", {class: "error"}, failed));
  return card;
}
function channelCard(dc, ch, now) {
  const key = dc + "/" + ch.name;
  const points = history[key] = (history[key] || []).concat([{t: now, lag: channelLag(ch), txns: ch.transactions || 0}]).slice(-HISTORY);
  const first = points[0], last = points[points.length - 1];
  const rate = points.length > 1 && last.t > first.t ? (last.txns - first.txns) / ((last.t - first.t) / 1000) : null;
  const card = el("div", {class: "card channel", "data-channel": ch.name, "data-datacenter": dc});
  const lag = el("span", {class: "lag"}, seconds(channelLag(ch)));
  card.append(
    el("h3", {}, ch.name + " \u2192 " + dc),
    el("div", {class: "state " + stateClass(ch.state)}, ch.state || "?"),
    pairs([
      ["lag", lag],
      ["history", spark(points)],
      ["rate", rate === null ? "-" : rate.toFixed(1) + " txn/s"],
      ["applied", (ch.transactions || 0) + " txns, " + (ch.rows || 0) + " rows"],
      ["at SCN", ch.last_scn],
      ["conflicts", ch.conflicts || 0],
    ]));
  const perTable = ch.conflicts_by_table || {};
  for (const [table, count] of Object.entries(perTable)) card.append(el("div", {class: "muted"}, table + ": " + count + " conflicts"));
  if (ch.stopped_at) card.append(stoppedDetails(ch.name, ch.stopped_at));
  else if (ch.last_error) card.append(el("div", {class: "error"}, ch.last_error));
  else if (ch.last_stop) card.append(el("div", {class: "muted last-stop"}, "last stop " + utc(new Date(ch.last_stop.at * 1000)) + ": " + ch.last_stop.error));
  const action = ch.last_action;
  if (action) card.append(el("div", {class: "muted last-action"}, "last action: " + action.action + " by " + action.actor +
    " at " + String(action.at).replace("T", " ").slice(0, 19) + " UTC" + (action.reason ? " (" + action.reason + ")" : "")));
  return card;
}
function bytes(value) {
  if (value === null || value === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(value), i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + " " + units[i];
}
function groupCard(group) {
  // One consumer group of this replicator (/v1/status consumer_groups; drc.api.group_lag).
  const ranges = Object.entries(group.ranges || {}).map(([state, n]) => n + " " + state).join(", ");
  const full = group.full;
  const card = el("div", {class: "card group", "data-group": group.name});
  card.append(
    el("h3", {}, group.name),
    pairs([
      ["members", group.members],
      ["ranges", ranges || null],
      ...(full ? [["full phase", full.terminated + " / " + full.chunks + " chunks done"]] : []),
      ["max lag", el("span", {class: "group-lag"}, seconds(group.max_lag_seconds))],
      ["backlog", el("span", {class: "group-backlog"}, bytes(group.backlog_bytes))],
      ["oldest checkpoint", group.oldest_checkpoint],
    ]));
  return card;
}
function groupCards(groups) {
  if (groups === null || groups === undefined) return [el("div", {class: "muted"}, "this replicator serves no consumer groups")];
  if (!Array.isArray(groups)) return [el("div", {class: "error"}, "consumer groups: " + (groups.error || "unknown"))];
  if (!groups.length) return [el("div", {class: "muted"}, "no consumer groups")];
  return groups.map(groupCard);
}
async function refresh() {
  const now = Date.now();
  let here, peers;
  try {
    here = await get("/v1/status");
    peers = await get("/v1/peers").catch(() => []);
  } catch (err) {
    if (err.auth) { document.getElementById("auth").style.display = "block"; return; }
    document.getElementById("problem").textContent = String(err.message || err);
    return;
  }
  document.getElementById("auth").style.display = "none";
  document.getElementById("problem").textContent = "";
  document.getElementById("here").textContent = "\u2014 " + here.datacenter;
  const byDc = new Map([[here.datacenter, [{url: location.origin, status: here}]]]);
  for (const peer of peers) {
    if (!byDc.has(peer.datacenter)) byDc.set(peer.datacenter, []);
    byDc.get(peer.datacenter).push(peer);
  }
  const dcs = [], channels = [];
  for (const [dc, members] of byDc) {
    const section = el("section", {class: "card datacenter", id: "dc-" + dc}, el("h3", {}, "datacenter " + dc));
    const seen = new Set();
    for (const m of members) {
      section.append(replicatorCard(m.url, m.status, m.error));
      for (const ch of (m.status && m.status.channels) || []) {
        if (seen.has(ch.name)) continue;
        seen.add(ch.name);
        channels.push(channelCard(dc, ch, now));
      }
    }
    dcs.push(section);
  }
  document.getElementById("datacenters").replaceChildren(...dcs);
  document.getElementById("channels").replaceChildren(...channels);
  document.getElementById("groups").replaceChildren(...groupCards(here.consumer_groups));
  document.getElementById("updated").textContent = utc(new Date(now));
}
document.getElementById("auth").addEventListener("submit", event => {
  event.preventDefault();
  token = document.getElementById("token").value;
  sessionStorage.setItem("drc-token", token);
  refresh();
});
refresh();
setInterval(refresh, 2000);
