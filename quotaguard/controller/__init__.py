"""The quota controller: every interval, read -> plan_cycle -> diff -> write (`quota_controller`
says how, and how it uses threads)."""

from quotaguard.controller.quota_controller import Controller
from quotaguard.controller.settings import ControllerSettings, ControllerStatus

__all__ = ["Controller", "ControllerSettings", "ControllerStatus"]
