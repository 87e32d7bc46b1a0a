"""Tests of the Python client against a real `berth serve`.

test/e2e/python-client.test.ts starts the servers and runs each test here as
`python -m unittest ID`. By hand: start `bin/berth serve` and set the
variables that tests/support.py names.
"""
