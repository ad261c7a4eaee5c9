"""HTTP Basic credentials on a real master (``[master.http] credentials``): a v1
framework's principal and secret make it its principal for the ACLs, on the fast
lane and on aiohttp's route alike; wrong ones get 401; the stream stays its
principal's. The operator endpoints read the same credentials."""

from __future__ import annotations

import base64
import http.client
import json

import pytest

from mezzo.acls import ANY

from .v1_client import V1Scheduler


def basic(principal: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{principal}:{secret}".encode()).decode()


ETL = basic("etl", "s3cret")
OPS = basic("ops", "0ps")


@pytest.fixture
def cluster(mezzo_cluster, tmp_path):
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps({"credentials": [{"principal": "etl", "secret": "s3cret"},
                                                {"principal": "ops", "secret": "0ps"}]}))
    # No TLS: agents are anonymous and may register; only etl runs frameworks; anyone
    # sees the master and agents (the fixture waits on them), only ops the frameworks.
    acls = {
        "permissive": False,
        "register_agents": [{"principals": ANY}],
        "register_frameworks": [{"principals": ["etl"], "roles": ANY}],
        "run_tasks": [{"principals": ["etl"], "users": ANY}],
        "view_cluster": [{"principals": ANY}],
        "view_frameworks": [{"principals": ["ops"], "users": ANY}],
    }
    return mezzo_cluster(
        agents=1,
        master={"allocation_interval": 0.02, "acls": acls, "http": {"credentials": str(path), "event_heartbeat": 0.3}},
        agent_resources="cpus:2;mem:1024",
    )


@pytest.fixture
def scheduler(cluster):
    made: list[V1Scheduler] = []

    def make(authorization: str | None) -> V1Scheduler:
        s = V1Scheduler(cluster.master, {"name": "basic"}, authorization=authorization)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def exchange(cluster, method: str, path: str, headers: dict[str, str], body: str | None = None):
    """One request on a new connection: (status, headers lower-cased, text)."""
    conn = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        conn.close()


def get(cluster, path: str, authorization: str | None) -> tuple[int, dict[str, str], str]:
    return exchange(cluster, "GET", path, {"Authorization": authorization} if authorization else {})


def test_a_framework_with_credentials_is_its_principal_and_runs_a_task(cluster, scheduler) -> None:
    s = scheduler(ETL)
    assert s.subscribe().status == 200
    offer = s.offers()[0]
    assert s.launch(offer, "with-credentials", "true") == (202, "")  # on the fast lane
    s.wait_state("with-credentials", "TASK_FINISHED")
    status, _, body = get(cluster, "/state", OPS)
    assert status == 200
    framework = next(f for f in json.loads(body)["frameworks"] if f["id"] == s.framework_id)
    assert framework["principal"] == "etl"


def test_wrong_credentials_are_401_with_a_challenge_and_none_are_anonymous(cluster, scheduler) -> None:
    wrong = scheduler(basic("etl", "guess"))
    response = wrong.subscribe()
    assert response.status == 401 and response.getheader("WWW-Authenticate") == 'Basic realm="mezzo"'
    assert "wrong principal or secret" in response.read().decode()
    anonymous = scheduler(None)
    response = anonymous.subscribe()
    assert response.status == 403  # the ACLs refuse an anonymous framework, as a certificate-less one
    assert "may not" in response.read().decode()
    assert get(cluster, "/state", basic("ops", "nope"))[0] == 401
    log = (cluster.dir / "master.log").read_text(errors="replace")
    assert "action=authenticate" in log and "nope" not in log  # audited, the secret not written
    status, _, body = get(cluster, "/state", None)
    assert status == 200 and json.loads(body)["frameworks"] == [] and "partial" in json.loads(body)


def post_call(cluster, s: V1Scheduler, headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
    """A REVIVE on ``s``'s stream with exactly ``headers`` besides the call's own."""
    body = json.dumps({"type": "REVIVE", "framework_id": {"value": s.framework_id}})
    sent = {"Content-Type": "application/json", "Mesos-Stream-Id": s.stream_id, **headers}
    return exchange(cluster, "POST", "/api/v1/scheduler", sent, body)


def test_calls_on_a_stream_need_its_principals_credentials_on_either_path(cluster, scheduler) -> None:
    s = scheduler(ETL)
    s.subscribe()
    # Of the common shape: the fast lane answers (no Server header: aiohttp writes one).
    status, headers, _ = post_call(cluster, s, {"Authorization": ETL})
    assert (status, "server" in headers) == (202, False)
    status, headers, text = post_call(cluster, s, {"Authorization": OPS})
    assert status == 403 and "not the principal that subscribed" in text and "server" not in headers
    # aiohttp's route (an Origin header of this host keeps a request off the lane): alike.
    here = {"Origin": f"http://127.0.0.1:{cluster.port}"}
    status, headers, _ = post_call(cluster, s, {**here, "Authorization": ETL})
    assert (status, "server" in headers) == (202, True)
    assert post_call(cluster, s, {**here, "Authorization": OPS})[0] == 403
    # Wrong credentials get the one 401 either way: JSON, with the challenge.
    for extra in ({}, here):
        status, headers, text = post_call(cluster, s, {**extra, "Authorization": basic("etl", "guess")})
        assert status == 401 and headers["www-authenticate"] == 'Basic realm="mezzo"'
        assert json.loads(text) == {"error": "Authorization: wrong principal or secret", "status": 401}
