"""The client's exceptions: every failure a consumer sees is one of these.

Kubernetes API errors (`batteryop.kube.errors.KubeError`) and gRPC errors are mapped where the
client makes the call and chained (`raise ... from`), never leaked. No message carries a token.

    Exception
    └── ClientError                   base of everything below; `.claim` names the claim, if any
        ├── ConfigError               the client cannot be set up (kubeconfig, CA, arguments)
        ├── KubeAPIError              a Kubernetes API request failed (not found, forbidden,
        │                             unreachable); `.status` is the HTTP status, 0 if none came
        ├── ClaimError                a claim could not be made or kept
        │   ├── PoolExhaustedError    gave up waiting while the Pool had no MicroVM (CC-004)
        │   ├── PoolNotFoundError     gave up waiting: the claim's Pool does not exist
        │   ├── ClaimTimeoutError     gave up waiting for Bound for another reason (CC-005)
        │   └── LeaseLostError        the claim became Expired, or was deleted or replaced by
        │                             someone else (CC-012)
        ├── HostNotReadyError         the claim's Host reported HostReady=False (CC-013); the
        │                             claim is still held
        └── ExecError                 a command could not be run to its end
            ├── NoAgentAddressError   the claim's status names no Exec Agent address
            ├── ShellError            a shell could not be opened (no ssh client here, no
            │                         sshd in the MicroVM)
            ├── ExecUnavailableError  the agent could not be reached, or the stream was cut
            │                         before an exit code came
            ├── ExecPermissionError   the agent refused the token (UNAUTHENTICATED,
            │                         PERMISSION_DENIED)
            └── CommandFailedError    `ExecResult.check()` on a non-zero exit code
"""

from __future__ import annotations


class ClientError(Exception):
    """Base of every error the client raises. `claim` is the claim's name, when one is known."""

    def __init__(self, message: str, *, claim: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.claim = claim

    def __str__(self) -> str:
        return self.message


class ConfigError(ClientError):
    """The client cannot be set up: no usable kubeconfig, an unreadable CA, a bad argument."""


class KubeAPIError(ClientError):
    """A Kubernetes API request failed. `status` is its HTTP status (0: no answer came)."""

    def __init__(self, message: str, *, status: int = 0, claim: str | None = None) -> None:
        super().__init__(message, claim=claim)
        self.status = status


class ClaimError(ClientError):
    """A claim could not be made or kept."""


class PoolExhaustedError(ClaimError):
    """The caller stopped waiting while the claim's Pool had no available MicroVM (CC-004)."""


class PoolNotFoundError(ClaimError):
    """The caller stopped waiting while the claim's Pool did not exist."""


class ClaimTimeoutError(ClaimError):
    """The caller stopped waiting for the claim to bind (CC-005); the claim was deleted."""


class LeaseLostError(ClaimError):
    """The claim became Expired, or was deleted or replaced by someone else (CC-012)."""


class HostNotReadyError(ClientError):
    """The claim's Host reported HostReady=False (CC-013); the claim is still held.

    `reason` and `detail` are the condition's reason and message.
    """

    def __init__(self, message: str, *, reason: str, detail: str, claim: str | None = None) -> None:
        super().__init__(message, claim=claim)
        self.reason = reason
        self.detail = detail


class ExecError(ClientError):
    """A command could not be run to its end through the Exec Agent."""


class NoAgentAddressError(ExecError):
    """The claim's status names no Exec Agent address (the Host has not reported one)."""


class ShellError(ExecError):
    """A shell could not be opened in a MicroVM (CC-118): no OpenSSH client on this machine,
    or the MicroVM showed no ssh host key (its image runs no sshd)."""


class FileTransferError(ClientError):
    """A copy in or out of a MicroVM failed, or was refused (CC-115): a path that is not there,
    a target that cannot be written, an archive entry that would land outside its folder."""


class ExecUnavailableError(ExecError):
    """The Exec Agent could not be reached, or the stream ended without an exit code."""


class ExecPermissionError(ExecError):
    """The Exec Agent refused the call: the token was missing, wrong or not authorized."""


class CommandFailedError(ExecError):
    """A command exited non-zero and the caller asked for that to be an error (`check()`)."""

    def __init__(self, message: str, *, exit_code: int, claim: str | None = None) -> None:
        super().__init__(message, claim=claim)
        self.exit_code = exit_code
