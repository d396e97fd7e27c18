"""The keyed work queue moved to `batteryop.kube.workqueue` so every deployable can share it; this
name stays for the operator's existing imports."""

from batteryop.kube.workqueue import Answer, Retry, WorkQueue

__all__ = ["Answer", "Retry", "WorkQueue"]
