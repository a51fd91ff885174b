// moonrl dashboard page: polls the JSON API of the server that served it
// (lua/moonrl/dashboard/init.lua) and draws with dygraphs. Every request
// carries the token (X-Moonrl-Token); every text from the server goes into
// the page as text (textContent), never as HTML.
"use strict";
(function () {
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  // the curves drawn, [field, title] each: the server's list (data.CURVES), sent with /api/runs
  const state = {
    runs: [], sweeps: [], curves: [], selected: null, sweep: null, overlay: new Set(),
    rows: {}, changes: {}, charts: {}, details: null, sweepChart: null, sweepData: null,
  };

  function api(path, opts) {
    opts = opts || {};
    opts.headers = Object.assign({ "X-Moonrl-Token": TOKEN }, opts.headers || {});
    return fetch(path, opts).then(function (r) {
      return r.json().then(function (j) { j.httpStatus = r.status; return j; });
    });
  }
  function q(id) { return document.getElementById(id); }
  // a list the server sent, or [] where a field is absent
  function arr(x) { return Array.isArray(x) ? x : []; }
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function fmt(v) {
    if (typeof v !== "number") return v === undefined || v === null ? "-" : String(v);
    if (Number.isInteger(v)) return String(v);
    return Number(v.toPrecision(4)).toString();
  }
  function say(text, ok) {
    const m = q("message");
    m.textContent = text;
    m.className = ok === null ? "pending" : ok ? "ok" : "err";
  }

  // ---------------------------------------------------------------- the lists
  function drawRuns() {
    const ul = q("runs");
    ul.replaceChildren();
    for (const r of state.runs) {
      const li = el("li");
      li.dataset.id = r.id;
      if (r.id === state.selected) li.className = "sel";
      const box = el("input");
      box.type = "checkbox";
      box.title = "overlay this run's curves";
      box.checked = state.overlay.has(r.id);
      box.addEventListener("click", function (ev) {
        ev.stopPropagation();
        if (box.checked) state.overlay.add(r.id); else state.overlay.delete(r.id);
        toHash();
        pollMetrics();
        redrawCharts();
      });
      li.append(box, el("span", " " + r.id + " "), el("span", r.status + (r.update !== undefined ? " @" + r.update : ""), "st"));
      li.addEventListener("click", function () { select(r.id); });
      ul.append(li);
    }
    if (state.runs.length === 0) ul.append(el("li", "no runs here yet"));
    const sl = q("sweeps");
    sl.replaceChildren();
    for (const s of state.sweeps) {
      const li = el("li", s.id + " (" + arr(s.trials).length + " trials)");
      li.dataset.id = s.id;
      if (s.id === state.sweep) li.className = "sel";
      li.addEventListener("click", function () { showSweep(s.id); drawRuns(); });
      sl.append(li);
    }
  }

  function refreshRuns() {
    return api("api/runs").then(function (j) {
      if (!j.ok) throw new Error(j.error);
      q("conn").textContent = "live";
      q("conn").className = "";
      state.runs = arr(j.runs);
      state.sweeps = arr(j.sweeps);
      state.curves = arr(j.curves);
      if (!state.selected && state.runs.length) applyHash();
      drawRuns();
      drawStatus();
    }).catch(function (e) {
      q("conn").textContent = "not connected: " + e.message;
      q("conn").className = "bad";
    });
  }

  // The view in the URL's fragment (#run=ID&overlay=ID,ID&sweep=ID), kept as it changes, so a
  // view can be bookmarked or sent (with the token, which stays in the query)
  function fromHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    return { run: h.get("run"), sweep: h.get("sweep"), overlay: (h.get("overlay") || "").split(",").filter(Boolean) };
  }
  // the view a fragment names (at load, and when a link changes it): what it names that is not
  // served is left out
  function applyHash() {
    const wanted = fromHash();
    const known = function (id) { return state.runs.some(function (r) { return r.id === id; }); };
    state.overlay = new Set(wanted.overlay.filter(known));
    const live = state.runs.find(function (r) { return r.live; });
    const first = known(wanted.run) ? wanted.run : (live || state.runs[0] || {}).id;
    if (wanted.sweep && state.sweeps.some(function (s) { return s.id === wanted.sweep; })) {
      if (first) state.selected = first;
      showSweep(wanted.sweep);
    } else {
      if (first) select(first);
      closeSweep();
    }
    pollMetrics();
    redrawCharts();
  }
  window.addEventListener("hashchange", applyHash);

  function toHash() {
    const h = new URLSearchParams();
    if (state.selected) h.set("run", state.selected);
    const others = Array.from(state.overlay).filter(function (id) { return id !== state.selected; });
    if (others.length) h.set("overlay", others.join(","));
    if (state.sweep) h.set("sweep", state.sweep);
    history.replaceState(null, "", location.pathname + location.search + "#" + h.toString());
  }

  function current() { return state.runs.find(function (r) { return r.id === state.selected; }); }

  function drawStatus() {
    const r = current();
    if (!r) return;
    q("run-title").textContent = r.name + " (" + r.id + ")";
    q("run-status").textContent = r.status +
      (r.update !== undefined ? ", update " + r.update + (r.total_updates ? "/" + r.total_updates : "") : "") +
      (r.sps ? ", " + Math.round(r.sps) + " agent-steps/s" : "") +
      (typeof r.eta_seconds === "number" ? ", ETA " + Math.round(r.eta_seconds) + " s" : "");
    q("controls").hidden = !r.live;
    const list = q("hot-keys");   // the hot keys, offered as the key is typed
    const keys = Object.keys(r.hot || {}).sort();
    if (list.options.length !== keys.length) {
      list.replaceChildren();
      for (const k of keys) { const o = el("option"); o.value = k; list.append(o); }
    }
  }

  // the sweep view and a run's page are two pages: one shows at a time
  function showPage(sweep) {
    q("sweep-view").hidden = !sweep;
    q("run-page").hidden = !!sweep;
  }
  function closeSweep() {
    state.sweep = null;
    showPage(false);
    if (state.selected) select(state.selected); else { toHash(); drawRuns(); }
  }

  function select(id) {
    if (state.sweep) { state.sweep = null; showPage(false); }
    state.selected = id;
    state.overlay.add(id);
    toHash();
    drawRuns();
    drawStatus();
    refreshDetails();
    pollMetrics();
  }

  // ---------------------------------------------------------------- curves
  function pollMetrics() {
    const ids = Array.from(state.overlay);
    return Promise.all(ids.map(function (id) {
      const have = (state.rows[id] || []).length;
      return api("api/metrics?run=" + encodeURIComponent(id) + "&from=" + have).then(function (j) {
        if (!j.ok) return;
        if (j.reset || !state.rows[id]) state.rows[id] = [];
        for (const row of arr(j.rows)) state.rows[id].push(row);
        state.changes[id] = arr(j.changes);
        return arr(j.rows).length > 0 || j.reset;
      });
    })).then(function (grew) {
      if (grew.some(Boolean)) redrawCharts();
      drawChanges();
    });
  }

  function stepsAt(id, update) {
    const rows = state.rows[id] || [];
    for (const r of rows) if (r.update >= update) return r.agent_steps;
    return rows.length ? rows[rows.length - 1].agent_steps : 0;
  }

  // a run keeps its colour on every chart and in the legend: by its place in the list of runs
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22"];
  function colour(id) {
    const i = state.runs.findIndex(function (r) { return r.id === id; });
    return PALETTE[(i < 0 ? 0 : i) % PALETTE.length];
  }
  function drawLegend(ids) {
    const box = q("legend");
    box.replaceChildren();
    for (const id of ids) {
      const sw = el("i");
      sw.style.background = colour(id);
      const item = el("span");
      item.append(sw, el("b", id === state.selected ? id : null), id === state.selected ? "" : id);
      box.append(item);
    }
  }
  // y-axis labels, written from the ticks' spacing so that neighbours differ and every label of
  // an axis has one form: as many decimals as the step needs (2.076, 2.078; never 2.08 four times),
  // scientific for an axis of tiny or huge numbers (1.0e-3, 8.0e-4; never 0.001 beside 8.0e-4),
  // bytes in KiB / MiB / GiB and rates as 12.5k with the same rule; no-break spaces keep a label
  // on one line
  // the fewest decimals (0 .. 8) that write every value of vs (in units of div) exactly enough that the
  // ticks' step shows (a step of 2.5 needs one)
  function decimals(vs, step, div) {
    for (let d = 0; d < 8; d++) {
      const f = Math.pow(10, d);
      if (vs.every(function (v) { return Math.abs(Math.round(v / div * f) / f - v / div) <= 1e-3 * step / div; })) return d;
    }
    return 8;
  }
  function axisLabels(key, vs) {
    const step = vs.length > 1 ? Math.abs(vs[1] - vs[0]) : Math.abs(vs[0] || 1);
    let top = 0;
    for (const v of vs) top = Math.max(top, Math.abs(v));
    if (key === "memory_peak_bytes") {
      const units = ["B", "KiB", "MiB", "GiB", "TiB"];
      let u = 0, div = 1;
      while (top / div >= 1024 && u < units.length - 1) { div *= 1024; u++; }
      const d = decimals(vs, step, div);
      return vs.map(function (v) { return (v / div).toFixed(d) + "\u00a0" + units[u]; });
    }
    if (key === "sps" && top >= 1000) {
      const d = decimals(vs, step, 1000);
      return vs.map(function (v) { return (v / 1000).toFixed(d) + "k"; });
    }
    if (top > 0 && (top < 1e-2 || top >= 1e6)) {
      // one mantissa precision for the axis: enough digits that the step shows
      const digits = step > 0 ? Math.min(6, Math.max(1, Math.ceil(Math.log10(top / step) - 1e-9))) : 1;
      return vs.map(function (v) { return v === 0 ? "0" : v.toExponential(digits); });
    }
    const d = decimals(vs, step, 1);
    return vs.map(function (v) { return v.toFixed(d); });
  }
  function yTicker(key) {
    return function (min, max, pixels, opts, g, vals) {
      const ticks = Dygraph.numericTicks(min, max, pixels, opts, g, vals).filter(function (t) { return typeof t.v === "number"; });
      const labels = axisLabels(key, ticks.map(function (t) { return t.v; }));
      return ticks.map(function (t, i) { return { v: t.v, label: labels[i] }; });
    };
  }
  function redrawCharts() {
    // the selected run first, the others in the list's order
    const place = function (id) { return id === state.selected ? -1 : state.runs.findIndex(function (r) { return r.id === id; }); };
    const ids = Array.from(state.overlay).filter(function (id) { return (state.rows[id] || []).length; })
      .sort(function (a, b) { return place(a) - place(b); });
    drawLegend(ids);
    const box = q("charts");
    for (const [key, title] of state.curves) {
      // one table: x = agent-steps, a column per run (null where a run has no row there)
      const xs = new Map();
      ids.forEach(function (id, c) {
        for (const row of state.rows[id]) {
          if (typeof row[key] !== "number") continue;
          let line = xs.get(row.agent_steps);
          if (!line) { line = new Array(ids.length + 1).fill(null); line[0] = row.agent_steps; xs.set(row.agent_steps, line); }
          line[c + 1] = row[key];
        }
      });
      const table = Array.from(xs.values()).sort(function (a, b) { return a[0] - b[0]; });
      let c = state.charts[key];
      if (!table.length) { if (c) { c.g.destroy(); c.box.remove(); delete state.charts[key]; } continue; }
      const marks = [];
      if (state.selected) for (const ch of state.changes[state.selected] || []) {
        marks.push({ x: stepsAt(state.selected, ch.update), text: ch.key + " = " + JSON.stringify(ch.new) + " (" + ch.source + ")" });
      }
      const opts = {
        labels: ["agent-steps"].concat(ids), colors: ids.map(colour), connectSeparatedPoints: true, legend: "follow",
        xlabel: "agent-steps", title: null, yLabelWidth: 72,
        // 20k agent-steps; values as short plain numbers (not 500m for 0.5, nor -5.00e-3 for -0.005)
        axes: { x: { labelsKMB: true }, y: { ticker: yTicker(key), axisLabelWidth: 72 } },
        underlayCallback: function (ctx, area, g) {   // every live change: a vertical line
          ctx.save();
          ctx.strokeStyle = "rgba(200, 80, 0, 0.7)";
          ctx.setLineDash([4, 3]);
          for (const m of marks) {
            const x = g.toDomXCoord(m.x);
            ctx.beginPath(); ctx.moveTo(x, area.y); ctx.lineTo(x, area.y + area.h); ctx.stroke();
          }
          ctx.restore();
        },
      };
      if (!c) {
        const wrap = el("div", null, "chart-box");
        wrap.append(el("h4", title));
        const div = el("div", null, "chart");
        div.id = "chart-" + key;
        wrap.append(div);
        box.append(wrap);
        c = state.charts[key] = { box: wrap, g: new Dygraph(div, table, opts), marks: marks };
      } else {
        c.g.updateOptions(Object.assign({ file: table }, opts));
        c.marks = marks;
      }
      c.rows = table.length;
    }
  }

  function drawChanges() {
    const t = q("changes");
    t.replaceChildren();
    const list = state.changes[state.selected] || [];
    if (!list.length) return;
    const head = el("tr");
    for (const h of ["update", "key", "old", "new", "source"]) head.append(el("th", h));
    t.append(head);
    for (const ch of list) {
      const tr = el("tr");
      for (const v of [ch.update, ch.key || ch.event, JSON.stringify(ch.old), JSON.stringify(ch.new === undefined ? ch.path : ch.new), ch.source]) {
        tr.append(el("td", v === undefined ? "" : v));
      }
      t.append(tr);
    }
  }

  // ---------------------------------------------------------------- details
  function refreshDetails() {
    if (!state.selected) return Promise.resolve();
    const id = state.selected;
    return api("api/run?run=" + encodeURIComponent(id)).then(function (j) {
      if (!j.ok || id !== state.selected) return;
      state.details = j;
      q("config").textContent = j.config || "(no config.lua)";
      const al = q("alerts");
      al.replaceChildren();
      for (const a of arr(j.alerts)) al.append(el("li", a));
      if (!arr(j.alerts).length) al.append(el("li", "none"));
      const ev = q("evals");
      ev.replaceChildren();
      for (const e of arr(j.evals)) {
        ev.append(el("h4", e.name + (e.command ? "  (" + e.command + ")" : "")));
        const t = el("table");
        // the episodic protocol's rows (every environment but foraging), else foraging's survival table's
        const pt = (arr(e.results)[0] || {}).point || {};
        const keys = "return_mean" in pt
          ? ["return_mean", "length_mean", "success_rate"].filter((k) => k in pt)
              .concat(Object.keys(pt).filter((k) => k.endsWith("_per_episode")))
          : ["eff_overall", "eff_per_env", "deaths_per_1k", "food_per_1k", "poison_per_1k", "survival_mean"];
        const head = el("tr");
        head.append(el("th", "mode"));
        for (const k of keys) head.append(el("th", k + " [95% interval]"));
        t.append(head);
        for (const r of arr(e.results)) {
          const tr = el("tr");
          tr.append(el("td", r.label));
          for (const k of keys) {
            const p = r.point && r.point[k], ci = r.ci && r.ci[k];
            tr.append(el("td", fmt(p) + (ci ? " [" + fmt(ci[0]) + ", " + fmt(ci[1]) + "]" : "")));
          }
          t.append(tr);
        }
        ev.append(t);
      }
      if (!arr(j.evals).length) ev.append(el("p", "none yet (moonrl eval RUN_DIR writes them)"));
    });
  }

  // a table of rows (arrays of cell values) under a title, into box
  function table(box, title, head, rows) {
    if (!rows.length) return;
    box.append(el("h3", title));
    const t = el("table");
    const tr = el("tr");
    for (const h of head) tr.append(el("th", h));
    t.append(tr);
    for (const r of rows) {
      const row = el("tr");
      for (const v of r) row.append(el("td", v === undefined || v === null ? "" : v));
      t.append(row);
    }
    box.append(t);
    return t;
  }
  // a trial's directory name, as moonrl.sweep names it (trial-007)
  function trialLabel(i) { return "trial-" + String(i).padStart(3, "0"); }
  function params(p) {
    const parts = [];
    for (const k of Object.keys(p || {}).sort()) parts.push(k + "=" + (typeof p[k] === "number" ? fmt(p[k]) : JSON.stringify(p[k])));
    return parts.join(" ");
  }

  // ASHA: a row per trial, a column per rung (its value there, and stopped where it was)
  function drawRungs(j) {
    const box = q("sweep-rungs");
    box.replaceChildren();
    const rungs = arr(j.rungs);
    if (!rungs.length) return;
    let top = 0;
    const by = new Map();
    for (const r of rungs) {
      top = Math.max(top, r.rung);
      if (!by.has(r.trial)) by.set(r.trial, {});
      by.get(r.trial)[r.rung] = r;
    }
    const head = ["trial"], steps = {};
    for (const r of rungs) steps[r.rung] = r.steps;
    for (let k = 1; k <= top; k++) head.push("rung " + k + " (" + fmt(steps[k]) + " steps)");
    const rows = [];
    for (const trial of Array.from(by.keys()).sort(function (a, b) { return a - b; })) {
      const row = [trialLabel(trial)];
      for (let k = 1; k <= top; k++) {
        const r = by.get(trial)[k];
        row.push(r ? fmt(r.value) + (r.decision === "stop" ? " stopped" : "") : "");
      }
      rows.push(row);
    }
    table(box, "ASHA rungs (the metric at each rung; stopped: the scheduler ended the trial there)", head, rows)
      .id = "rungs-table";
  }

  // PBT: every exploit, and the best member's lineage
  function drawPbt(j) {
    const box = q("sweep-pbt");
    box.replaceChildren();
    const ex = arr(j.exploits).map(function (e) {
      return [trialLabel(e.trial), e.update, trialLabel(e.from),
        e.donor_update, params(e.old), params(e.new)];
    });
    const t = table(box, "PBT exploits (a member took a donor's weights and keys, then explored)",
      ["member", "at update", "donor", "donor's update", "keys before", "keys after"], ex);
    if (t) t.id = "exploits-table";
    const lin = j.lineage;
    if (lin && arr(lin.segments).length) {
      const segs = arr(lin.segments).map(function (s) {
        // from: the last update before the segment (its first is from + 1)
        return [trialLabel(s.trial), s.from + 1, s.to === undefined || s.to === null ? "end" : s.to, params(s.params)];
      });
      const lt = table(box, "lineage of the best member (" + (lin.label || lin.best) + ", " + fmt(lin.value) +
        "): whose weights, over which updates, with which keys", ["member", "first update", "last update", "keys"], segs);
      if (lt) lt.id = "lineage-table";
    }
  }

  // the cost-aware front: the best value within each budget
  function drawFront(j) {
    const box = q("sweep-front");
    box.replaceChildren();
    const f = j.front || {};
    if (f.error) { box.append(el("p", "front: " + f.error)); return; }
    for (const [cost, name] of [["steps", "agent-steps"], ["seconds", "training seconds"]]) {
      const rows = arr((f[cost] || {}).rows).map(function (r) {
        return [fmt(r.budget), r.label, fmt(r.value), r.update, fmt(r[cost]), params(r.params)];
      });
      const t = table(box, "best " + (j.metric || "metric") + " within a budget of " + name + " (the front)",
        ["<= " + cost, "trial", "value", "at update", cost, "params"], rows);
      if (t) t.id = "front-" + cost;
    }
  }

  // which keys mattered (the server's fANOVA, moonrl.sweep.importance) and every trial across
  // the keys (parallel coordinates): tables from /api/sweep, the charts as SVG from the server
  // (moonrl.sweep.plot, as moonrl sweep report draws them), loaded again only when they changed
  function drawReport(j) {
    const box = q("sweep-importance");
    box.replaceChildren();
    const imp = j.importance || {};
    const bars = q("sweep-importance-bars");
    if (imp.error || !arr(imp.keys).length) {
      box.append(el("p", "no importance: " + (imp.error || "nothing finished")));
      bars.hidden = true;
    } else {
      const rows = arr(imp.keys).map(function (k) {
        return [k.key, k.importance.toFixed(3), k.sd.toFixed(3), (100 * k.share).toFixed(1) + "%", k.scale];
      });
      rows.push(["interactions (the rest)", (imp.interactions || 0).toFixed(3), "", "", ""]);
      const t = table(box, (imp.method || "") + ", " + imp.n + " finished trials",
        ["key", "importance", "sd over the trees", "share", "scale"], rows);
      if (t) t.id = "importance-table";
    }
    const src = function (chart) {
      return "api/sweep_chart?sweep=" + encodeURIComponent(j.id) + "&chart=" + chart + "&token=" +
        encodeURIComponent(TOKEN) + "&v=" + encodeURIComponent(j.charts || "");
    };
    if (!imp.error && arr(imp.keys).length && bars.dataset.src !== src("importance")) {
      bars.dataset.src = src("importance");
      bars.src = bars.dataset.src;
    }
    if (!imp.error && arr(imp.keys).length) bars.hidden = false;
    const par = q("sweep-parallel");
    if (par.dataset.src !== src("parallel")) { par.dataset.src = src("parallel"); par.src = par.dataset.src; }
    par.hidden = !arr(j.trials).some(function (r) { return r.state !== "running"; });
  }

  // a parameter's value in a table cell: numbers to 3 significant digits, the rest as text
  function paramCell(v) {
    if (v === undefined || v === null) return "";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(+v.toPrecision(3));
    return typeof v === "string" ? v : JSON.stringify(v);
  }

  // every trial's curve of the sweep's metric on one chart (x = agent-steps, a series per trial)
  function drawSweepCurves(j) {
    const metric = j.metric || "episode_return_mean";
    const trials = arr(j.trials).filter(function (r) { return r.run; });
    q("sweep-curves-title").textContent = trials.length ? metric + " of every trial" : "";
    return Promise.all(trials.map(function (r) {
      const have = (state.rows[r.run] || []).length;
      return api("api/metrics?run=" + encodeURIComponent(r.run) + "&from=" + have).then(function (m) {
        if (!m.ok) return;
        if (m.reset || !state.rows[r.run]) state.rows[r.run] = [];
        for (const row of arr(m.rows)) state.rows[r.run].push(row);
      });
    })).then(function () {
      const xs = new Map();
      trials.forEach(function (r, c) {
        for (const row of state.rows[r.run] || []) {
          if (typeof row[metric] !== "number") continue;
          let line = xs.get(row.agent_steps);
          if (!line) { line = new Array(trials.length + 1).fill(null); line[0] = row.agent_steps; xs.set(row.agent_steps, line); }
          line[c + 1] = row[metric];
        }
      });
      const table = Array.from(xs.values()).sort(function (a, b) { return a[0] - b[0]; });
      const box = q("sweep-curves");
      if (!table.length) {
        if (state.sweepChart) { state.sweepChart.destroy(); state.sweepChart = null; }
        box.hidden = true;
        return;
      }
      box.hidden = false;
      const opts = {
        labels: ["agent-steps"].concat(trials.map(function (r) { return r.label || String(r.trial); })),
        connectSeparatedPoints: true, legend: "follow", xlabel: "agent-steps",
        axes: { x: { labelsKMB: true }, y: { ticker: yTicker(metric), axisLabelWidth: 72 } },
      };
      if (state.sweepChart) state.sweepChart.updateOptions(Object.assign({ file: table }, opts));
      else state.sweepChart = new Dygraph(box, table, opts);
    });
  }

  function showSweep(id) {
    const fresh = state.sweep !== id;
    state.sweep = id;
    if (fresh) { toHash(); drawRuns(); }
    return api("api/sweep?sweep=" + encodeURIComponent(id)).then(function (j) {
      if (!j.ok) return say(j.error, false);
      if (state.sweep !== id) return;
      showPage(true);
      drawRungs(j);
      drawPbt(j);
      drawFront(j);
      drawReport(j);
      q("sweep-title").textContent = "sweep " + j.dir + " (" + (j.method || "?") + ", " + (j.mode || "") + " " + (j.metric || "") + ")";
      // a column per searched key (3 significant digits), not the parameters' JSON
      const keys = [];
      for (const r of arr(j.trials)) for (const k of Object.keys(r.params || {})) if (keys.indexOf(k) < 0) keys.push(k);
      keys.sort();
      const t = q("sweep-table");
      t.replaceChildren();
      const head = el("tr");
      for (const h of ["trial", "state", j.metric || "value", "steps"].concat(keys)) head.append(el("th", h));
      t.append(head);
      for (const r of arr(j.trials)) {
        const tr = el("tr");
        tr.append(el("td", r.label || r.trial), el("td", r.state + (r.error ? ": " + r.error : "")),
          el("td", fmt(r.value)), el("td", fmt(r.steps)));
        for (const k of keys) tr.append(el("td", paramCell((r.params || {})[k])));
        if (r.run) { tr.style.cursor = "pointer"; tr.addEventListener("click", function () { select(r.run); }); }
        t.append(tr);
      }
      return drawSweepCurves(j);
    });
  }

  // ---------------------------------------------------------------- actions
  function act(body) {
    body.run = state.selected;
    say("sending " + body.action + "...", null);
    return api("api/action", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    }).then(function (j) {
      if (!j.ok) return say(j.error, false);
      if (body.action === "set") {
        const parts = [];
        for (const k in j.values) parts.push("set " + k + " = " + JSON.stringify(j.values[k]));
        say(parts.join("; "), true);
      } else {
        say(body.action + ": done" + (j.path ? " (" + j.path + ")" : "") + (j.status ? " (" + j.status + ")" : ""), true);
      }
      refreshRuns();
    }).catch(function (e) { say(String(e), false); });
  }
  for (const b of document.querySelectorAll("#controls button[data-action]")) {
    b.addEventListener("click", function () {
      if (b.dataset.action === "stop" && !confirm("Stop " + state.selected + "? (it writes a final checkpoint)")) return;
      act({ action: b.dataset.action });
    });
  }
  q("sweep-close").addEventListener("click", closeSweep);
  q("set-button").addEventListener("click", function () {
    act({ action: "set", key: q("set-key").value, value: q("set-value").value });
  });

  // for tests and the curious: what the page holds
  window.moonrlDashboard = {
    state: state,
    points: function (key) { const c = state.charts[key]; return c ? c.g.numRows() : 0; },
    series: function (key) { const c = state.charts[key]; return c ? c.g.getLabels().slice(1) : []; },
    marks: function (key) { const c = state.charts[key]; return c ? c.marks.map(function (m) { return m.text; }) : []; },
    select: select,
    sweepSeries: function () { return state.sweepChart ? state.sweepChart.getLabels().slice(1) : []; },
    axisLabels: axisLabels,
  };

  // polling stops while the page is not seen (another tab, a minimised window): nothing is asked
  // of the runs' machine for a page nobody looks at; it catches up when shown again
  function whenSeen(fn) { return function () { if (!document.hidden) fn(); }; }
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { refreshRuns(); pollMetrics(); } });
  refreshRuns();
  setInterval(whenSeen(pollMetrics), 1000);
  setInterval(whenSeen(refreshRuns), 2000);
  setInterval(whenSeen(refreshDetails), 5000);
  setInterval(whenSeen(function () { if (state.sweep) showSweep(state.sweep); }), 5000);
})();
