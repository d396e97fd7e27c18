"""The authorization matrix (EA-010..EA-014), end to end: the real API server reviews real tokens
bound to real Secrets, claims are real objects with a written status, the agent is a real TLS
gRPC server and flintlockd a real (fake) process. Every refusal names its check, and the fake
flintlockd is asked afterwards whether anything ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import grpc
import grpc.aio
import pytest
from google.protobuf import empty_pb2
from kubernetes import client as k8s

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2, microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from battery_protos.flintlock.services.microvmexec.v1alpha1.microvmexec_pb2_grpc import (
    MicroVMExecStub,
)
from batteryop.api import names
from batteryop.api.claim import UNREAD_EXPIRY_GRACE, MicroVMClaim
from batteryop.api.clock import FakeClock
from batteryop.api.conditions import ClaimPhase
from batteryop.exec_agent.auth import CREDENTIAL_ID_EXTRA, token_payload
from batteryop.exec_agent.flintlockd import EXEC_SERVICE
from batteryop.exec_agent.timing import Phase
from batteryop.kube.config import KubeConfig
from batteryop.testing.controlplane import (
    ControlPlane,
    admin_client,
    ensure_service_account,
    request_token,
)
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.exec_agent import (
    AGENT_NAMESPACE,
    OTHER_NODE,
    Agent,
    Holders,
    Holding,
    Pki,
    drain,
    joined,
    run_exec,
    running_agent,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd

pytestmark = pytest.mark.controlplane

Start = microvmexec_pb2.ExecStart
Request = microvmexec_pb2.ExecCommandRequest


async def refusal(
    agent: Agent, metadata: tuple[tuple[str, str], ...], start: Start
) -> grpc.aio.AioRpcError:
    """The error an exec of `start` ends with (fails the test if it succeeds)."""
    async with agent.channel() as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run_exec(channel, metadata, start)
    return caught.value


async def assert_nothing_ran(flintlockd: FakeFlintlockd) -> None:
    assert await flintlockd.exec_history() == []


@pytest.mark.req("EA-010", "EA-011", "EA-012", "EA-013", "EA-020")
async def test_the_holder_runs_a_command_in_its_microvm(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    async with agent.channel() as channel:
        start = Start(uid=holding.microvm_uid, cmd="echo", args=["hello"])
        responses = await run_exec(channel, holding.metadata, start)
    assert joined(responses, "stdout") == b"hello\n"
    assert responses[-1].WhichOneof("payload") == "exit_code"
    assert responses[-1].exit_code == 0
    assert [s.cmd for s in await flintlockd.exec_history()] == ["echo"]
    timed = {phase for phase, _ in agent.phases}
    assert timed == {Phase.TOKEN_REVIEW, Phase.CLAIM_READ, Phase.FLINTLOCKD_OPEN, Phase.EXEC}


@pytest.mark.req("EA-012")
async def test_the_api_server_reviews_the_token_id_but_not_the_secret_it_is_bound_to(
    holders: Holders,
) -> None:
    """Why the agent reads the binding from the reviewed token (auth.py, step 3)."""
    holding = await holders.hold()
    review = k8s.AuthenticationV1Api(holders.api).create_token_review(
        k8s.V1TokenReview(
            spec=k8s.V1TokenReviewSpec(token=holding.token, audiences=[names.EXEC_AGENT_AUDIENCE])
        )
    )
    assert review.status.authenticated
    extra = review.status.user.extra or {}
    payload = token_payload(holding.token)
    assert payload is not None
    assert extra[CREDENTIAL_ID_EXTRA] == [f"JTI={payload['jti']}"]
    assert not any("secret" in key for key in extra)
    assert payload["kubernetes.io"]["secret"] == {
        "name": names.exec_secret_name(holding.claim),
        "uid": holding.secret_uid,
    }


@pytest.mark.req("EA-010")
@pytest.mark.parametrize(
    ("metadata", "detail"),
    [
        ((), "no authorization metadata"),
        ((("authorization", "Basic dXNlcjpwdw=="),), "not a Bearer authorization"),
        ((("authorization", "Bearer "),), "empty"),
        ((("authorization", "Bearer a"), ("authorization", "Bearer b")), "more than one"),
    ],
)
async def test_a_call_without_one_bearer_token_is_unauthenticated(
    agent: Agent,
    holders: Holders,
    flintlockd: FakeFlintlockd,
    metadata: tuple[tuple[str, str], ...],
    detail: str,
) -> None:
    holding = await holders.hold()
    error = await refusal(agent, metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details().startswith("bearer token: ")
    assert detail in error.details()
    assert not any(phase == Phase.TOKEN_REVIEW for phase, _ in agent.phases)
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-010", "EA-100")
async def test_a_refusal_before_any_review_reaches_the_caller_every_time(
    pki: Pki, agent_identity: KubeConfig, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    """The agent refuses a bad bearer token without asking the API server, so its refusal can
    be ready before the caller's start is written. Sent then, grpc's client fails the write
    and reports INTERNAL ("Internal error from Core") instead of the refusal (about 1 call in
    100 here before the agent waited for the start). 200 calls, each on a new connection as
    a fresh client's would be: every one must read UNAUTHENTICATED (with a bucket of failed
    authentications big enough for all 200: EA-105 is not what this is about)."""
    holding = await holders.hold()
    metadata = (("authorization", "Bearer a"), ("authorization", "Bearer b"))
    start = Start(uid=holding.microvm_uid, cmd="true")
    codes = []
    async with running_agent(
        pki, agent_identity, flintlockd.target, failed_auth_burst=1000
    ) as agent:
        for _ in range(200):
            error = await refusal(agent, metadata, start)
            codes.append((error.code(), error.details()))
    assert set(codes) == {
        (
            grpc.StatusCode.UNAUTHENTICATED,
            "bearer token: more than one authorization metadata entry",
        )
    }
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-010")
async def test_a_token_the_api_server_does_not_know_is_unauthenticated(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    header, payload, _ = holding.token.split(".")
    forged = f"{header}.{payload}.bm90LWEtc2lnbmF0dXJl"
    error = await refusal(
        agent, (("authorization", f"Bearer {forged}"),), Start(uid=holding.microvm_uid, cmd="true")
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "token review: the API server did not authenticate the token"
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-010", "EA-107")
async def test_a_token_for_another_audience_is_unauthenticated_without_a_review(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    secret = (names.exec_secret_name(holding.claim), holding.secret_uid)
    other = holders.token(holding.service_account, secret, audience="https://kubernetes.default")
    error = await refusal(
        agent, (("authorization", f"Bearer {other}"),), Start(uid=holding.microvm_uid, cmd="true")
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == (
        f"bearer token: the token is not for audience {names.EXEC_AGENT_AUDIENCE}"
    )
    assert agent.phases == []  # no TokenReview, no claim read: its own claims rule it out
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-011")
async def test_another_service_accounts_token_bound_to_the_claims_secret_is_denied(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    ensure_service_account(holders.api, holders.namespace, "intruder")
    secret = (names.exec_secret_name(holding.claim), holding.secret_uid)
    token = holders.token("intruder", secret)
    error = await refusal(
        agent, (("authorization", f"Bearer {token}"),), Start(uid=holding.microvm_uid, cmd="true")
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    intruder = f"system:serviceaccount:{holders.namespace}:intruder"
    assert error.details() == (
        f"holder: {intruder} is not the Holder of claim {holders.namespace}/{holding.claim}"
    )
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-012", "EA-013", "EA-100")
async def test_a_token_bound_to_another_claims_secret_cannot_reach_this_microvm(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    mine = await holders.hold()
    theirs = await holders.hold()  # same Holder ServiceAccount, another claim
    error = await refusal(agent, mine.metadata, Start(uid=theirs.microvm_uid, cmd="true"))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == (
        f"claim: claim {holders.namespace}/{mine.claim} "
        f"does not hold microvm '{theirs.microvm_uid}'"
    )
    assert theirs.claim not in error.details()
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-012")
async def test_a_token_not_bound_to_a_claims_secret_is_denied(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    unbound = holders.token(holding.service_account, None)
    error = await refusal(
        agent,
        (("authorization", f"Bearer {unbound}"),),
        Start(uid=holding.microvm_uid, cmd="true"),
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "token binding: the token is not bound to a Secret"

    core = k8s.CoreV1Api(holders.api)
    other = core.create_namespaced_secret(
        holders.namespace, k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="not-a-claim-secret"))
    )
    token = holders.token(holding.service_account, ("not-a-claim-secret", other.metadata.uid))
    error = await refusal(
        agent, (("authorization", f"Bearer {token}"),), Start(uid=holding.microvm_uid, cmd="true")
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details().startswith("token binding: the token is bound to Secret ")
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-012")
async def test_a_token_bound_to_a_recreated_secret_of_the_same_name_is_refused(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    core = k8s.CoreV1Api(holders.api)
    secret_name = names.exec_secret_name(holding.claim)
    core.delete_namespaced_secret(secret_name, holders.namespace)
    new_uid = holders.create_secret(holding.claim)
    assert new_uid != holding.secret_uid
    # The API server judges a bound token by the Secret its informer holds, which follows the
    # delete and the create within moments; wait for its verdict before asking the agent.
    await reviewed_unauthenticated(holders.api, holding.token)

    error = await refusal(agent, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details().startswith("token review: ")
    await assert_nothing_ran(flintlockd)

    # A token bound to the Secret as it is now works: the claim itself is fine.
    fresh = holders.token(holding.service_account, (secret_name, new_uid))
    async with agent.channel() as channel:
        responses = await run_exec(
            channel,
            (("authorization", f"Bearer {fresh}"),),
            Start(uid=holding.microvm_uid, cmd="true"),
        )
    assert responses[-1].exit_code == 0


async def reviewed_unauthenticated(api: k8s.ApiClient, token: str, timeout: float = 10) -> None:
    """Wait (bounded) until the API server's TokenReview no longer authenticates `token`."""
    review = k8s.V1TokenReview(
        spec=k8s.V1TokenReviewSpec(token=token, audiences=[names.EXEC_AGENT_AUDIENCE])
    )
    authn = k8s.AuthenticationV1Api(api)
    async with asyncio.timeout(timeout):
        while authn.create_token_review(review).status.authenticated:
            await asyncio.sleep(0.05)  # polling the API server's verdict, not synchronising


async def deleted_after_binding(holders: Holders) -> Holding:
    """A claim held as usual, then deleted before the exec."""
    holding = await holders.hold()
    k8s.CustomObjectsApi(holders.api).delete_namespaced_custom_object(
        names.GROUP, names.VERSION, holders.namespace, names.CLAIM_PLURAL, holding.claim
    )
    return holding


# Each claim that does not qualify: how it is held, and the refusal's detail (`{claim}` is the
# claim's namespace/name, `{node}` the agent's Host).
CLAIM_REFUSALS = [
    pytest.param(
        lambda h: h.hold(expires_in=timedelta(minutes=-1)),
        "claim: claim {claim} has an expired lease",
        id="an_expired_claim",
    ),
    pytest.param(
        lambda h: h.hold(expires_in=None, bound_ago=timedelta(minutes=1)),
        "claim: claim {claim} has no lease expiry yet",
        id="a_claim_bound_a_minute_ago_without_a_lease_expiry",
    ),
    pytest.param(
        lambda h: h.hold(phase=ClaimPhase.PENDING),
        "claim: claim {claim} is Pending, not Bound",
        id="a_pending_claim",
    ),
    pytest.param(
        lambda h: h.hold(node=OTHER_NODE),
        "claim: claim {claim} is not on Host {node}",
        id="a_claim_on_another_host",
    ),
    pytest.param(
        deleted_after_binding,
        "claim lookup: there is no claim {claim}",
        id="a_deleted_claim",
    ),
]


@pytest.mark.req("EA-013")
@pytest.mark.parametrize(("hold", "detail"), CLAIM_REFUSALS)
async def test_a_claim_that_does_not_qualify_is_denied(
    agent: Agent,
    holders: Holders,
    flintlockd: FakeFlintlockd,
    hold: Callable[[Holders], Awaitable[Holding]],
    detail: str,
) -> None:
    holding = await hold(holders)
    error = await refusal(agent, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == detail.format(
        claim=f"{holders.namespace}/{holding.claim}", node=agent.config.node_name
    )
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-013")
async def test_a_claim_just_bound_runs_commands_before_its_expiry_is_recorded_but_not_long(
    pki: Pki, holders: Holders, flintlockd: FakeFlintlockd, agent_identity: KubeConfig
) -> None:
    """The bind's own status write is enough: battery's expiry, read by the operator after it
    (CL-016), is not waited for during `UNREAD_EXPIRY_GRACE` after status.boundTime, which no
    Lease battery hands out can end within (PO-104). Judged by a clock the test sets."""
    holding = await holders.hold(expires_in=None)
    body = k8s.CustomObjectsApi(holders.api).get_namespaced_custom_object(
        names.GROUP, names.VERSION, holders.namespace, names.CLAIM_PLURAL, holding.claim
    )
    bound = MicroVMClaim.from_dict(body).status.bound_time
    assert bound is not None
    clock = FakeClock(bound + UNREAD_EXPIRY_GRACE - timedelta(milliseconds=100))
    async with running_agent(pki, agent_identity, flintlockd.target, clock=clock) as agent:
        async with agent.channel() as channel:
            responses = await run_exec(
                channel, holding.metadata, Start(uid=holding.microvm_uid, cmd="true")
            )
        assert responses[-1].exit_code == 0
        clock.set(bound + UNREAD_EXPIRY_GRACE)
        error = await refusal(agent, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == (
        f"claim: claim {holders.namespace}/{holding.claim} has no lease expiry yet"
    )
    assert [s.cmd for s in await flintlockd.exec_history()] == ["true"]


@pytest.mark.req("EA-014")
async def test_when_the_api_server_cannot_be_reached_every_call_is_unavailable(
    pki: Pki, holders: Holders, flintlockd: FakeFlintlockd, agent_identity: KubeConfig
) -> None:
    holding = await holders.hold()
    nowhere = KubeConfig(
        server=f"https://127.0.0.1:{free_port()}", ca_data=agent_identity.ca_data, token="x"
    )
    async with running_agent(pki, nowhere, flintlockd.target) as agent:
        error = await refusal(agent, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert error.details() == "token review: the review could not be made (ConnectionFailed)"
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-014")
async def test_when_the_claim_cannot_be_read_the_call_is_unavailable(
    pki: Pki, holders: Holders, flintlockd: FakeFlintlockd, cluster: ControlPlane
) -> None:
    """An agent identity allowed TokenReviews but not claim reads: the claim lookup fails."""
    holding = await holders.hold()
    api = admin_client(cluster)
    try:
        ensure_service_account(api, AGENT_NAMESPACE, "reviewer-only")
        k8s.RbacAuthorizationV1Api(api).create_cluster_role_binding(
            {
                "metadata": {"generateName": "reviewer-only-"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:auth-delegator",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "reviewer-only",
                        "namespace": AGENT_NAMESPACE,
                    }
                ],
            }
        )
        token = request_token(api, AGENT_NAMESPACE, "reviewer-only")
    finally:
        api.close()
    config = KubeConfig.from_dict(cluster.kubeconfig(token=token))
    async with running_agent(pki, config, flintlockd.target) as agent:
        error = await refusal(agent, holding.metadata, Start(uid=holding.microvm_uid, cmd="true"))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert error.details() == (
        f"claim lookup: claim {holders.namespace}/{holding.claim} could not be read (Forbidden)"
    )
    await assert_nothing_ran(flintlockd)


# --- the request itself ------------------------------------------------------------------------


@pytest.mark.req("EA-020")
async def test_a_first_message_that_is_not_a_start_is_invalid(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()

    async def stdin_first() -> AsyncIterator[Request]:
        yield Request(stdin=b"echo hi\n")

    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(
            stdin_first(), metadata=holding.metadata, timeout=10
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await drain(call)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "request: the first message must be a start message"
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-020")
async def test_a_first_message_that_does_not_decode_is_invalid(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()

    async def garbage() -> AsyncIterator[bytes]:
        yield b"\xff\xff\xff\xff garbage"

    async with agent.channel() as channel:
        raw = channel.stream_stream(f"/{EXEC_SERVICE}/ExecCommand")  # bytes as they are
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await drain(raw(garbage(), metadata=holding.metadata, timeout=10))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "request: the first message is not an ExecCommandRequest"
    await assert_nothing_ran(flintlockd)


@pytest.mark.req("EA-020")
async def test_a_second_start_ends_the_exchange_and_is_never_run(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    first = Start(uid=holding.microvm_uid, cmd="cat", has_stdin=True)
    second = Start(uid=holding.microvm_uid, cmd="touch", args=["second-ran"])
    echoed = asyncio.Event()

    async def requests() -> AsyncIterator[Request]:
        yield Request(start=first)
        yield Request(stdin=b"ping")
        await echoed.wait()  # the first command runs before the second start is sent
        yield Request(start=second)
        await asyncio.Event().wait()  # keep the stream open; the agent must end it

    async with agent.channel() as channel:
        call = MicroVMExecStub(channel).ExecCommand(
            requests(), metadata=holding.metadata, timeout=20
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await drain(call, on=lambda r: echoed.set() if r.stdout == b"ping" else None)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "request: a second start message"
    assert [s.cmd for s in await flintlockd.exec_history()] == ["cat"]


@pytest.mark.req("EA-020")
async def test_a_message_above_the_size_limit_is_refused_before_anything_runs(
    agent: Agent, holders: Holders, flintlockd: FakeFlintlockd
) -> None:
    holding = await holders.hold()
    huge = "x" * (agent.config.max_message_bytes + 1)
    error = await refusal(
        agent, holding.metadata, Start(uid=holding.microvm_uid, cmd="echo", args=[huge])
    )
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await assert_nothing_ran(flintlockd)


# --- the MicroVM service -------------------------------------------------------------------------


@pytest.mark.req("EA-003", "EA-010")
async def test_server_info_needs_an_authenticated_caller_only(
    agent: Agent, holders: Holders
) -> None:
    holding = await holders.hold()
    async with agent.channel() as channel:
        stub = microvms_pb2_grpc.MicroVMStub(channel)
        info = await stub.ServerInfo(empty_pb2.Empty(), metadata=holding.metadata, timeout=10)
        assert info.exec_enabled
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ServerInfo(empty_pb2.Empty(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.req("EA-003", "EA-013")
async def test_get_microvm_answers_the_holder_about_its_own_microvm_only(
    agent: Agent, holders: Holders
) -> None:
    mine = await holders.hold()
    theirs = await holders.hold()
    async with agent.channel() as channel:
        stub = microvms_pb2_grpc.MicroVMStub(channel)
        answer = await stub.GetMicroVM(
            microvms_pb2.GetMicroVMRequest(uid=mine.microvm_uid), metadata=mine.metadata, timeout=10
        )
        assert answer.microvm.spec.uid == mine.microvm_uid
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetMicroVM(
                microvms_pb2.GetMicroVMRequest(uid=theirs.microvm_uid),
                metadata=mine.metadata,
                timeout=10,
            )
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListMicroVMs(
                microvms_pb2.ListMicroVMsRequest(namespace=holders.namespace),
                metadata=mine.metadata,
                timeout=10,
            )
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
