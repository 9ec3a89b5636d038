// usePoll: a hook that fetches `path` (with `fetcher`, `get` unless given) now and again `ms` after
// each answer (never two at once).
// It keeps the last good data when a poll fails, and returns the error beside it so the page
// shows both: what it last knew, and why it cannot know more now.

import {useEffect, useState} from './preact-htm.js';
import {get} from './api.js';

export function usePoll(path, ms, enabled = true, fetcher = get) {
  const [result, setResult] = useState({data: null, error: null, at: 0});
  useEffect(() => {
    setResult({data: null, error: null, at: 0});  // another path: the old answer is not its answer
    if (!enabled || !path) return undefined;
    let stopped = false;
    let timer = null;
    const ctl = new AbortController();
    const tick = async () => {
      try {
        const data = await fetcher(path, ctl.signal);
        if (!stopped) setResult({data, error: null, at: Date.now()});
      } catch (e) {
        if (stopped || e.name === 'AbortError') return;
        setResult((r) => ({...r, error: e, at: Date.now()}));
      }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    tick();
    return () => { stopped = true; clearTimeout(timer); ctl.abort(); };
  }, [path, ms, enabled]);
  return result;
}
