// A small, safe markdown renderer: text in, DOM nodes out.
//
// Agent text is untrusted. Nothing here ever parses HTML: every piece of text becomes a
// Text node (document.createTextNode) inside elements created by name, so `<img onerror>`
// or `<script>` in a reply shows as those characters. Links keep only http(s) and mailto
// targets, open in a new tab without opener or referrer.
//
// Supported: paragraphs, # headings, ``` fenced code, > quotes, - / * / 1. lists,
// `code`, **bold**, *italic* / _italic_, [text](url), and hard line breaks kept.

const SAFE_URL = /^(https?:|mailto:)/i;
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+?)\*\*|\[([^\]\n]+)\]\(([^)\s]+)\)|\*([^*\s][^*\n]*?)\*|(?<![\w])_([^_\s][^_\n]*?)_(?![\w])/g;

function el(doc, name, children) {
  const node = doc.createElement(name);
  for (const child of children ?? []) node.append(child);
  return node;
}

/** Inline markdown of one run of text, as nodes. */
export function inline(doc, text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(doc.createTextNode(text.slice(last, m.index)));
    if (m[1] !== undefined) {
      const code = doc.createElement("code");
      code.textContent = m[2];
      out.push(code);
    } else if (m[3] !== undefined) {
      out.push(el(doc, "strong", inline(doc, m[3])));
    } else if (m[4] !== undefined) {
      if (SAFE_URL.test(m[5])) {
        const a = el(doc, "a", inline(doc, m[4]));
        a.setAttribute("href", m[5]);
        a.setAttribute("target", "_blank");
        a.setAttribute("rel", "noopener noreferrer");
        out.push(a);
      } else {
        out.push(doc.createTextNode(m[0]));
      }
    } else {
      out.push(el(doc, "em", inline(doc, m[6] ?? m[7])));
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(doc.createTextNode(text.slice(last)));
  return out;
}

function withBreaks(doc, lines) {
  const out = [];
  lines.forEach((line, i) => {
    if (i > 0) out.push(doc.createElement("br"));
    out.push(...inline(doc, line));
  });
  return out;
}

const LIST_ITEM = /^\s*([-*+]|\d+[.)])\s+(.*)$/;

/** A DocumentFragment of `source` rendered. */
export function render(doc, source) {
  const frag = doc.createDocumentFragment();
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++; // the closing fence (or the end: a fence still streaming)
      const code = doc.createElement("code");
      if (fence[2]) code.dataset.lang = fence[2];
      code.textContent = body.join("\n");
      frag.append(el(doc, "pre", [code]));
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2); // below the page's own h1/h2
      frag.append(el(doc, "h" + level, inline(doc, heading[2])));
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) body.push(lines[i++].replace(/^\s*>\s?/, ""));
      frag.append(el(doc, "blockquote", [render(doc, body.join("\n"))]));
      continue;
    }
    const item = line.match(LIST_ITEM);
    if (item) {
      const ordered = /\d/.test(item[1]);
      const list = doc.createElement(ordered ? "ol" : "ul");
      while (i < lines.length) {
        const m = lines[i].match(LIST_ITEM);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        const parts = [m[2]];
        i++;
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !LIST_ITEM.test(lines[i])) {
          parts.push(lines[i++].trim());
        }
        list.append(el(doc, "li", withBreaks(doc, parts)));
      }
      frag.append(list);
      continue;
    }
    const para = [lines[i++]]; // always takes the line: no input can stall the loop
    while (i < lines.length && lines[i].trim() && !/^\s*(```|~~~|>|#{1,6}\s)/.test(lines[i])
           && !LIST_ITEM.test(lines[i])) {
      para.push(lines[i++]);
    }
    frag.append(el(doc, "p", withBreaks(doc, para)));
  }
  return frag;
}
