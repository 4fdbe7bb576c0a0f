// Small SVG charts drawn from numbers: no library, no inline styles (the CSP allows none);
// colours come from classes in app.css.
const NS = 'http://www.w3.org/2000/svg';
const W = 360;
const H = 170;
const PAD = { left: 44, right: 8, top: 10, bottom: 22 };

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

function frame(label) {
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label });
  root.append(svg('title', {}, label));
  return root;
}

function hhmm(d) {
  return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

function axes(root, labels, top, unit) {
  const x0 = PAD.left;
  const x1 = W - PAD.right;
  const y0 = H - PAD.bottom;
  root.append(svg('line', { class: 'axis', x1: x0, y1: y0, x2: x1, y2: y0 }));
  root.append(svg('line', { class: 'axis', x1: x0, y1: PAD.top, x2: x0, y2: y0 }));
  root.append(svg('text', { x: x0 - 6, y: PAD.top + 8, 'text-anchor': 'end' }, `${format(top)}${unit}`));
  root.append(svg('text', { x: x0 - 6, y: y0, 'text-anchor': 'end' }, `0${unit}`));
  if (labels.length) {
    root.append(svg('text', { x: x0, y: H - 6 }, hhmm(labels[0])));
    root.append(svg('text', { x: x1, y: H - 6, 'text-anchor': 'end' }, hhmm(labels[labels.length - 1])));
  }
}

function format(n) {
  if (n >= 1000) return `${Math.round(n / 100) / 10}k`;
  if (n >= 10) return String(Math.round(n));
  return String(Math.round(n * 100) / 100);
}

/** A round number at or above `n`, for the top of the scale. */
function ceiling(n) {
  if (n <= 0) return 1;
  const step = 10 ** Math.floor(Math.log10(n));
  return [1, 2, 5, 10].map((m) => m * step).find((c) => c >= n);
}

/** One line per series (values may be null: a gap). `log`: a log scale, for latencies. */
export function lineChart(labels, series, { label, unit = '', log = false }) {
  const root = frame(label);
  const values = series.flat().filter((v) => v !== null && v !== undefined);
  const top = ceiling(Math.max(0, ...values));
  const scale = log ? (v) => Math.log10(1 + v) / Math.log10(1 + top) : (v) => v / top;
  axes(root, labels, top, unit);
  const n = Math.max(1, labels.length - 1);
  const x = (i) => PAD.left + ((W - PAD.left - PAD.right) * i) / n;
  const y = (v) => H - PAD.bottom - (H - PAD.top - PAD.bottom) * scale(v);
  series.forEach((points, s) => {
    let d = '';
    let pen = false;
    points.forEach((v, i) => {
      if (v === null || v === undefined) {
        pen = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)} `;
      pen = true;
    });
    if (d) root.append(svg('path', { d: d.trim(), class: `line-${s + 1}`, 'data-series': s }));
    // A point with no neighbour draws no line: mark it.
    points.forEach((v, i) => {
      const alone = v !== null && v !== undefined && (points[i - 1] ?? null) === null && (points[i + 1] ?? null) === null;
      if (alone) root.append(svg('circle', { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 3, class: `dot-${s + 1}` }));
    });
  });
  if (!values.length) root.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no firings yet'));
  return root;
}

/** Bars side by side per label, one class per series. */
export function barChart(labels, series, { label, classes }) {
  const root = frame(label);
  const top = ceiling(Math.max(0, ...series.flat()));
  axes(root, labels, top, '');
  const slot = (W - PAD.left - PAD.right) / Math.max(1, labels.length);
  const width = Math.max(1, (slot * 0.8) / series.length);
  series.forEach((values, s) => {
    values.forEach((v, i) => {
      if (!v) return;
      const height = ((H - PAD.top - PAD.bottom) * v) / top;
      root.append(svg('rect', {
        x: (PAD.left + slot * i + width * s).toFixed(1),
        y: (H - PAD.bottom - height).toFixed(1),
        width: width.toFixed(1),
        height: height.toFixed(1),
        class: classes[s],
      }, svg('title', {}, `${hhmm(labels[i])}: ${v}`)));
    });
  });
  return root;
}
