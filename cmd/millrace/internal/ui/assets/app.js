// The page of millrace run --ui: one view at a time, each fed by its own server-sent event
// stream (GET /api/VIEW?stream=1), which the server pushes at most once a second.
'use strict';

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
};
const svg = (tag, attrs = {}, ...kids) => {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
};
const fmt = (n) => (n === undefined || n === null ? '0' : String(n));
const rate = (r) => (r === undefined ? '' : (r < 10 ? r.toFixed(1) : Math.round(r)) + ' rec/s');
const sum = (o) => Object.values(o || {}).reduce((a, b) => a + b, 0);
const time = (t) => (t ? new Date(t).toLocaleTimeString() : '');

// ui is the page's own state: the view shown and each view's parameters.
const ui = { view: 'graph', topic: '', highlight: '', filter: '', search: '', key: '', stream: null, inputs: [] };

function stream(view, params, render) {
  if (ui.stream) ui.stream.close();
  const q = new URLSearchParams({ stream: '1', ...params });
  ui.stream = new EventSource('/api/' + view + '?' + q);
  ui.stream.onmessage = (m) => {
    const env = JSON.parse(m.data);
    renderStatus(env);
    render(env.data, env);
  };
}

function show(view) {
  ui.view = view;
  for (const s of document.querySelectorAll('.view')) s.classList.toggle('active', s.id === 'view-' + view);
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === view);
  switch (view) {
    case 'graph': return stream('graph', {}, renderGraph);
    case 'records': return stream('records', { topic: ui.topic, record: ui.highlight }, renderRecords);
    case 'logs': return stream('logs', {}, renderLogs);
    case 'state': return stream('state', { q: ui.search, key: ui.key }, renderState);
    case 'send': return stream('graph', {}, renderSend);
  }
}

function renderStatus(g) {
  $('#run-name').textContent = 'millrace run: ' + (g.name || '');
  const st = $('#run-status');
  st.textContent = g.status;
  st.className = 'status ' + g.status;
  $('#run-error').textContent = g.error || '';
}

// layers places topics and streamlets in columns: input topics first, each streamlet one
// column right of the topics it reads, each outlet topic one right of its streamlet.
function layers(g) {
  const depth = {};
  for (const t of g.inputs || []) depth['t:' + t] = 0;
  for (let pass = 0; pass < 20; pass++) {
    for (const s of g.streamlets) {
      const d = Math.max(0, ...s.inlets.map((p) => depth['t:' + p.topic] ?? 0)) + 1;
      depth['s:' + s.name] = d;
      for (const p of s.outlets) depth['t:' + p.topic] = Math.max(depth['t:' + p.topic] ?? 0, d + 1);
    }
  }
  return depth;
}

function renderGraph(g, env) {
  const depth = layers(g);
  const cols = {};
  for (const id of Object.keys(depth)) (cols[depth[id]] ||= []).push(id);
  const pos = {};
  const W = 230, topicH = 34, boxH = 96;
  let height = 0;
  for (const [d, ids] of Object.entries(cols)) {
    let y = 10;
    for (const id of ids) {
      const h = id.startsWith('s:') ? boxH : topicH;
      pos[id] = { x: 10 + d * W, y, w: id.startsWith('s:') ? 190 : 170, h };
      y += h + 30;
    }
    height = Math.max(height, y);
  }
  const width = 10 + (Math.max(0, ...Object.keys(cols).map(Number)) + 1) * W;
  const root = svg('svg', { width, height, id: 'graph-svg' });
  const running = env.status === 'running';
  const edge = (from, to, label, id) => {
    const a = pos[from], b = pos[to];
    if (!a || !b) return;
    const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
    root.append(svg('path', { class: 'edge', d: `M${x1},${y1} C${x1 + 30},${y1} ${x2 - 30},${y2} ${x2},${y2}`, 'marker-end': 'url(#arrow)' }));
    root.append(svg('text', { class: 'edge-label', x: (x1 + x2) / 2 - 20, y: (y1 + y2) / 2 - 4, 'data-edge': id }, label));
  };
  root.append(svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: 'auto' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#8a99a8' }))));
  for (const s of g.streamlets) {
    const st = s.stats || {};
    for (const p of s.inlets) {
      const lag = (st.lag || {})[p.topic];
      const n = (st.committed || {})[p.topic];
      edge('t:' + p.topic, 's:' + s.name, [n ? n + ' rec' : '', running ? rate(g.rates['in:' + s.name + ':' + p.topic]) : '', lag ? 'lag ' + lag : ''].filter(Boolean).join(' · '), p.topic + '>' + s.name);
    }
    for (const p of s.outlets) {
      const n = (st.produced || {})[p.topic];
      edge('s:' + s.name, 't:' + p.topic, [n ? n + ' rec' : '', running ? rate(g.rates['out:' + s.name + ':' + p.topic]) : ''].filter(Boolean).join(' · '), s.name + '>' + p.topic);
    }
  }
  for (const [id, p] of Object.entries(pos)) {
    const name = id.slice(2);
    if (id.startsWith('t:')) {
      root.append(svg('g', { class: 'node-topic', 'data-topic': name, transform: `translate(${p.x},${p.y})` },
        svg('rect', { width: p.w, height: p.h, rx: 12 }), svg('text', { x: 10, y: 21 }, name)));
      continue;
    }
    const s = g.streamlets.find((x) => x.name === name);
    const st = s.stats || {};
    const out = st.outcomes || {};
    const lines = [
      `processes ${fmt(st.processes)} · in flight ${fmt(st.inFlight)}`,
      `done ${fmt(out.done)} · retries ${fmt(st.retries)}`,
      `failed ${fmt(out.failed)} · dead letters ${fmt(out.dead_letter)}`,
      `fallback ${fmt(out.fallback)} · committed ${fmt(sum(st.committed))}`,
    ];
    const gEl = svg('g', { class: 'node-streamlet health-' + s.health, 'data-streamlet': name, transform: `translate(${p.x},${p.y})` },
      svg('rect', { width: p.w, height: p.h, rx: 6 }), svg('text', { x: 10, y: 18, class: 'name' }, name));
    lines.forEach((l, i) => gEl.append(svg('text', { x: 10, y: 36 + i * 15, 'data-line': i }, l)));
    root.append(gEl);
  }
  $('#graph').replaceChildren(root);
}

function value(r) {
  if (r.value !== undefined) return JSON.stringify(r.value);
  if (r.text !== undefined) return r.text;
  if (r.valueBase64 !== undefined) return 'base64: ' + r.valueBase64;
  return 'null';
}

function renderRecords(v) {
  ui.topic = v.topic;
  $('#topics').replaceChildren(...v.topics.map((t) => el('li', {
    class: t.topic === v.topic ? 'active' : '', 'data-topic': t.topic,
    onclick: () => { ui.topic = t.topic; ui.highlight = ''; show('records'); },
  }, t.topic, ' ', el('span', { class: 'role' }, t.role + (t.writer ? ' of ' + t.writer : '') + ' · ' + t.total))));
  const t = v.topics.find((x) => x.topic === v.topic);
  $('#records-title').textContent = v.topic ? v.topic + (t ? ' (' + t.role + ')' : '') : 'no topic';
  const row = (r) => {
    const id = r.topic + '/' + r.partition + '/' + r.offset;
    const dead = r.error !== undefined;
    const headers = el('td', {}, ...(r.headers || []).map((h) => el('div', {}, h.key + ': ' + h.value)));
    const val = el('td', {}, el('pre', {}, value(r)));
    if (dead) {
      val.prepend(el('div', { class: 'reason' }, r.error));
      if (r.source) val.append(el('a', { class: 'source', 'data-source': r.source, onclick: () => openSource(r.source) }, 'source record ' + r.source));
    }
    return el('tr', { 'data-record': id, class: (dead ? 'dead ' : '') + (id === ui.highlight ? 'highlight' : '') },
      el('td', {}, r.partition + '/' + r.offset), el('td', {}, time(r.time)),
      el('td', {}, r.key ?? (r.keyBase64 ? 'base64: ' + r.keyBase64 : '—')), val, headers);
  };
  const rows = v.records.slice().reverse().map(row);
  // a source record no longer among the last records, fetched on its own: shown first
  if (v.asked) rows.unshift(row(v.asked));
  $('#records tbody').replaceChildren(...rows);
  let note = '';
  if (ui.highlight) {
    const hl = document.querySelector(`tr[data-record="${CSS.escape(ui.highlight)}"]`);
    if (hl) hl.scrollIntoView({ block: 'center' });
    else note = 'record ' + ui.highlight + ' is no longer among the last records the page keeps of its topic, and could not be read on its own (deleted, or the run has ended)';
    if (v.asked) note = 'record ' + ui.highlight + ' is older than the last records the page keeps of its topic: read on its own, shown first';
  }
  $('#records-note').textContent = note;
}

function openSource(source) {
  const parts = source.split('/');
  ui.topic = parts.slice(0, -2).join('/');
  ui.highlight = source;
  location.hash = '#records';
  show('records');
}

function table(head, rows) {
  return el('table', {}, el('thead', {}, el('tr', {}, ...head.map((h) => el('th', {}, h)))), el('tbody', {}, ...rows));
}

function renderLogs(list) {
  const f = ui.filter.trim();
  const keep = (r) => !f || r === f;
  $('#logs').replaceChildren(...list.map((s) => el('div', { 'data-streamlet': s.streamlet },
    el('h3', {}, s.streamlet),
    el('h4', {}, 'stderr'),
    table(['time', 'pid', 'record', 'attempt', 'line'], s.lines.filter((l) => keep(l.record)).reverse().map((l) =>
      el('tr', { class: 'stderr-line', 'data-record': l.record || '' }, el('td', {}, time(l.time)), el('td', {}, l.pid), el('td', {}, l.record || '—'), el('td', {}, l.attempt || ''), el('td', {}, el('pre', {}, l.text))))),
    el('h4', {}, 'record and process events'),
    table(['time', 'event', 'record', 'attempts', 'cause'], s.events.filter((e) => keep(e.record)).reverse().map((e) =>
      el('tr', { class: 'event', 'data-kind': e.kind }, el('td', {}, time(e.time)), el('td', {}, e.kind), el('td', {}, e.record || ''), el('td', {}, e.attempts || ''), el('td', {}, e.error || '')))),
    el('h4', {}, 'abstained (its --fallback outlet)'),
    table(['source record', 'reason'], s.abstains.filter((a) => keep(a.source)).reverse().map((a) =>
      el('tr', { class: 'abstain' }, el('td', {}, a.source ? el('a', { class: 'source', onclick: () => openSource(a.source) }, a.source) : ''), el('td', {}, a.error || '')))),
    el('h4', {}, 'metrics the action reported'),
    table(['metric', 'labels', 'count', 'sum'], (s.metrics || []).map((m) =>
      el('tr', { class: 'metric', 'data-metric': m.name }, el('td', {}, m.name), el('td', {}, Object.entries(m.labels || {}).map(([k, v]) => k + '=' + v).join(' ')), el('td', {}, m.count), el('td', {}, +m.sum.toFixed(4))))),
  )));
}

function renderState(v) {
  if (!v.inlets.length) {
    $('#state').replaceChildren(el('p', {}, 'No streamlet of this run keeps state (--state on its config line).'));
    return;
  }
  $('#state').replaceChildren(...v.inlets.map((i) => el('div', { 'data-changelog': i.changelog },
    el('h3', {}, i.streamlet + '.' + i.inlet, ' ', el('span', { class: 'role' }, i.held + ' keys held (changelog ' + i.changelog + ')' + (i.dropped ? '; ' + i.dropped + ' more not kept by the page' : ''))),
    el('div', { class: 'split' },
      el('ul', { class: 'list keys' }, ...i.keys.map((k) => el('li', {
        class: k === i.key ? 'active' : '', 'data-key': k,
        onclick: () => { ui.key = k; show('state'); },
      }, k))),
      i.state ? el('div', { class: 'key-state' }, el('h4', {}, 'state of ' + i.key),
        el('pre', { 'data-key-state': i.key }, JSON.stringify(i.state.value, null, 1)),
        el('p', { class: 'hint' }, 'changelog partition ' + i.state.partition + ', offset ' + i.state.offset + ', written ' + time(i.state.time)))
        : el('p', { class: 'hint' }, ui.key ? 'key ' + ui.key + ' holds no state here' : 'pick a key')))));
}

function renderSend(g) {
  const sel = $('#send-topic');
  const cur = sel.value;
  const want = (g.inputs || []).join('\n');
  if (sel.dataset.topics !== want) {
    sel.replaceChildren(...(g.inputs || []).map((t) => el('option', { value: t }, t)));
    sel.dataset.topics = want;
    if (cur) sel.value = cur;
  }
}

$('#send-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const headers = $('#send-headers').value.split('\n').filter((l) => l.trim()).map((l) => {
    const i = l.indexOf('=');
    return i < 0 ? { key: l.trim(), value: '' } : { key: l.slice(0, i).trim(), value: l.slice(i + 1) };
  });
  const key = $('#send-key').value;
  const body = { topic: $('#send-topic').value, key: key === '' ? null : key, value: $('#send-value').value, headers };
  const out = $('#send-result');
  out.textContent = 'sending…';
  try {
    const res = await fetch('/api/send', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const r = await res.json();
    out.className = res.ok ? 'sent' : 'error';
    out.textContent = res.ok ? `sent to ${r.topic}, partition ${r.partition}, offset ${r.offset}` : r.error;
  } catch (e) {
    out.className = 'error';
    out.textContent = 'the page cannot reach millrace run: ' + e;
  }
});
$('#logs-filter').addEventListener('input', (ev) => { ui.filter = ev.target.value; show('logs'); });
$('#state-search').addEventListener('input', (ev) => { ui.search = ev.target.value; show('state'); });

function route() {
  const v = (location.hash || '#graph').slice(1);
  show(['graph', 'records', 'logs', 'state', 'send'].includes(v) ? v : 'graph');
}
window.addEventListener('hashchange', route);
route();
