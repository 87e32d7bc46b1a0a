"""What the tests need from their environment, with a clear failure when it is missing."""
import os
import tempfile
import uuid


def need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(
            f"{name} is not set: these tests run against a real berth serve; "
            "test/e2e/python-client.test.ts sets it (see tests/support.py)"
        )
    return value


def server() -> str:
    """A single-user `berth serve` with approvals asked (manual)."""
    return need("BERTH_SERVER")


def tenant_server() -> str:
    """A `berth serve` with tenants: key BERTH_TEST_TENANT_KEY (tenant that forbids yolo)."""
    return need("BERTH_TEST_TENANT_SERVER")


def tenant_key() -> str:
    return need("BERTH_TEST_TENANT_KEY")


def task_id(prefix: str) -> str:
    """A task of its own for each test, so tests never see each other's environment."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def scratch_dir() -> str:
    """A fresh directory on the host (the server's backend is local, so the task sees it too)."""
    return tempfile.mkdtemp(prefix="berth-py-", dir=os.environ.get("BERTH_TEST_SCRATCH"))
