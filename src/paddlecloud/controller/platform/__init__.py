"""The platform: the controller's parts wired together (``wiring.Platform``), and the use cases that
span services (``user_deletion``). The top of the controller: nothing in it imports this package.
"""

from __future__ import annotations

from paddlecloud.controller.platform.user_deletion import UserDeletion
from paddlecloud.controller.platform.wiring import Platform

__all__ = ["Platform", "UserDeletion"]
