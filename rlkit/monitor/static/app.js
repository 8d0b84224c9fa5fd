// rlkit dashboard: curves (uPlot) over /api/runs/<exp>/metrics and a trajectory browser over harbor_trials/.
// Live refresh asks each run only for what was appended since its last offset.
"use strict";

const PANELS = [
  {title: "Reward", metrics: ["critic/rewards/mean", "rollout/pass_rate", "val-core/*"]},
  {title: "KL", metrics: ["actor/kl_loss", "actor/ppo_kl", "actor/kl_coef"]},
  {title: "Entropy", metrics: ["actor/entropy"]},
  {title: "Response length", metrics: ["response_length/mean", "response_length/max"]},
  {title: "Throughput (tokens/s)", metrics: ["perf/rollout_tokens_per_s", "perf/update_tokens_per_s", "perf/throughput"]},
  {title: "MFU", metrics: ["perf/mfu/actor", "perf/mfu/actor_infer", "perf/mfu/*"]},
  {title: "Timing breakdown (s)", metrics: ["timing_s/*"]},
];
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f", "#854d0e", "#475569"];
const REFRESH_MS = 5000;

const state = {runs: {}, selected: [], charts: [], drawn: 0};
const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "onclick") node.onclick = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const kid of kids) node.append(kid);
  return node;
};
const api = async (path) => {
  const r = await fetch(path, {credentials: "same-origin"});
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
};
const enc = encodeURIComponent;

// ---- metrics: per run, columns appended in place
function runState(exp) {
  if (!state.runs[exp]) state.runs[exp] = {offset: 0, steps: [], columns: {}, status: null};
  return state.runs[exp];
}

async function pull(exp) {
  const run = runState(exp);
  const got = await api(`/api/runs/${enc(exp)}/metrics?offset=${run.offset}`);
  // the file was replaced, or a restart redid steps: the server sent every step's latest attempt
  if (got.replace || got.offset < run.offset) { run.steps = []; run.columns = {}; }
  const before = run.steps.length;
  for (const name of Object.keys(got.columns)) {
    if (!run.columns[name]) run.columns[name] = new Array(before).fill(null);
  }
  run.steps.push(...got.steps);
  for (const [name, col] of Object.entries(run.columns)) {
    const fresh = got.columns[name];
    col.push(...(fresh || new Array(got.steps.length).fill(null)));
  }
  run.offset = got.offset;
  return got.steps.length;
}

function ema(values, alpha) {
  if (!alpha) return values;
  let last = null;
  return values.map((v) => (v == null ? null : (last = last == null ? v : alpha * last + (1 - alpha) * v)));
}

function xValues(run, mode) {
  if (mode !== "wall") return run.steps;
  const t = run.columns["timing_s/step"] || run.columns["perf/time_per_step"] || [];
  let sum = 0;
  return run.steps.map((_, i) => (sum += t[i] || 0) / 3600);
}

function panelMetrics(panel, names) {
  const out = [];
  for (const m of panel.metrics) {
    if (m.endsWith("*")) names.filter((n) => n.startsWith(m.slice(0, -1)) && !out.includes(n)).forEach((n) => out.push(n));
    else if (names.includes(m) && !out.includes(m)) out.push(m);
  }
  return out;
}

// uPlot wants one shared x array: merge the runs' x values, null where a run has no point
function joined(series) {
  const xs = [...new Set(series.flatMap((s) => s.x))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const ys = series.map((s) => {
    const y = new Array(xs.length).fill(null);
    s.x.forEach((x, i) => { y[at.get(x)] = s.y[i]; });
    return y;
  });
  return [xs, ...ys];
}

// a flat series gets a unit band around it instead of uPlot's 0..100
function yRange(u, min, max) {
  if (min == null || max == null) return [0, 1];
  if (min === max) return [min - (Math.abs(min) || 1) * 0.5, max + (Math.abs(max) || 1) * 0.5];
  const pad = (max - min) * 0.05;
  return [min - pad, max + pad];
}

// tiny and huge values in exponent form (KL is often 1e-4), the rest with up to five digits
function tick(v) {
  if (v == null) return "";
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-2 || a >= 1e6) ? v.toExponential(1) : String(+v.toPrecision(5));
}

function drawCharts() {
  const mode = $("#xaxis").value, alpha = parseFloat($("#ema").value);
  const box = $("#charts");
  state.charts.forEach((c) => c.destroy());
  state.charts = [];
  box.replaceChildren();
  let drawn = 0;
  for (const panel of PANELS) {
    const series = [];
    state.selected.forEach((exp) => {
      const run = runState(exp);
      const names = Object.keys(run.columns);
      const x = xValues(run, mode);
      for (const m of panelMetrics(panel, names)) {
        series.push({label: state.selected.length > 1 ? `${exp}: ${m}` : m, x, y: ema(run.columns[m], alpha)});
      }
    });
    const div = el("div", {class: "panel", "data-panel": panel.title}, el("h3", {text: panel.title}));
    box.append(div);
    if (!series.length || !series.some((s) => s.x.length)) {
      div.append(el("div", {class: "empty", text: `no ${panel.metrics.join(", ")} logged`}));
      continue;
    }
    const opts = {
      width: Math.max(420, div.clientWidth - 12), height: 220,
      scales: {x: {time: false}, y: {range: yRange}},
      axes: [{label: mode === "wall" ? "hours" : "step"}, {values: (u, ticks) => ticks.map(tick), size: 60}],
      series: [{label: mode}, ...series.map((s, i) => ({label: s.label, stroke: COLORS[i % COLORS.length],
                                                       width: 1.5, spanGaps: true, points: {show: s.x.length < 60}}))],
    };
    state.charts.push(new uPlot(opts, joined(series), div));
    drawn += 1;
  }
  state.drawn = drawn;
  document.body.dataset.chartsDrawn = String(drawn);
}

function ago(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function markClass(mark) { return mark === "✓" ? "mark-ok" : mark === "⚠" ? "mark-warn" : "mark-bad"; }

async function drawFirstStep() {
  const exp = state.selected[0];
  const box = $("#first-step");
  if (!exp) { box.replaceChildren(); return; }
  const st = await api(`/api/runs/${enc(exp)}/status`);
  const rows = st.first_step_numbers.map((n, i) => el("tr", {},
    el("td", {text: `${i + 1}. ${n.name}`}), el("td", {text: n.value}),
    el("td", {class: markClass(n.mark), text: `${n.mark} ${n.verdict}`})));
  const states = {running: "running", "stale-lock": "dead (its trainer is gone; lock left)", finished: "finished",
                  stopped: "dead: stopped before its last step", unknown: "not running"};
  const attempt = st.attempt && st.attempt.attempt > 1 ? `, attempt ${st.attempt.attempt}` : "";
  const head = `${exp}: ${states[st.state] || st.state}, step ${st.step ?? "—"}/${st.total_steps ?? "?"}${attempt}` +
               (st.eta_s != null ? `, ETA ${Math.round(st.eta_s / 60)} min` : "") +
               ` — first step (step ${st.first_step ?? "—"})`;
  const parts = [el("div", {id: "run-state", text: head})];
  if (st.vllm) {
    const v = st.vllm, age = v.age_s != null ? `${ago(v.age_s)} ago` : `at ${v.time}`;
    parts.push(el("div", {id: "vllm-gauge", class: v.current ? "" : "stale",
      text: `vLLM ${v.current ? "" : "last reading (not running), "}gen ${v.gen_tps.toFixed(1)} tok/s, ` +
            `prompt ${v.prompt_tps.toFixed(1)} tok/s (${age})`}));
  }
  const banner = collapseBanner(st.collapse);
  box.replaceChildren(...(banner ? [banner] : []), ...parts, el("table", {}, ...rows));
}

// a collapse in progress (rlkit.monitor.collapse): what fell, what came with it, the numbers, what to try
function collapseBanner(c) {
  if (!c) return null;
  const tips = el("ul", {}, ...c.advice.map((tip) => el("li", {text: tip})));
  return el("div", {id: "collapse", class: "banner bad", role: "alert", "data-kind": c.kind},
            el("b", {text: `✗ ${c.headline}`}), el("div", {class: "numbers", text: c.numbers}),
            el("div", {text: "what to try:"}), tips);
}

async function refresh(all) {
  let changed = all;
  for (const exp of state.selected) changed = (await pull(exp)) > 0 || changed;
  if (changed) { drawCharts(); await drawFirstStep(); }
  $("#updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

async function loadRuns() {
  const got = await api("/api/runs");
  const wanted = new URLSearchParams(location.search).getAll("run");
  const box = $("#runs");
  box.replaceChildren();
  const names = got.runs.map((r) => r.exp);
  // by default the most recent run that is running or finished (the server picks it), never a dead one
  if (!state.selected.length) state.selected = wanted.length ? wanted.filter((w) => names.includes(w))
                                                             : (got.default ? [got.default] : []);
  const marks = {running: " ●", finished: " ✓", dead: " ✗", unknown: ""};
  for (const r of got.runs) {
    const cb = el("input", {type: "checkbox", value: r.exp});
    cb.checked = state.selected.includes(r.exp);
    cb.onchange = async () => {
      state.selected = [...box.querySelectorAll("input:checked")].map((c) => c.value);
      await refresh(true);
    };
    const steps = r.step != null ? ` step ${r.step}/${r.total_steps ?? "?"}` : "";
    box.append(el("label", {class: `run ${r.state}`, "data-state": r.state, title: `${r.state}${steps}`}, cb,
                  ` ${r.exp}${marks[r.state] ?? ""} `));
  }
}

// ---- trajectory browser: #/trials/<exp>[/<step>[/<session>]]
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const onTrials = parts[0] === "trials";
  $("#curves").hidden = onTrials;
  $("#trials").hidden = !onTrials;
  $("#tab-curves").classList.toggle("active", !onTrials);
  $("#tab-trials").classList.toggle("active", onTrials);
  if (!onTrials) { drawCharts(); return; }
  const exp = parts[1] || state.selected[0];
  if (!exp) return;
  if (!parts[1]) { location.hash = `#/trials/${enc(exp)}`; return; }
  if (parts[3]) showTrial(exp, parts[2], parts[3]);
  else if (parts[2]) showStep(exp, parts[2]);
  else showSteps(exp);
}

function crumbs(exp, step, session) {
  const box = $("#crumbs");
  box.replaceChildren(el("a", {href: `#/trials/${enc(exp)}`, text: exp}));
  if (step) box.append(" / ", el("a", {href: `#/trials/${enc(exp)}/${step}`, text: `step ${step}`}));
  if (session) box.append(" / ", el("span", {text: session}));
}

function sortableTable(columns, rows, onRow, initial) {
  let key = initial, dir = -1;
  const table = el("table", {class: "list"});
  const render = () => {
    const sorted = [...rows].sort((a, b) => {
      const x = a[key], y = b[key];
      return (x == null) - (y == null) || (x < y ? -dir : x > y ? dir : 0);
    });
    const head = el("tr", {}, ...columns.map(([k, label]) => el("th", {text: label + (k === key ? (dir > 0 ? " ▲" : " ▼") : ""),
      onclick: () => { dir = k === key ? -dir : -1; key = k; render(); }})));
    const body = sorted.map((r) => {
      const tr = el("tr", {class: "row", "data-key": r.session ?? r.step}, ...columns.map(([k]) => el("td", {text: fmt(r[k])})));
      tr.onclick = () => onRow(r);
      return tr;
    });
    table.replaceChildren(head, ...body);
  };
  render();
  return table;
}

function fmt(v) {
  if (v == null) return "—";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(3);
  if (typeof v === "object") return Object.entries(v).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(", ");
  return String(v);
}

// The browser's content for one view, unless the user moved on while it loaded (a late answer
// must not paint over the view they are on). #browser's data-view says what it shows.
function showView(view, hash, ...nodes) {
  if (location.hash !== hash) return false;
  $("#browser").replaceChildren(...nodes);
  $("#browser").dataset.view = view;
  return true;
}

async function showSteps(exp) {
  crumbs(exp);
  const hash = location.hash;
  const got = await api(`/api/runs/${enc(exp)}/steps`);
  // passed: graded trials with reward >= 1, the pass rate's rule; outcomes say why trials ended
  const rows = got.steps.map((s) => ({...s, passed_of: s.graded != null ? `${s.passed}/${s.graded}` : null}));
  showView("steps", hash, sortableTable([["step", "step"], ["trials", "trials"], ["passed_of", "passed"],
    ["pass_rate", "pass rate"], ["reward_mean", "reward mean"], ["outcomes", "outcomes (why trials ended)"]], rows,
    (r) => { location.hash = `#/trials/${enc(exp)}/${r.step}`; }, "step"));
}

async function showStep(exp, step) {
  crumbs(exp, step);
  const hash = location.hash;
  const got = await api(`/api/runs/${enc(exp)}/steps/${enc(step)}/trials`);
  const rows = got.trials.map((t) => ({...t, passed_mark: t.passed ? "✓" : "—"}));
  showView("step", hash, sortableTable([["session", "trial"], ["task_id", "task"], ["passed_mark", "passed"],
    ["reward", "reward"], ["outcome", "outcome (why it ended)"], ["num_turns", "turns"], ["parse_failures", "parse failures"],
    ["masked", "masked"]], rows, (r) => { location.hash = `#/trials/${enc(exp)}/${step}/${enc(r.session)}`; }, "reward"));
}

function text(v) { return typeof v === "string" ? v : JSON.stringify(v, null, 1); }

function block(b) {
  const label = b.kind === "command" ? "$ " : b.label ? `${b.label}: ` : "";
  return el("pre", {class: `sent ${b.kind}`, text: `${label}${b.text}`});
}

async function showTrial(exp, step, session) {
  crumbs(exp, step, session);
  const hash = location.hash;
  const base = `/api/runs/${enc(exp)}/steps/${enc(step)}/trials/${enc(session)}`;
  const t = await api(base);
  const row = t.row || {};
  const head = el("div", {id: "trial-head"},
    el("b", {text: session}), ` — ${row.passed ? "passed" : "not passed"}, outcome ${fmt(row.outcome)}, ` +
    `reward ${fmt(t.reward ?? row.reward)} `,
    el("a", {href: `${base}/trajectory.json`, download: "", text: "download trajectory.json"}), " ",
    el("a", {href: location.href, text: "link"}));
  const parts = [head, el("h4", {text: "instruction"}), el("pre", {id: "instruction", text: t.instruction ?? "(not recorded)"})];
  parts.push(el("h4", {text: `turns (${t.turns.length})` + (t.observations_from && t.observations_from !== "trajectory.json"
    ? ` — what came back from ${t.observations_from}` : "")}));
  const anyObs = t.turns.some((turn) => turn.observations.length);
  t.turns.forEach((turn, i) => {
    const flags = [turn.finish_reason && `finish ${turn.finish_reason}`, turn.parse_failure && "tool call did not parse",
                   turn.tokens != null && `${turn.tokens} tokens`].filter(Boolean).join(", ");
    const box = el("div", {class: "turn"}, el("div", {class: "turn-head", text: `turn ${i + 1}${flags ? ` (${flags})` : ""}`}),
                   el("div", {class: "who", text: "the agent sent"}));
    if (turn.sent.length) turn.sent.forEach((b) => box.append(block(b)));
    else box.append(el("pre", {class: "sent empty", text: "(nothing)"}));
    box.append(el("div", {class: "who", text: "what came back"}));
    if (turn.observations.length) turn.observations.forEach((o) => box.append(el("pre", {class: "observation", text: o})));
    else box.append(el("pre", {class: "observation empty", text: anyObs ? "(nothing came back: the episode ended here)"
                                                                          : "(not recorded in this trial's files)"}));
    parts.push(box);
  });
  parts.push(el("h4", {text: "verifier output (verifier/test-stdout.txt)"}), el("pre", {id: "test-stdout", text: t.test_stdout ?? "(none)"}));
  if (t.exception) parts.push(el("h4", {text: "exception.txt"}), el("pre", {text: t.exception}));
  const raw = el("details", {}, el("summary", {text: `raw ATIF steps (${t.steps.length})`}));
  t.steps.forEach((s) => raw.append(el("pre", {class: "atif-step", text: JSON.stringify(s, null, 1)})));
  parts.push(raw);
  if (showView("trial", hash, ...parts)) document.body.dataset.trialShown = session;
}

async function main() {
  $("#ema").oninput = () => { $("#ema-value").textContent = $("#ema").value; drawCharts(); };
  $("#xaxis").onchange = drawCharts;
  window.onhashchange = route;
  await loadRuns();
  await refresh(true);
  route();
  setInterval(() => { if ($("#live").checked) refresh(false).catch((e) => { $("#updated").textContent = String(e); }); }, REFRESH_MS);
}
main().catch((e) => { document.body.dataset.error = String(e); $("#updated").textContent = String(e); });
