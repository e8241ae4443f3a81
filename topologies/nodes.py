"""Mininet nodes whose shell commands always end. Mininet waits for a command's end marker
forever, also when the node's shell is dead (it keeps the pty open, so no end of file ever
comes): a fabric torn down from outside (`mn -c`) would hang whoever asks a host anything.
Here a wait gives up at once when the shell has died, and after CMD_TIMEOUT_S otherwise.
"""
from __future__ import annotations

import time

from mininet.node import Host

CMD_TIMEOUT_S = 120.0
_POLL_MS = 200
_INTERRUPT_GRACE_S = 5.0


class NodeGone(RuntimeError):
    """A node's shell has ended, or one of its commands did not finish in time."""


class BoundedShell:
    """Mixed into a Mininet node class (before it): `cmd` and everything Mininet runs through
    `waitOutput` ends, raising NodeGone, when the shell dies or a command outlives the timeout."""

    cmd_timeout_s: float = CMD_TIMEOUT_S

    def shell_ended(self) -> str | None:
        """How this node's shell ended ("exit 0", "signal 9"), or None while it runs."""
        shell = getattr(self, "shell", None)
        if shell is None:
            return "stopped"
        rc = shell.poll()
        if rc is None:
            return None
        return f"signal {-rc}" if rc < 0 else f"exit {rc}"

    def waitOutput(self, verbose: bool = False, findPid: bool = True) -> str:  # noqa: N802 (Mininet's name)
        deadline = time.monotonic() + self.cmd_timeout_s
        output = ""
        while self.waiting:
            if (ended := self.shell_ended()) is not None:
                self.waiting = False
                raise NodeGone(f"{self.name}'s shell (pid {self.pid}) has ended ({ended}) while running "
                               f"`{self.lastCmd}`")
            if time.monotonic() > deadline:
                self._interrupt()
                raise NodeGone(f"{self.name}: `{self.lastCmd}` did not finish within {self.cmd_timeout_s:.0f} s")
            output += self.monitor(timeoutms=_POLL_MS, findPid=findPid)
        return output

    def _interrupt(self) -> None:
        """Ctrl-C the stuck command and wait briefly for its end marker, so the shell can be used again."""
        self.sendInt()
        deadline = time.monotonic() + _INTERRUPT_GRACE_S
        while self.waiting and time.monotonic() < deadline and self.shell_ended() is None:
            self.monitor(timeoutms=_POLL_MS)
        self.waiting = False


class BoundedHost(BoundedShell, Host):
    """A Mininet host whose commands end (see BoundedShell)."""
