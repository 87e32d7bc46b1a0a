import unittest

from berth_client.results import parse_result


class ParseResultTest(unittest.TestCase):
    def test_json_object_followed_by_a_hint_is_the_object(self):
        # Older servers put the hint after the object; today's carry it inside as _hint.
        text = '{"total_count": 60, "truncated": true}\n\n[Hint: Results truncated. Use offset=50 to see more.]'
        self.assertEqual(parse_result(text), {"total_count": 60, "truncated": True})
        today = '{"total_count": 60, "truncated": true, "_hint": "Results truncated. Use offset=50 to see more."}'
        self.assertEqual(parse_result(today)["_hint"], "Results truncated. Use offset=50 to see more.")

    def test_plain_json_and_plain_text(self):
        self.assertEqual(parse_result('{"output": "hi"}'), {"output": "hi"})
        self.assertEqual(parse_result("just words\n\n[Hint: x]"), "just words\n\n[Hint: x]")


if __name__ == "__main__":
    unittest.main()
