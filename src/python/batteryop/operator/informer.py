"""The list+watch loop moved to `batteryop.kube.informer` so every deployable can share it; this
name stays for the operator's existing imports."""

from batteryop.kube.informer import list_watch

__all__ = ["list_watch"]
