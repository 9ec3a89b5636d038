// Formatting helpers (pure): bytes, rates, ids, ages.

// A byte count from the API: a number, or upstream's Memory object {"inBytes": n}.
export function bytesOf(v) {
  if (typeof v === 'number') return v;
  if (v && typeof v === 'object' && typeof v.inBytes === 'number') return v.inBytes;
  return null;
}

export function fmtBytes(n) {
  if (n == null) return '–';
  const gib = n / 1024 ** 3;
  if (gib >= 1) return `${gib.toFixed(gib >= 100 ? 0 : 1)} GiB`;
  return `${(n / 1024 ** 2).toFixed(0)} MiB`;
}

export function fmtRate(t) {
  if (typeof t !== 'number' || !isFinite(t)) return '–';
  return t >= 100 ? t.toFixed(0) : t.toFixed(1);
}

export const short = (id) => (id ? String(id).slice(0, 8) : '');

export function fmtTime(iso) {
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().slice(11, 23);
}

// The one key of upstream's tagged unions ({"RunnerReady": {}} -> ["RunnerReady", {}]).
export function untag(tagged) {
  if (!tagged || typeof tagged !== 'object') return [null, {}];
  const [key] = Object.keys(tagged);
  return [key ?? null, key ? tagged[key] || {} : {}];
}
