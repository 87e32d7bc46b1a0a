"""gRPC failures as Python exceptions, from a server with tenants."""
import unittest

import grpc

from berth_client import (
    ERRORS_BY_CODE,
    Berth,
    BerthError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from berth_client.errors import error_for_name

from . import support


class TenantErrorsTest(unittest.TestCase):
    def test_unknown_key_raises_unauthenticated_on_unary_calls(self):
        with Berth(support.tenant_server(), api_key="not-a-key") as b:
            with self.assertRaises(UnauthenticatedError) as caught:
                b.task(support.task_id("py-err")).terminal("true")
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            with self.assertRaises(UnauthenticatedError):
                b.list_tools()

    def test_no_key_raises_unauthenticated_on_the_session(self):
        with Berth(support.tenant_server()) as b:
            with self.assertRaises(UnauthenticatedError):
                list(b.task(support.task_id("py-err")).session().run("terminal", {"command": "true"}))

    def test_a_known_key_works(self):
        with Berth(support.tenant_server(), api_key=support.tenant_key()) as b:
            t = b.task(support.task_id("py-ok"))
            try:
                self.assertEqual(t.terminal("echo tenant-ok")["output"], "tenant-ok")
            finally:
                t.end()

    def test_yolo_refused_by_policy_raises_permission_denied(self):
        with Berth(support.tenant_server(), api_key=support.tenant_key()) as b:
            t = b.task(support.task_id("py-yolo"), session_id="s1")
            session = t.session()
            session.set_yolo(True)
            with self.assertRaises(PermissionDeniedError) as caught:
                list(session.run("terminal", {"command": "true"}))
            self.assertIn("allow_yolo", caught.exception.details)


class ErrorTableTest(unittest.TestCase):
    def test_every_mapped_code_has_its_own_subclass(self):
        self.assertEqual(len(set(ERRORS_BY_CODE.values())), len(ERRORS_BY_CODE))
        for code, cls in ERRORS_BY_CODE.items():
            err = error_for_name(code.name, "details")
            self.assertIs(type(err), cls)
            self.assertTrue(issubclass(cls, BerthError))
            self.assertEqual(str(err), f"{code.name}: details")
        self.assertIs(type(error_for_name("INTERNAL", "x")), BerthError)


if __name__ == "__main__":
    unittest.main()
