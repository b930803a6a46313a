// Boxes in columns with a line drawn in an SVG for each edge between two
// boxes (measured after layout), an optional label at the line's middle.
// The routing view draws a discovery chain with it, the topology view a
// service's callers and callees.
import { html, useState, useLayoutEffect, useRef } from "./vendor/htm-preact-3.1.1.js";

// columns: [{ key, title, boxes: [{ id, title, lines, kind }] }]
// edges: [{ from, to, label, kind }]
export function Graph({ id, columns, edges }) {
  const container = useRef(null);
  const [lines, setLines] = useState([]);
  const signature = JSON.stringify([columns.map((c) => c.boxes.map((b) => [b.id, b.lines])), edges]);
  useLayoutEffect(() => {
    const root = container.current;
    if (!root) return;
    const origin = root.getBoundingClientRect();
    const at = (node) => root.querySelector(`[data-node="${CSS.escape(node)}"]`);
    const drawn = [];
    for (const edge of edges) {
      const from = at(edge.from);
      const to = at(edge.to);
      if (!from || !to) continue;
      const a = from.getBoundingClientRect();
      const b = to.getBoundingClientRect();
      drawn.push({
        ...edge,
        x1: a.right - origin.left, y1: a.top + a.height / 2 - origin.top,
        x2: b.left - origin.left, y2: b.top + b.height / 2 - origin.top,
      });
    }
    setLines(drawn);
  }, [signature]);
  return html`<div class=${`chain cols-${columns.length}`} ref=${container} id=${id}>
    <svg class="edges" aria-hidden="true">
      ${lines.map((l) => html`<g data-from=${l.from} data-to=${l.to}>
        <line x1=${l.x1} y1=${l.y1} x2=${l.x2} y2=${l.y2} class=${l.kind || ""} />
        ${l.label && html`<text x=${(l.x1 + l.x2) / 2} y=${(l.y1 + l.y2) / 2 - 4} text-anchor="middle">${l.label}</text>`}
      </g>`)}
    </svg>
    ${columns.map((column) => html`<div class="column" data-column=${column.key}>
      <h3>${column.title}</h3>
      ${column.boxes.map((box) => html`<div class=${`box ${box.kind || column.key}`} data-node=${box.id}>
        <strong>${box.title}</strong>
        ${(box.lines || []).map((line) => html`<div class="detail">${line}</div>`)}
      </div>`)}
    </div>`)}
  </div>`;
}
