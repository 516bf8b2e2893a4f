"""Loopback port allocation without collisions between the workers of the local cluster."""

from __future__ import annotations

import socket
import threading

__all__ = ["PortAllocator"]


class PortAllocator:
    """Hands out free TCP ports on 127.0.0.1, never the same one twice while it is reserved."""

    def __init__(self) -> None:
        self._reserved: set[int] = set()
        self._lock = threading.Lock()

    def allocate(self) -> int:
        with self._lock:
            for _ in range(100):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", 0))
                    port = int(s.getsockname()[1])
                if port not in self._reserved:
                    self._reserved.add(port)
                    return port
        raise RuntimeError("could not find a free loopback port in 100 tries")

    def reserve(self, ports: list[int]) -> None:
        with self._lock:
            self._reserved.update(ports)

    def release(self, ports: list[int]) -> None:
        with self._lock:
            self._reserved.difference_update(ports)
