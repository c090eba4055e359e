// The operator's page, live: polls ./state every 2 s and redraws from it.
// Every piece of data goes in through textContent or setAttribute, never as
// markup, so a key or member name cannot inject anything. The page is
// complete without this script (the server renders it); the script only
// keeps it current and answers the key box without a reload.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 2000;
  const $ = (id) => document.getElementById(id);
  let key = new URLSearchParams(location.search).get("key") || "";
  let timer = null;
  // Each member keeps the colour it was first drawn with while it stays in
  // the ring: a join or a leave does not repaint the others.
  const colors = new Map();
  function keepColors(s) {
    const present = new Set(s.members.map((m) => m.url));
    for (const url of [...colors.keys()]) if (!present.has(url)) colors.delete(url);
    const used = new Set(colors.values());
    let next = 0;
    for (const m of s.members) {
      if (!colors.has(m.url)) {
        while (next < s.palette.length && used.has(s.palette[next])) next++;
        const c = next < s.palette.length ? s.palette[next] : m.color;
        colors.set(m.url, c);
        used.add(c);
      }
      m.color = colors.get(m.url);
    }
  }
  // The first colours are the ones the server drew.
  for (const g of document.querySelectorAll("#arcs g.member")) {
    const p = g.querySelector("path");
    if (p) colors.set(g.dataset.member, p.getAttribute("stroke"));
  }

  // The formats of handler.go's template functions.
  const pct = (f) => (100 * f).toFixed(1) + "%";
  const rate = (f) => (f === null || f === undefined ? "…" : f.toFixed(1) + "/s");
  const ago = (s) => Math.floor(s) + "s ago";
  const hex8 = (h) => h.toString(16).padStart(8, "0");
  const clock = (t) => new Date(t).toISOString().slice(11, 19);
  function bytes(n) {
    if (n < 1024) return n + " B";
    const units = "KMGTPE";
    let f = n / 1024, i = 0;
    while (f >= 1024 && i < units.length - 1) { f /= 1024; i++; }
    return f.toFixed(1) + " " + units[i] + "iB";
  }
  const ratio = (a, b) => (b === 0 ? 0 : a / b);

  // el builds an element: attrs set as attributes, children appended as
  // nodes or as text.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  function drawRing(s) {
    const arcs = $("arcs");
    const owner = s.key ? s.key.owner : null;
    const groups = s.members.map((m) => {
      const g = svg("g", { class: "member" + (m.url === owner ? " hl" : ""), "data-member": m.url });
      const title = svg("title");
      title.textContent = m.url + " · " + pct(m.share);
      g.append(title, svg("path", { d: m.path, stroke: m.color }));
      return g;
    });
    arcs.replaceChildren(...groups);
    const mark = $("keymark");
    if (s.key) {
      mark.setAttribute("transform", "rotate(" + s.key.angle.toFixed(2) + ")");
      mark.setAttribute("class", "");
    } else {
      mark.setAttribute("class", "hidden");
    }
    $("ring-label").textContent = s.members.length + " members";
  }

  function drawKey(s) {
    const out = $("where-result");
    if (!s.key) { out.replaceChildren(); return; }
    out.replaceChildren(
      el("b", { class: "key" }, s.key.key), " hashes to ",
      el("code", {}, hex8(s.key.hash)), ": its owner is ",
      el("b", { class: "owner" }, s.key.owner));
  }

  function drawMembers(s) {
    const rows = s.members.map((m) => {
      const sw = svg("svg", { class: "swatch", viewBox: "0 0 10 10" });
      sw.append(svg("rect", { width: 10, height: 10, fill: m.color }));
      const seen = el("td", { class: "seen" });
      if (m.seen_version) {
        seen.append(el("code", {}, m.seen_version), m.self ? " " : " " + ago(m.seen_ago_s));
        if (m.seen_stale) seen.append(", before this node's ring changed");
      } else {
        seen.append("not heard from");
      }
      return el("tr", { "data-member": m.url, class: "state-" + m.state },
        el("td", {}, sw),
        el("td", { class: "url" }, m.url + (m.self ? " (this node)" : "")),
        el("td", { class: "id" }, m.id || ""),
        el("td", { class: "state" }, m.state),
        el("td", { class: "weight" }, m.weight),
        el("td", { class: "share" }, pct(m.share)),
        seen);
    });
    document.querySelector("#members tbody").replaceChildren(...rows);
  }

  function drawGroups(s) {
    const row = (label, a, b) => el("tr", {}, el("th", {}, label), a, b);
    const td = (field, text, value) => {
      const attrs = field ? { "data-field": field } : {};
      if (value !== undefined) attrs["data-value"] = value;
      return el("td", attrs, text);
    };
    const sections = s.groups.map((g) => {
      const hot = el("ol", { class: "hotkeys" });
      if (g.hot_keys && g.hot_keys.length) {
        for (const h of g.hot_keys) {
          hot.append(el("li", {}, el("span", { class: "key" }, h.key), " ",
            el("span", { class: "est" }, h.estimate + " recent misses · " + bytes(h.bytes))));
        }
      } else {
        hot.append(el("li", { class: "none" }, "none in use (a copy is served only while its owner's lease holds)"));
      }
      return el("section", { class: "group", "data-group": g.name },
        el("h3", {}, g.name),
        el("table", { class: "numbers" },
          row("gets", td("gets", g.gets), td("gets_per_s", rate(g.gets_per_s))),
          row("hit ratio, main", td("main_hit_ratio", pct(ratio(g.main_hits, g.gets))), td("main_hits", g.main_hits)),
          row("hit ratio, hot", td("hot_hit_ratio", pct(ratio(g.hot_hits, g.gets))), td("hot_hits", g.hot_hits)),
          row("origin loads", td("origin_loads", g.origin_loads), td("origin_loads_per_s", rate(g.origin_loads_per_s))),
          row("fetched from owners", td("peer_loads", g.peer_loads), td(null, "")),
          row("main cache", td("main_bytes", bytes(g.main_bytes), g.main_bytes), td(null, g.main_items + " items")),
          row("hot cache", td("hot_bytes", bytes(g.hot_bytes), g.hot_bytes), td(null, g.hot_items + " items")),
          row("budget", td("max_bytes", bytes(g.max_bytes), g.max_bytes), td(null, bytes(g.hot_max_bytes) + " of it hot, more while the main cache has room")),
          row("evictions", td("evictions", g.evictions), td(null, ""))),
        el("h4", {}, "Hottest keys of the hot cache"),
        hot);
    });
    $("groups").replaceChildren(...sections);
  }

  function drawTimeline(s) {
    const items = (s.timeline || []).map((e) => el("li", { class: "ev-" + e.kind },
      el("time", {}, clock(e.time)), " ", el("span", { class: "kind" }, e.kind), " ",
      e.scope ? el("span", { class: "scope" }, e.scope + " by ") : "",
      el("span", { class: "who" }, e.member)));
    if (!items.length) items.push(el("li", { class: "none" }, "no changes since this node started"));
    $("timeline").replaceChildren(...items);
  }

  function drawSummary(s) {
    $("node-id").textContent = s.node_id;
    $("self").textContent = s.self;
    $("version").textContent = s.version;
    const ag = $("agreement");
    ag.textContent = s.agreement.text;
    ag.className = s.agreement.differ === 0 && s.agreement.unknown === 0 ? "ok" : "warn";
    $("etcd").textContent = !s.etcd ? "static members"
      : "etcd " + (s.etcd.connected ? "connected" : s.etcd.registered ? "registered, watch down" : "unreachable");
    const ready = $("ready");
    ready.textContent = s.ready ? "ready" : "not ready";
    ready.className = s.ready ? "ok" : "warn";
    $("updated").textContent = "at " + clock(s.time) + " UTC";
    document.body.classList.remove("stale");
  }

  function draw(s) {
    keepColors(s);
    drawSummary(s);
    drawRing(s);
    drawKey(s);
    drawMembers(s);
    drawGroups(s);
    drawTimeline(s);
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  }

  async function poll() {
    clearTimeout(timer);
    try {
      const res = await fetch("state" + (key ? "?key=" + encodeURIComponent(key) : ""), { cache: "no-store" });
      if (res.ok) {
        draw(await res.json());
      } else {
        const msg = (await res.text()).trim();
        $("where-result").replaceChildren(el("span", { class: "error" }, msg));
        key = "";
      }
    } catch (err) {
      // The node is gone or restarting: keep the last picture, greyed out.
      document.body.classList.add("stale");
    }
    timer = setTimeout(poll, POLL_MS);
  }

  $("where").addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = $("key").value;
    const u = new URL(location.href);
    if (key) u.searchParams.set("key", key); else u.searchParams.delete("key");
    history.replaceState(null, "", u);
    poll();
  });
  poll();
})();
