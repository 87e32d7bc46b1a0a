/** The bench-only tool that does nothing; shared by the bench server and the dispatch-overhead case. */
export const NOOP_TOOL = 'bench_noop';
export const NOOP_RESULT = '{"ok":true}';
