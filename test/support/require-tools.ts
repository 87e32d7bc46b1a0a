/**
 * Whether a test that lacks a tool must fail instead of skipping: under
 * `make test` (BERTH_TEST_REQUIRE_TOOLS=1, after scripts/test-setup.sh has
 * installed or named every tool) and in CI. Run alone (`node --test FILE`), a
 * test without its tool skips and says which tool and how to get it.
 */
export function toolsRequired(): boolean {
  return Boolean(process.env.CI || process.env.BERTH_TEST_REQUIRE_TOOLS);
}
