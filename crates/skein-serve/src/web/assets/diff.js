// Word-level differences between two texts, for the compare view: the
// longest common subsequence of their words, after trimming what both
// begin and end with. The table costs (words of A) × (words of B) cells, so
// past MAX_CELLS the differing middle is marked changed as a whole rather
// than compared word by word (a long text still loads at once).

const MAX_CELLS = 4_000_000;

/** Words and the whitespace between them, so joining the tokens gives the text back. */
const tokenize = (text) => text.match(/\s+|[^\s]+/g) || [];

/**
 * Each text as segments `{text, changed}`: `changed` marks words the other
 * text lacks. Whitespace is never marked on its own.
 */
export function wordDiff(a, b) {
  const x = tokenize(a);
  const y = tokenize(b);
  let start = 0;
  while (start < x.length && start < y.length && x[start] === y[start]) start++;
  let endX = x.length;
  let endY = y.length;
  while (endX > start && endY > start && x[endX - 1] === y[endY - 1]) { endX--; endY--; }
  const keptX = new Array(x.length).fill(true);
  const keptY = new Array(y.length).fill(true);
  const n = endX - start;
  const m = endY - start;
  if (n * m > MAX_CELLS) {
    for (let i = start; i < endX; i++) keptX[i] = false;
    for (let j = start; j < endY; j++) keptY[j] = false;
  } else if (n > 0 || m > 0) {
    // lengths[i][j]: the LCS of x[start+i..endX] and y[start+j..endY].
    const width = m + 1;
    const lengths = new Uint32Array((n + 1) * width);
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lengths[i * width + j] = x[start + i] === y[start + j]
          ? lengths[(i + 1) * width + j + 1] + 1
          : Math.max(lengths[(i + 1) * width + j], lengths[i * width + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && x[start + i] === y[start + j]) { i++; j++; }
      else if (j >= m || (i < n && lengths[(i + 1) * width + j] >= lengths[i * width + j + 1])) {
        keptX[start + i] = false; i++;
      } else {
        keptY[start + j] = false; j++;
      }
    }
  }
  return { a: segments(x, keptX), b: segments(y, keptY) };
}

/** Runs of kept and changed tokens; whitespace joins the run around it. */
function segments(tokens, kept) {
  const out = [];
  tokens.forEach((token, i) => {
    const changed = !kept[i] && /\S/.test(token);
    const last = out[out.length - 1];
    if (last && (last.changed === changed || !/\S/.test(token))) last.text += token;
    else out.push({ text: token, changed });
  });
  // A changed run swallows the whitespace after it; give it back.
  for (let k = 0; k < out.length; k++) {
    const seg = out[k];
    if (!seg.changed) continue;
    const trailing = seg.text.match(/\s+$/);
    if (trailing) {
      seg.text = seg.text.slice(0, -trailing[0].length);
      out.splice(k + 1, 0, { text: trailing[0], changed: false });
    }
  }
  return out;
}
