"""`from hermes_tools import ...` outside execute_code: the functions of
berth_client.hermes_tools, run against the Berth task named by BERTH_TASK."""
from berth_client.hermes_tools import *  # noqa: F401,F403
from berth_client.hermes_tools import __all__  # noqa: F401
