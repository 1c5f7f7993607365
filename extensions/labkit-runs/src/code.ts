/**
 * Python code the extension inserts into notebooks. Every value enters it as a Python string
 * literal (``pyString``), so a hostile run id or name cannot become code. Mirrors
 * ``labkit/runs/checks.py`` (``printable``) on the Python side. No imports: the tests run this
 * module under Node.
 */

/**
 * ``s`` as a Python string literal, in ASCII: quotes, backslashes, control characters,
 * line separators (U+2028/U+2029, which JSON leaves raw) and everything beyond ASCII become
 * escapes (``\uXXXX``, or ``\UXXXXXXXX`` beyond the BMP, so astral characters stay one code
 * point and not a surrogate pair as JSON writes them).
 */
export function pyString(s: string): string {
  let out = '"';
  for (const ch of String(s)) {
    const n = ch.codePointAt(0) as number;
    if (ch === '"' || ch === '\\') {
      out += '\\' + ch;
    } else if (ch === '\n') {
      out += '\\n';
    } else if (ch === '\r') {
      out += '\\r';
    } else if (ch === '\t') {
      out += '\\t';
    } else if (n >= 0x20 && n < 0x7f) {
      out += ch;
    } else if (n < 0x100) {
      out += '\\x' + n.toString(16).padStart(2, '0');
    } else if (n < 0x10000) {
      out += '\\u' + n.toString(16).padStart(4, '0');
    } else {
      out += '\\U' + n.toString(16).padStart(8, '0');
    }
  }
  return out + '"';
}

/** The code the Resume command inserts: it works in a notebook that has not imported labkit. */
export function resumeCode(id: string): string {
  return `import labkit as lk\n\nrun = lk.resume(${pyString(id)})`;
}

export function dashboardCode(id: string): string {
  return `import labkit as lk\n\nlk.notebook.Dashboard(${pyString(id)})`;
}
