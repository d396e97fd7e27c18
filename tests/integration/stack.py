"""The integration stack's handle and the waits tests use on it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from batteryop.api import names, samples
from batteryop.testing.fake_battery import FakeBattery
from batteryop.testing.localstack import LocalStack
from batteryop.testing.operator_runner import OperatorProcess


@dataclass
class Stack:
    """The local stack plus an admin client for the test's own reads and writes."""

    local: LocalStack
    api: k8s.ApiClient

    @property
    def battery(self) -> FakeBattery:
        return self.local.battery

    @property
    def operator(self) -> OperatorProcess:
        return self.local.operator

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)


def _followed(
    stack: Stack,
    plural: str,
    namespace: str,
    *,
    timeout: int,
    field_selector: str | None = None,
) -> Iterator[dict[str, dict[str, Any]]]:
    """The objects of `plural` by name as listed, then again after each watch event from the
    list's resourceVersion, until `timeout`.

    Watching from the list's resourceVersion delivers every change made after the list. (A
    GET, then a watch without a resourceVersion, missed a deletion that came between them:
    the watch's initial state no longer held the object and no DELETED event followed, so a
    claim the operator released at once was waited for in vain.)
    """
    custom = stack.custom
    selector = {"field_selector": field_selector} if field_selector else {}
    listed = custom.list_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, plural, **selector
    )
    bodies = {b["metadata"]["name"]: b for b in listed["items"]}
    yield bodies
    w = watch.Watch()
    try:
        for event in w.stream(
            custom.list_namespaced_custom_object,
            names.GROUP,
            names.VERSION,
            namespace,
            plural,
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=timeout,
            **selector,
        ):
            name = event["object"]["metadata"]["name"]
            if event["type"] == "DELETED":
                bodies.pop(name, None)
            else:
                bodies[name] = event["object"]
            yield bodies
    finally:
        w.stop()


def wait_for(
    stack: Stack,
    plural: str,
    namespace: str,
    name: str,
    predicate: Callable[[dict[str, Any] | None], bool],
    *,
    timeout: int = 120,
    what: str = "",
) -> dict[str, Any] | None:
    """Watch one object until `predicate(body)` holds (body None: deleted); fail with the last."""
    last: dict[str, Any] | None = None
    followed = _followed(
        stack, plural, namespace, timeout=timeout, field_selector=f"metadata.name={name}"
    )
    for bodies in followed:
        last = bodies.get(name)
        if predicate(last):
            return last
    raise AssertionError(
        f"{plural}/{name}: {what or 'condition'} not reached in {timeout}s; last: "
        f"{json.dumps(last, indent=1)[:3000]}\n--- operator log ---\n{stack.operator.logs()[-5000:]}"
    )


def wait_for_all(
    stack: Stack,
    plural: str,
    namespace: str,
    predicate: Callable[[dict[str, dict[str, Any]]], bool],
    *,
    timeout: int = 120,
    what: str = "",
) -> dict[str, dict[str, Any]]:
    """Watch every object of `plural` in `namespace` until `predicate(bodies by name)` holds."""
    bodies: dict[str, dict[str, Any]] = {}
    for bodies in _followed(stack, plural, namespace, timeout=timeout):
        if predicate(bodies):
            return dict(bodies)
    summary = {
        n: (phase(b), (condition(b, "Bound") or {}).get("reason")) for n, b in bodies.items()
    }
    raise AssertionError(
        f"{plural} in {namespace}: {what or 'condition'} not reached in {timeout}s; last: "
        f"{summary}\n--- operator log ---\n{stack.operator.logs()[-5000:]}"
    )


def condition(body: dict[str, Any] | None, type: str) -> dict[str, Any] | None:
    for c in ((body or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type:
            return dict(c)
    return None


def condition_is(type: str, **fields: str) -> Callable[[dict[str, Any] | None], bool]:
    """A `wait_for` predicate: the object's `type` condition has each of `fields`."""

    def holds(body: dict[str, Any] | None) -> bool:
        found = condition(body, type) or {}
        return all(found.get(key) == value for key, value in fields.items())

    return holds


def phase(body: dict[str, Any] | None) -> str | None:
    return ((body or {}).get("status") or {}).get("phase")


def ready(body: dict[str, Any] | None) -> bool:
    c = condition(body, "Ready")
    return c is not None and c.get("status") == "True"


def create_demo_pool(stack: Stack, namespace: str) -> None:
    stack.custom.create_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        namespace,
        names.POOL_PLURAL,
        samples.demo_pool(namespace=namespace),
    )


def ready_pool(stack: Stack, namespace: str) -> dict[str, Any]:
    """The demo Pool, created and waited for until Ready=True."""
    create_demo_pool(stack, namespace)
    body = wait_for(stack, names.POOL_PLURAL, namespace, "demo", ready, what="Ready=True")
    assert body is not None
    return body


def create_claim(stack: Stack, namespace: str, name: str) -> dict[str, Any]:
    body = samples.sample_claim(name=name, pool="demo", namespace=namespace)
    return dict(
        stack.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL, body
        )
    )


def wait_phase(stack: Stack, namespace: str, name: str, want: str) -> dict[str, Any]:
    """The claim once its phase is `want`."""
    body = wait_for(
        stack,
        names.CLAIM_PLURAL,
        namespace,
        name,
        lambda b: phase(b) == want,
        what=f"phase {want}",
    )
    assert body is not None
    return body
